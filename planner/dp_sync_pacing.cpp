// ZeRO-2 and -3, which sync every micro-batch: each pass with its gathers and reduce-scatter
// on its links (SyncPricing::paced), the stage that paces the pipeline, and the DP stream's end.
#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "planner/dp_sync_pricing.h"
#include "planner/parallel.h"
#include "planner/stage_pricing.h"

namespace moe::dp_sync {

// `shared_reduce`: the backward carries only the part of its gradient reduce-scatter that
// shares the link with its gathers (as much as they take; the simulator starts the two
// together and the link splits between them), the rest running on behind the pass.
Paced SyncPricing::paced(int64_t s, bool shared_reduce) {
  const StageTimes& own = stage(s);
  const DpSync& sy = sync_of(s);
  Seconds pass_forward = own.forward, pass_backward = own.backward;
  // Of each pass's fill, the share that runs with no sync beside it.
  double fill_forward = 1.0, fill_backward = 1.0;
  if (c_.zero_stage >= 3) {
    // Every pass gathers its weights, and every backward reduce-scatters its gradients, on the
    // links its own traffic takes (one after another on the DP stream): each pass shares them
    // as the windows above do, and waits for its gathers.
    // A pass starts with its first layer's gather (later ones run while the layers before
    // them compute), so each model chunk's pass waits for one layer's weights with nothing to
    // hide behind, and its last layer computes after its own gather, the last on the DP
    // stream. (Without the first, APTMoE's MoE-M-16 on the A800 cluster, pp = 8, vpp = 4: the
    // simulator 15.9 % over the planner, which ranked that ZeRO-3 layout first; with it added
    // to all the gathers, a one-layer model waited for its gather twice, 15 % over.) In the
    // forward that first gather runs before the pass's own traffic, so only the others share
    // its links (with all of them sharing, one layer a stage over pp = 2: the simulator 19.6 %
    // under the planner, now 10.7 %; the backward's reduce-scatters keep the rest).
    const int64_t layers = layers_in_stage(*ctx_.model, p_, s);
    const double layer_share = layers > 0 ? std::min(1.0, v_ / static_cast<double>(layers)) : 0.0;
    const Seconds first = sy.all_gather * layer_share;
    const double later = 1.0 - layer_share;
    // The later gathers run beside the layers before each chunk's last and meet their traffic
    // only: the last layer computes after its own gather, the links its own again. (Beside
    // the whole pass, five MoE layers over 16 A800s with EP and DP across the NICs: the
    // simulator's forward ran its 46 ms gathers at 67 ms each and then its last layer's 22 ms,
    // 336 ms in all, where the planner priced 382 and came out 8.6 % over it.)
    const auto [f, later_gathered] =
        window(s, sy.all_gather * later, sy.all_gather_in_node * later, false, Beside(later));
    const Seconds gathered = first + later_gathered;
    // The backward's link carries its gathers and its reduce-scatter (`shared_reduce`: the
    // part of it that shares the link with the gathers, as much as they take; the simulator
    // starts the two together and the link splits between them), but its last layer's gather
    // waits only for the gathers and that shared part: the rest of the reduce-scatter runs on
    // beside the layer. (The whole reduce-scatter ahead of it, one MoE layer a stage whose
    // gradients take twice its weights' time: 9.7 % over the simulator.)
    const double rs_share =
        sy.reduce_scatter.value() > 0 ? std::min(1.0, sy.all_gather / sy.reduce_scatter) : 1.0;
    const double carried = shared_reduce ? rs_share : 1.0;
    const Seconds on_link = sy.all_gather + sy.reduce_scatter * carried;
    // A reduce-scatter no longer than the gathers ends with them, and the backward's last layer
    // has the links to itself as the forward's does.
    const bool reduced_with_gathers = sy.reduce_scatter <= sy.all_gather;
    const auto [b, synced] =
        window(s, on_link, sy.all_gather_in_node + sy.reduce_scatter_in_node * carried, true,
               Beside(reduced_with_gathers ? later : 1.0));
    const Seconds gathers_done =
        on_link.value() > 0 ? synced * ((sy.all_gather + sy.reduce_scatter * rs_share) / on_link)
                            : synced;
    // The pass before this one on the stage sends its output on as this one starts (a
    // backward's to the stage before, ahead of a forward; a forward's to the next, ahead of a
    // backward): where that hop takes the sync's NICs, the first gather splits them with it.
    // (Left alone, ZeRO-3 over the A800 nodes at pp = 2, vpp = 4: every chunk's first gather
    // ran 8 ms longer beside a 9.4 ms send, 8.8 % over the planner.)
    // GPipe runs a stage's forwards back to back, then its backwards: the pass before is of the
    // same kind and sends the other way. One micro-batch has no pass before on the stage close
    // enough to share with. (With the 1F1B neighbour's send counted, one micro-batch under
    // GPipe over two A800 stages priced stage 1's forward and stage 0's backward 7.6 ms longer
    // each: 4.8 % over the simulator.)
    auto hop_beside = [&](bool backward_pass) {
      if (pp_ == 1 || pipeline_.hops.empty() || !sy.crosses_nodes || microbatches_ <= 1)
        return Seconds(0);
      const bool towards_next = c_.gpipe ? !backward_pass : backward_pass;
      const int64_t from = towards_next ? s : (s + pp_ - 1) % pp_;
      const int64_t to = (from + 1) % pp_;
      // Without interleaving nothing wraps from the last stage to the first.
      if (*p_.vpp == 1 && to == 0) return Seconds(0);
      if (!boundary_crosses_nodes(ctx_, p_, from, to)) return Seconds(0);
      Seconds hop = pipeline_.hops[static_cast<size_t>(to)];
      // 1F1B runs a stage's backward right after a forward only in its steady state, and the
      // first of those waits for the pipeline's round trip, the forward's send long done: the
      // warm-up's share of the micro-batches has none beside it. (Every backward's, ZeRO-3 over
      // GB200 racks at pp = 2 with two micro-batches: the planner 4.2 % over the simulator.)
      if (backward_pass && !c_.gpipe && *p_.vpp == 1) {
        const int64_t warm = std::min(microbatches_, pp_ - s - 1);
        const int64_t beside = std::max<int64_t>(0, microbatches_ - warm - 1);
        hop = hop * (static_cast<double>(beside) / static_cast<double>(microbatches_));
      }
      return hop;
    };
    // What each chunk's first gather holds its pass up by. The host issues a layer once the
    // layer before it has ended (simulator/training_pass.cpp, host_issue): while the GPU waits
    // for the gather, only that first layer's own wait for the host hides it, not the whole
    // pass's. (With the pass's, a host-bound forward hid the first gather, whose layer then held
    // up the host issuing the next: ZeRO-3 over GB200 racks, 2.0 ms of a 35 ms forward.) What
    // the pass runs ahead of its layers (`lead`) hides it too. A backward's first gather splits
    // the link with its reduce-scatter, which starts with it. (Alone, one MoE layer over the
    // A800 nodes with MoNTA O1: its 2.5 ms gather ran 4.9 ms and the planner came out 8.8 %
    // under the simulator.)
    auto first_wait = [&](bool backward_pass, Seconds lead) {
      const Seconds one = first / v_;
      const Seconds gather = one + std::min(one, hop_beside(backward_pass)) +
                             (backward_pass ? std::min(one, sy.reduce_scatter) : Seconds(0));
      const int64_t lead_chunk = backward_pass ? *p_.vpp - 1 : 0;
      Seconds wait;
      for (int64_t k = 0; k < *p_.vpp; ++k) {
        const LayerRange r = chunk_layers(*ctx_.model, p_, s, k);
        Seconds hidden = k == lead_chunk ? lead : Seconds(0);
        if (r.size() > 0) {
          const StageTimes& layer = pipeline_.kinds->of(
              ctx_, s, static_cast<size_t>(backward_pass ? r.end - 1 : r.begin));
          hidden += backward_pass ? layer.host_backward : layer.host_forward;
        }
        wait += std::max(Seconds(0), gather - hidden);
      }
      return wait;
    };
    // What a pass runs outside its layers: `lead` before the first (a backward's output head
    // and MTP modules, a forward's embedding), which its chunk's first gather runs beside, and
    // `trail` after the last (a forward's output head, a backward's embedding gradient), which
    // waits for the last layer as that waits for its gather. The last layer's share of the
    // pass leaves both out (one layer beside a 129K-vocabulary head: 16 % over the simulator,
    // the head counted in both).
    const StageTimes before = before_first_layer(ctx_, c_, s);
    const StageTimes after = after_last_layer(ctx_, c_, *pipeline_.kinds, s);
    // After the last gather: each chunk's last layer and what the pass runs after its layers.
    auto after_gathers = [&](Seconds pass, Seconds lead, Seconds trail) {
      return pass.value() > 0
                 ? std::clamp(((pass - lead - trail) * layer_share + trail) / pass, 0.0, 1.0)
                 : 1.0;
    };
    fill_forward = after_gathers(own.forward, before.forward, after.forward);
    fill_backward = after_gathers(own.backward, after.backward, before.backward);
    // The last layer runs after its gather at its own pass's pace (`last_pass`).
    auto gated = [&](Seconds pass, Seconds last_pass, Seconds host, Seconds syncs,
                     bool backward_pass) {
      const Seconds lead = backward_pass ? after.backward : before.forward;
      const Seconds trail = backward_pass ? before.backward : after.forward;
      return std::max(pass + first_wait(backward_pass, lead),
                      syncs + (last_pass - host - lead - trail) * layer_share + trail);
    };
    pass_forward = gated(f, own.forward, own.host_forward, gathered, false);
    pass_backward =
        gated(b, reduced_with_gathers ? own.backward : b, own.host_backward, gathers_done, true);
  }
  // Each link is shared by everything that crosses it, however well each transfer hides behind
  // compute alone: a pass takes at least its links' work (a roofline per link and direction of
  // the pass; the simulator shares them flow by flow). The forward cannot borrow the idle link
  // time of a backward that is twice as long: Qwen3-30B-A3B with TP = 4 and EP = 8 in the node
  // sends 2.2 ms a layer over NVLink in a forward of 1.3 ms of compute. The NIC carries groups
  // that leave the node, the node's fabric the rest.
  const LinkLoads traffic = link_traffic(ctx_, p_, own);
  const LinkLoads own_forward = pass_traffic(traffic, false);
  const LinkLoads own_backward = pass_traffic(traffic, true);
  LinkLoads forward_links = own_forward, backward_links = own_backward;
  auto on_link = [&](bool crosses, Seconds forward, Seconds backward) {
    (crosses ? forward_links.nic : forward_links.fabric) += forward;
    (crosses ? backward_links.nic : backward_links.fabric) += backward;
  };
  // ZeRO-2 reduce-scatters a micro-batch's gradients as its backward produces them
  // (DeepSpeed's overlap_comm; the simulator starts it with the backward): the backward's link
  // carries it for as long as the backward lasts, and the rest spills into the next forward.
  // (Spread over both passes by their length, MemFine Model II on the A800 cluster, EP = 32
  // and DP = 4 on the NICs, came out 12.6 % under the simulator: its forward has the NIC to
  // itself.) ZeRO-3 gathers before each pass and reduce-scatters within its backward.
  if (c_.zero_stage == 2) {
    const Seconds backward_link = backward_links.on(sy.crosses_nodes);
    const Seconds within = std::min(sy.reduce_scatter, std::max(pass_backward, backward_link));
    on_link(sy.crosses_nodes, sy.reduce_scatter - within, within);
  } else if (c_.zero_stage >= 3) {
    // MegaScale's hierarchical sync of the weights Ulysses SP replicates keeps its in-node step
    // on NVLink even where DP crosses nodes (the windows above split them alike). (All of it on
    // the NIC, GPT-39B over 240 H800 with Ulysses and ZeRO-3: the planner 14 % over the
    // simulator, which had the NIC 77 % busy.)
    const Seconds reduced =
        shared_reduce ? std::min(sy.all_gather, sy.reduce_scatter) : sy.reduce_scatter;
    const Seconds reduced_in_node = sy.reduce_scatter.value() > 0
                                        ? sy.reduce_scatter_in_node * (reduced / sy.reduce_scatter)
                                        : Seconds(0);
    const Seconds gathered_in_node = sy.crosses_nodes ? sy.all_gather_in_node : Seconds(0);
    const Seconds scattered_in_node = sy.crosses_nodes ? reduced_in_node : Seconds(0);
    on_link(sy.crosses_nodes, sy.all_gather - gathered_in_node,
            sy.all_gather - gathered_in_node + reduced - scattered_in_node);
    on_link(false, gathered_in_node, gathered_in_node + scattered_in_node);
  }
  const Seconds nic = forward_links.nic + backward_links.nic;
  const Seconds fabric = forward_links.fabric + backward_links.fabric;
  // Syncs that load a pass's link beyond its own traffic stretch it from its bottleneck, and
  // the pass keeps what it took beyond that (a pipelined layer's fill, or the compute a serial
  // chain waits for): ZeRO-3 gathers on a link-bound pass add their whole time.
  // (The fill is the ungated pass's: ZeRO-3's wait for its gathers is what the link adds.)
  // ZeRO-3's gathers run beside every layer but each chunk's last, which keeps its share of the
  // fill with what the pass runs after its layers (the whole fill, seven layers over 16 A800s
  // with 113 ms gathers a layer across the NICs: 61 ms where the simulator's last layer added
  // 41 after the gathers, 4.2 % over it).
  auto held_to = [](Seconds pass, Seconds ungated, Seconds compute, const LinkLoads& unloaded,
                    const LinkLoads& loaded, double fill_share) {
    const Seconds fill =
        std::max(Seconds(0), ungated - std::max({compute, unloaded.nic, unloaded.fabric})) *
        fill_share;
    return std::max(pass, std::max(loaded.nic, loaded.fabric) + fill);
  };
  // (The fill is the GPU's: the host issues the pass while its links are busy. The backward's
  // compute holds what recompute replays: counted as fill, a ZeRO-3 layout with full
  // recompute over the NICs came out 15 % over the simulator.)
  const Seconds forward = held_to(pass_forward, own.forward - own.host_forward, own.compute / 3.0,
                                  own_forward, forward_links, fill_forward);
  const Seconds backward = held_to(pass_backward, own.backward - own.host_backward,
                                   own.compute * (2.0 / 3.0) + own.recompute, own_backward,
                                   backward_links, fill_backward);
  // The rest of the reduce-scatter takes the link time the backward leaves idle on it, and
  // only what does not fit runs on behind. (All of it behind, the first stage's 1.8 ms rest
  // beside a backward that kept its NIC busy 6.5 ms of 8.0: 7.2 % over the simulator.)
  const Seconds rest = shared_reduce && c_.zero_stage >= 3
                           ? sy.reduce_scatter - std::min(sy.all_gather, sy.reduce_scatter)
                           : Seconds(0);
  const Seconds idle = std::max(Seconds(0), backward - backward_links.on(sy.crosses_nodes));
  const Seconds tail = std::max(Seconds(0), rest - idle);
  return Paced{forward,
               backward,
               nic,
               fabric,
               forward_links.on(sy.crosses_nodes),
               backward_links.on(sy.crosses_nodes),
               tail,
               s};
}

// ZeRO-2 and -3 sync every micro-batch on the links the pass's own traffic takes: the stage
// that paces the pipeline is the slowest with its syncs, which need not be the slowest
// without (a last stage lighter in weights but heavier in compute, DeepSeek-V3's with its MTP
// module, hid less of the middle stages' syncs than it seemed to). The candidates: the
// slowest stage and the one with the most to sync; each one's pass, and its links' load per
// micro-batch.
Paced SyncPricing::pacing_stage() {
  const int64_t slowest = pipeline_.slowest_stage;
  Paced worst = paced(slowest);
  if (c_.zero_stage >= 2) {
    int64_t heaviest = slowest;
    for (int64_t s = 0; s < pp_; ++s) {
      const DpSync& a = sync_of(s);
      const DpSync& b = sync_of(heaviest);
      if (a.reduce_scatter + a.all_gather > b.reduce_scatter + b.all_gather) heaviest = s;
    }
    if (heaviest != slowest) {
      const Paced other = paced(heaviest);
      if (other.pass() > worst.pass()) worst = other;
    }
  }
  return worst;
}

// ZeRO-2 and -3 reduce-scatter every micro-batch's gradients one after another on the DP
// stream, each from the start of its backward (ZeRO-2's after the weights' gather): none
// before the stage's first backward, however idle the link is in the warm-up. Where they
// outlast the passes, the stream ends the iteration at the first backward plus every
// micro-batch's. (Counting the warm-up as link time, GPT-145B over 240 H800 at pp 10, vpp 4
// with 34.6 ms of reduce-scatter beside each 22.3 ms chunk backward: the simulator's stream
// ran 715 ms before its first, and the planner came out 6 % under it.)
// ZeRO-3's passes gather their weights meanwhile, the pacing stage's forwards as priced, the others
// no shorter than their gathers, and a stream that outlasts the passes has every gather and every
// byte of TP/EP/CP traffic the passes send after its start beside it: each takes its link from the
// step of the reduce-scatter that runs there for that step's share of the stream (a hierarchical
// one's in-node step on NVLink, its step across on the NIC). (Without them, ZeRO-3 over GB200 racks
// with SP over 64 GPUs, each backward's 14 ms in-node step beside 7 ms of in-node gathers: the
// planner 8.3 % under the simulator; without the traffic, GPT-39B over 240 H800 with SP over
// the node's 8 GPUs and ZeRO-3, one micro-batch whose in-node step met TP's all-to-alls: 7.9 %
// under.)
Seconds SyncPricing::reduce_stream_end(int64_t microbatches, const Paced& paced) {
  const bool zero3 = c_.zero_stage >= 3;
  // Each stage's one pass, or its model chunks' (which the windows may have priced already).
  std::vector<ChunkTimes> passes;
  if (*p_.vpp > 1) {
    if (pipeline_.chunks.empty()) pipeline_.chunks = chunk_times(ctx_, c_, *pipeline_.kinds);
    if (zero3) passes = pipeline_.chunks;
  } else {
    passes.resize(static_cast<size_t>(pp_));
    for (int64_t s = 0; s < pp_; ++s) {
      passes[static_cast<size_t>(s)].forward = {stage(s).forward};
      passes[static_cast<size_t>(s)].backward = {stage(s).backward};
    }
  }
  if (zero3) {
    for (int64_t s = 0; s < pp_; ++s) {
      const Seconds own = stage(s).forward;
      const Seconds gathered =
          s == paced.stage ? paced.forward : std::max(own, sync_of(s).all_gather);
      for (Seconds& f : passes[static_cast<size_t>(s)].forward)
        f = own.value() > 0 ? f * (gathered / own) : gathered / v_;
    }
  }
  const std::vector<ChunkTimes>& chunks = *p_.vpp > 1 && !zero3 ? pipeline_.chunks : passes;
  const std::vector<Seconds> hops =
      pipeline_.hops.empty() ? std::vector<Seconds>(static_cast<size_t>(pp_)) : pipeline_.hops;
  std::vector<Seconds> gathers(static_cast<size_t>(pp_));
  if (!zero3) {
    for (int64_t s = 0; s < pp_; ++s) gathers[static_cast<size_t>(s)] = sync_of(s).all_gather;
  }
  const std::vector<Seconds> first =
      first_backward_starts(chunks, microbatches, hops, c_.gpipe, gathers);
  Seconds end;
  for (int64_t s = 0; s < pp_; ++s) {
    const DpSync& own = sync_of(s);
    const double mb = static_cast<double>(microbatches);
    Seconds streamed = own.reduce_scatter * mb;
    if (zero3 && own.reduce_scatter.value() > 0) {
      // Every backward, and 1F1B's forwards after the warm-up's, with their gathers and their
      // own traffic on each link.
      const int64_t warm = std::min(microbatches, pp_ - s);
      const double forwards = c_.gpipe ? 0.0 : static_cast<double>(microbatches - warm);
      const LinkLoads traffic = traffic_of(s);
      const LinkLoads forward = pass_traffic(traffic, false),
                      backward = pass_traffic(traffic, true);
      // What rides the node's fabric: a hierarchical sync's in-node steps, or the whole sync
      // where DP stays in the node.
      const Seconds ag_fabric = own.crosses_nodes ? own.all_gather_in_node : own.all_gather;
      const Seconds ag_nic = own.all_gather - ag_fabric;
      const double in_share =
          own.crosses_nodes ? own.reduce_scatter_in_node / own.reduce_scatter : 1.0;
      const Seconds on_fabric =
          (ag_fabric + backward.fabric) * mb + (ag_fabric + forward.fabric) * forwards;
      const Seconds on_nic = (ag_nic + backward.nic) * mb + (ag_nic + forward.nic) * forwards;
      streamed += on_fabric * in_share + on_nic * (1.0 - in_share);
    }
    const Seconds start =
        std::max(first[static_cast<size_t>(s)], zero3 ? Seconds(0) : own.all_gather);
    end = std::max(end, start + streamed);
  }
  return end;
}

}  // namespace moe::dp_sync
