#include "planner/dp_sync_exposure.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "planner/dp_sync_pricing.h"
#include "planner/parallel.h"
#include "planner/stage_pricing.h"

namespace moe {
namespace dp_sync {

// ZeRO-1 (distributed optimizer): one gradient reduce-scatter and one parameter all-gather per
// iteration, hidden behind the last backward / first forward. ZeRO-2 keeps no full gradient
// buffer, so gradients are reduce-scattered after every micro-batch, asynchronously behind the
// next micro-batch (only the last one's remainder shows here; the rest is link time, below),
// and gathers the updated weights once per iteration. ZeRO-3 gathers the weights before each
// forward and backward of every micro-batch, which gates the pass.
// Each stage syncs its own weights behind its own passes, and not every stage's shows: the
// last micro-batch's backward runs from the last stage down to stage 0, so stage s starts its
// reduce-scatter the backward passes of stages 0..s-1 and their hops before the iteration
// ends, and its first forward waits as long after the iteration starts, time its all-gather
// has too. Stage 0 has none of that slack and holds the embedding: its sync, more often than
// the slowest stage's, is the one that shows. Interleaved, each model chunk syncs its own
// weights, one chunk after another on the DP stream: chunk c's gather (1/v of the stage's)
// runs beside chunk c's first forward, which c p forwards of the earlier chunks precede, and
// chunk c's reduce-scatter starts with its last backward, which c p backwards of the earlier
// chunks follow. The chain shows by the most any chunk's sync outlasts that: over chunks k
// with passes q_k, max (k + 1) T / v - q_k - p (q_0 + ... + q_{k-1}) for a sync of T, which
// is max(T/v - q, T - q - (v - 1) p q) where the chunks take q alike, and T - q when v = 1.
// (Against the stage's whole sync beside one pass, Qwen3-30B-A3B on 240 H800 at pp = 2,
// vpp = 4 came out 4.8 % over the simulator.)

// Model chunk k's forward or backward on stage s, one micro-batch: the stage's own without
// interleaving.
Seconds SyncPricing::chunk_pass(int64_t s, int64_t k, bool backward_pass) {
  if (*p_.vpp == 1) return backward_pass ? stage(s).backward : stage(s).forward;
  if (pipeline_.chunks.empty()) pipeline_.chunks = chunk_times(ctx_, c_, *pipeline_.kinds);
  const ChunkTimes& own = pipeline_.chunks[static_cast<size_t>(s)];
  return (backward_pass ? own.backward : own.forward)[static_cast<size_t>(k)];
}

const std::vector<Exposed>& SyncPricing::exposed(bool backward_pass) {
  std::vector<Exposed>& e = exposed_[backward_pass ? 1 : 0];
  if (e.empty()) e = price_exposed(backward_pass);
  return e;
}

// The first stage whose sync shows most.
const Exposed& SyncPricing::most_exposed(bool backward_pass) {
  const std::vector<Exposed>& all = exposed(backward_pass);
  const Exposed* best = &all.front();
  for (const Exposed& e : all)
    if (e.exposure > best->exposure) best = &e;
  return *best;
}

std::vector<Exposed> SyncPricing::price_exposed(bool backward_pass) {
  std::vector<Exposed> out;
  // Interleaved, a micro-batch goes round every stage once a chunk: chunk k's first forward
  // (last backward) waits for that round of each chunk before it, as well as for this stage's
  // own p passes of them. The round's hops hide a sync only on another link: where both cross
  // nodes they share the NICs (a 32 MB hop over PCIe-era NICs beside ZeRO-1's gathers, counted
  // as window: 18.6 % under the simulator, 5.1 % without).
  // Each hop is the boundary's own (pipeline_.hops[s]: into stage s, the wrap at 0): a stage
  // boundary between nodes waits for the NICs where the others take NVLink.
  // Whether the hop after stage s takes the sync's NICs: the boundary's own link, as priced.
  auto hop_shares_link = [&](int64_t s) {
    return sync_.crosses_nodes && boundary_crosses_nodes(ctx_, p_, s, (s + 1) % pp_);
  };
  auto hop_after = [&](int64_t s) {
    return pipeline_.hops.empty() ? Seconds(0) : pipeline_.hops[static_cast<size_t>((s + 1) % pp_)];
  };
  std::vector<Seconds> round(static_cast<size_t>(*p_.vpp));
  for (int64_t k = 0; k + 1 < *p_.vpp; ++k) {
    for (int64_t s = 0; s < pp_; ++s) {
      round[static_cast<size_t>(k)] +=
          chunk_pass(s, k, backward_pass) + (hop_shares_link(s) ? Seconds(0) : hop_after(s));
    }
  }
  Seconds slack;
  // Each chunk's window opening, pass and traffic on the links (interleaved only).
  struct Chunk {
    Seconds opens, pass;
    LinkLoads traffic;
  };
  std::vector<Chunk> chunks;
  for (int64_t s = 0; s < pp_; ++s) {
    const DpSync& own = sync_of(s);
    const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
    // Chunk k's share of the chain ends (k + 1) T / v into it, and its window is chunk k's own
    // pass after the earlier chunks' passes here or their rounds, whichever is longer. Each
    // chunk at its own time: a chunk that holds only the embedding hides nothing of its sync
    // (E|t|t|L over pp = 2, two micro-batches: with every chunk at the stage's mean, 14 % under
    // the simulator), and a light first chunk here waits for a heavy one on the next stage
    // (Et|tt|tt|L: counting this stage's passes alone, 5.7 % over).
    // The whole chain runs beside the passes of each chunk that start before it ends: p of
    // them a chunk, from the chunk's window on. (Taken as beside as many passes as it lasts,
    // OLMoE at pp 4, vpp 4 over the A800 C1+G4 nodes stretched 13 of stage 0's chunk passes
    // where the simulator's gathers met 8, the rest waiting for the round trip: 5.9 % over.)
    // The chunk whose sync shows runs its first pass beside it, after the passes of the
    // earlier chunks that start before that part of the chain ends.
    Seconds exposure(-std::numeric_limits<double>::infinity()), here, rounds;
    int64_t shown = 0;
    chunks.clear();
    for (int64_t k = 0; k < *p_.vpp; ++k) {
      const Seconds pass = chunk_pass(s, k, backward_pass);
      const Seconds opens = std::max(here, rounds);
      const Seconds shows = sync * (static_cast<double>(k + 1) / v_) - pass - opens;
      if (shows > exposure) exposure = shows, shown = k;
      if (*p_.vpp > 1) chunks.push_back({opens, pass, chunk_traffic(s, k)});
      here += pass * static_cast<double>(pp_);
      rounds += round[static_cast<size_t>(k)];
    }
    exposure -= slack;
    // The passes of chunks before `last` that start before `length` of the chain has run (and
    // `and_last`, one of chunk `last`'s), as shares of the stage's pass and traffic.
    auto passes_before = [&](size_t last, Seconds length, bool and_last) {
      Seconds time, nic, fabric, all_time, all_nic, all_fabric;
      for (size_t k = 0; k < chunks.size(); ++k) {
        const Chunk& ch = chunks[k];
        double n = 0;
        if (k < last && ch.pass.value() > 0)
          n = std::clamp((length - ch.opens) / ch.pass, 0.0, static_cast<double>(pp_));
        if (k == last && and_last) n = 1;
        time += ch.pass * n, nic += ch.traffic.nic * n, fabric += ch.traffic.fabric * n;
        all_time += ch.pass, all_nic += ch.traffic.nic, all_fabric += ch.traffic.fabric;
      }
      Beside b;
      b.time = all_time.value() > 0 ? time / all_time : 0.0;
      b.nic = all_nic.value() > 0 ? nic / all_nic : b.time;
      b.fabric = all_fabric.value() > 0 ? fabric / all_fabric : b.time;
      return b;
    };
    const double part = static_cast<double>(shown + 1) / v_;
    Exposed& e = out.emplace_back(Exposed{s, slack, exposure, Beside(), part, Beside()});
    if (chunks.empty()) {
      e.overlapped = e.chain_overlapped = Beside(overlapped(s, backward_pass));
    } else {
      e.overlapped = passes_before(static_cast<size_t>(shown), sync * part - slack, true);
      e.chain_overlapped = passes_before(chunks.size(), sync - slack, false);
    }
    // The next stage's window opens after this one's first chunk.
    slack += chunk_pass(s, 0, backward_pass) + hop_after(s);
  }
  return out;
}

// Interleaved, the chain runs beside as many chunk passes as it lasts, at most those of its
// window ((v - 1) p + 1); without interleaving, beside its one pass. A sync shorter than its
// pass shares the links for its own length only: taken as sharing the whole pass, a ZeRO-1
// reduce-scatter of 68 ms beside a 184 ms backward over the NICs came out 13 % over the
// simulator. In the stage's passes (v chunk passes each).
double SyncPricing::overlapped(int64_t s, bool backward_pass) const {
  const StageTimes& st = stage(s);
  const Seconds average_pass = (backward_pass ? st.backward : st.forward) / v_;
  const DpSync& own = sync_of(s);
  const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
  const double later_chunks = (v_ - 1.0) * static_cast<double>(pp_);
  const double beside =
      average_pass.value() > 0 ? std::clamp(sync / average_pass, 0.0, later_chunks + 1.0) : 1.0;
  return beside / v_;
}

// Interleaved, the chunk whose sync shows waits for the chain up to it, and only what that
// part met on the links delays it; but every chunk's sync stretches the passes it runs beside,
// the stage's first forwards or last backwards, which the pipeline waits for. `shown_stretch`
// is what the shown part stretched. (The whole chain's delay ahead of chunk 0's gather and
// reduce-scatter: Qwen3-30B-A3B at pp 4, vpp 4 over the A800 C1+G4 nodes priced 195 and 168 ms
// where the simulator's showed 94 and 72: 4.1 % over it.)
Seconds SyncPricing::whole_chain_stretch(const Exposed& e, bool backward_pass,
                                         Seconds shown_stretch) {
  if (e.part >= 1.0) return shown_stretch;
  const DpSync& own = sync_of(e.stage);
  const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
  const Seconds in_node = backward_pass ? own.reduce_scatter_in_node : own.all_gather_in_node;
  // The gather has run alone for the slack before the first forward.
  const Seconds left = backward_pass ? sync : std::max(Seconds(0), sync - e.slack);
  const double part = sync.value() > 0 ? left / sync : 0.0;
  const StageTimes& st = stage(e.stage);
  const Seconds pass =
      window(e.stage, left, in_node * part, backward_pass, e.chain_overlapped).first;
  return std::max(shown_stretch, pass - (backward_pass ? st.backward : st.forward));
}

// A pipeline send leaves by its stage's NIC, where that stage's DP sync runs when DP crosses
// nodes too: a send while the sync holds it goes at half the NIC until the sync ends. The first
// micro-batch's sends, ahead of every stage's first passes, meet the weights' gathers that start
// the iteration (each stage's first forward of chunk k waiting for its k + 1 gathers); the last
// micro-batch's, behind every stage's last backwards, the reduce-scatters that start with each
// stage's last backward of its last chunk. What they add to the fill and drain: the path walked
// with them against the path walked without, each ending no sooner than the syncs that gate it
// (a sync that outlasts the drain ends the iteration however slow the sends beside it were).
// (Walked at their own length, MoE layers over 16 A800s at pp 2, vpp 4 with 21 ms sends across
// nodes: the simulator's ran 43 ms beside the syncs, seven in the drain and three in the fill,
// and the planner came out 4.7 % under it.)
Seconds SyncPricing::hops_beside_syncs(bool backward_pass) {
  if (pp_ == 1 || pipeline_.hops.empty() || !sync_.crosses_nodes) return Seconds(0);
  const int64_t v = *p_.vpp;
  auto walk = [&](bool shared) {
    // The sync of each stage on its NIC, from `starts[s]` (the gathers from the start), and
    // what the sends beside it delay it by: they split the NIC.
    std::vector<Seconds> starts(static_cast<size_t>(pp_)), delays(starts);
    Seconds t, end;
    // The path in running order: forward, chunk 0 from stage 0 on; backward, chunk v - 1 from
    // the last stage down. Without interleaving nothing wraps.
    for (int64_t step = 0; step < v * pp_; ++step) {
      const int64_t k = backward_pass ? v - 1 - step / pp_ : step / pp_;
      const int64_t s = backward_pass ? pp_ - 1 - step % pp_ : step % pp_;
      const DpSync& own = sync_of(s);
      const Seconds sync = backward_pass ? own.reduce_scatter : own.all_gather;
      const auto i = static_cast<size_t>(s);
      if (backward_pass && k == v - 1) starts[i] = t;
      t += chunk_pass(s, k, backward_pass);
      // A chunk's first forward ends no sooner than its gathers.
      if (!backward_pass) t = std::max(t, sync * (static_cast<double>(k + 1) / v_) + delays[i]);
      if (step + 1 < v * pp_) {
        const int64_t to = backward_pass ? (s + pp_ - 1) % pp_ : (s + 1) % pp_;
        const int64_t later = backward_pass ? s : to;  // the boundary's hop is hops[later]
        const Seconds hop = pipeline_.hops[static_cast<size_t>(later)];
        const Seconds left = starts[i] + sync + delays[i] - t;
        t += hop;
        if (shared && left.value() > 0 && boundary_crosses_nodes(ctx_, p_, s, to)) {
          const Seconds split = std::min(hop, left / 2.0);
          t += split;
          delays[i] += split;
        }
      }
      end = std::max(end, starts[i] + sync + delays[i]);
    }
    // The gathers gate the forward's path; the reduce-scatters run on behind the drain's.
    return backward_pass ? std::max(t, end) : t;
  };
  return walk(true) - walk(false);
}

// The all-gather has run alone for the stage's slack before its first forward starts; the
// reduce-scatter shares the last backward, then runs alone for the slack. A pass the sync
// stretches delays every stage after it in the pipeline, so the stretch shows in full.
// ZeRO-1's reduce-scatter, once an iteration behind the last backward.
Seconds SyncPricing::reduce_scatter_once(const Exposed& e) {
  const DpSync& own = sync_of(e.stage);
  const Seconds unshared = stage(e.stage).backward;
  const Seconds upto = own.reduce_scatter * e.part;
  const auto [backward, rs_shared] =
      window(e.stage, upto, own.reduce_scatter_in_node * e.part, true, e.overlapped, true);
  const Seconds shown_stretch = backward - unshared;
  const Seconds stretch = whole_chain_stretch(e, true, shown_stretch);
  // Every stage starts its reduce-scatter with its last backward, and those backwards run one
  // after another down the pipeline's drain, each stretched by its own: the drain grows by
  // them all, pp of this stage's where the stages are alike. (Counting one, GLM-4.5 on 240
  // H800 at pp = 24 with EP 5 across nodes came out 9.0 % under the simulator: 24 backwards of
  // 40.2 ms each ran 59.6 ms beside their reduce-scatter.) Where they are not, each stretches
  // by its share of the traffic this one's link carries (one MoE layer against two and the
  // head over pp = 2, EP across nodes: 11 % under the simulator with the first's stretch
  // counted twice).
  // Interleaved, the drain runs one model chunk's backward a stage: the others' stretch only
  // their last chunk pass (a stage's sync runs beside `overlapped` of its passes, v chunk
  // passes each). (The whole stretch a stage, OLMoE at pp = 4 and v = 4 on the A800 nodes,
  // EP 2 beside a 201 ms reduce-scatter on PCIe: 7 % over the simulator.)
  auto chained = [&](Seconds one, double overlapped) {
    return overlapped > 1.0 ? one / (overlapped * v_) : one;
  };
  const Seconds tail =
      std::max(Seconds(0), e.exposure + (rs_shared - upto) - shown_stretch) + stretch;
  if (pp_ == 1) return tail;
  // A stage without a sync of its own (no expert weights on a stage of dense layers) keeps its
  // backward.
  auto on_sync_link = [&](int64_t s) {
    return sync_of(s).reduce_scatter.value() > 0 ? traffic_of(s).on(sync_.crosses_nodes)
                                                 : Seconds(0);
  };
  // The others stretch by their share of the traffic on a reference stage's link: this one's
  // where it stretches. Where the stage that shows carries nothing on its sync's link (dense
  // layers beside MoE stages whose EP crosses the NICs) its backward keeps its time, but the
  // others' still stretch beside their own reduce-scatters and delay it down the drain: the
  // busiest of them is the reference. (Without them, two dense layers ahead of a MoE layer
  // with EP 128 over GB200 racks: the planner 7.2 % under the simulator, whose MoE backward ran
  // 5.6 -> 10.1 ms beside its 22 ms reduce-scatter.)
  int64_t reference = e.stage;
  Seconds one = stretch, on_link = stretch.value() > 0 ? on_sync_link(e.stage) : Seconds(0);
  Beside beside = e.chain_overlapped;
  if (!(stretch.value() > 0)) {
    for (int64_t s = 0; s < pp_; ++s) {
      const Seconds t = on_sync_link(s);
      if (t > on_link) on_link = t, reference = s;
    }
    if (reference == e.stage) return tail;
    const DpSync& theirs = sync_of(reference);
    beside = Beside(overlapped(reference, true));
    one =
        window(reference, theirs.reduce_scatter, theirs.reduce_scatter_in_node, true, beside, true)
            .first -
        stage(reference).backward;
  }
  // Without traffic to weigh by, every other stage stretches alike. This stage's own stretch is
  // in the tail where it is the reference. A stage whose reduce-scatter is shorter than the
  // reference's meets only that share of its traffic. (At the reference's share, a MoE stage
  // with a 1.7 ms reduce-scatter, its experts without DP, beside a dense stage's 20 ms: 19 ms
  // where the simulator's backward stretched 1.6, the planner 10.6 % over it.)
  double others = static_cast<double>(pp_ - 1);
  if (on_link.value() > 0) {
    others = 0;
    const Seconds longest = sync_of(reference).reduce_scatter;
    for (int64_t s = 0; s < pp_; ++s) {
      if (s == e.stage && reference == e.stage) continue;
      const double met =
          longest.value() > 0 ? std::min(1.0, sync_of(s).reduce_scatter / longest) : 1.0;
      others += on_sync_link(s) / on_link * met;
    }
  }
  return tail + chained(one, beside.time) * others;
}

// ZeRO 1-2's weight all-gather, once an iteration before the first forward.
Seconds SyncPricing::all_gather_once(const Exposed& e) {
  const DpSync& own = sync_of(e.stage);
  const Seconds unshared = stage(e.stage).forward;
  const Seconds left = std::max(Seconds(0), own.all_gather * e.part - e.slack);
  const double part = own.all_gather.value() > 0 ? left / own.all_gather : 0.0;
  const auto [forward, ag_shared] =
      window(e.stage, left, own.all_gather_in_node * part, false, e.overlapped, true);
  const Seconds shown_stretch = forward - unshared;
  const Seconds stretch = whole_chain_stretch(e, false, shown_stretch);
  return std::max(Seconds(0), e.exposure + (ag_shared - left) - shown_stretch) + stretch;
}

void SyncPricing::add_to(TimeBreakdown& out) {
  microbatches_ = out.microbatches;
  const double mb = static_cast<double>(out.microbatches);
  const Seconds per_mb = pipeline_.per_mb;
  if (c_.zero_stage <= 1) {
    const Exposed e = most_exposed(true);
    out.dp_reduce_stage = e.stage;
    out.dp_reduce_scatter = sync_of(e.stage).reduce_scatter;
    out.dp_once += reduce_scatter_once(e) + hops_beside_syncs(true);
  }
  if (c_.zero_stage <= 2) {
    // The stage whose gather costs most: the one that shows most, or one whose gather, longer
    // than its slack, stretches the first forwards it runs beside, which the stages after it
    // wait for. (Stage 0's alone, MemFine's Model I at pp 3, vpp 2 over 240 H800, whose second
    // stage's 166 ms gathers took its MoE forwards from 35 to 65 ms: 3.9 % under the simulator.)
    const Exposed& shown = most_exposed(false);
    Seconds gather = all_gather_once(shown);
    int64_t stage = shown.stage;
    for (const Exposed& e : exposed(false)) {
      if (e.stage == shown.stage || sync_of(e.stage).all_gather <= e.slack) continue;
      const Seconds t = all_gather_once(e);
      if (t > gather) gather = t, stage = e.stage;
    }
    out.dp_gather_stage = stage;
    out.dp_all_gather = sync_of(stage).all_gather;
    out.dp_once += gather + hops_beside_syncs(false);
  }
  out.dp_comm += out.dp_once;
  const Paced worst = pacing_stage();
  out.dp_paced_stage = worst.stage;
  if (c_.zero_stage >= 2) out.dp_paced_reduce_scatter = sync_of(worst.stage).reduce_scatter;
  if (c_.zero_stage >= 3) out.dp_paced_all_gather = sync_of(worst.stage).all_gather;
  // ZeRO-3 gathers every pass's weights, fill and drain included: with few micro-batches each
  // stage's wait shows, not just the pacing one's (one micro-batch over four stages: the
  // planner was 41 % under the simulator), so walk the schedule again with each stage's passes
  // as its syncs stretch them: a backward's gathers share the link with its gradient
  // reduce-scatter, whose rest runs on behind the pass, the first stage's last one ending the
  // iteration. At least the slowest stage's passes with their syncs, as the closed form has it.
  if (pipeline_.walk_few && c_.zero_stage >= 3) {
    // Interleaved, each model chunk's passes take the share of the stage's that its layers
    // hold, as its gathers do. (Left to the steady state alone, two micro-batches over pp = 2
    // at vpp = 4 with ZeRO-3 over the NICs: 9.4 % under the simulator.)
    const ModelSpec& m = *ctx_.model;
    Seconds first_tail;
    Paced worst_shared;
    for (int64_t s = 0; s < pp_; ++s) {
      const Paced own = paced(s, true);
      if (s == 0) first_tail = own.backward_tail;
      if (s == worst.stage) worst_shared = own;
      ChunkTimes& chunk = pipeline_.few_chunks[static_cast<size_t>(s)];
      const StageTimes& st = stage(s);
      const double layers = static_cast<double>(layers_in_stage(m, p_, s));
      chunk.forward_link.assign(static_cast<size_t>(*p_.vpp), Seconds(0));
      chunk.backward_link = chunk.backward_tail = chunk.forward_link;
      for (int64_t k = 0; k < *p_.vpp; ++k) {
        const auto i = static_cast<size_t>(k);
        const double share =
            layers > 0 ? static_cast<double>(chunk_layers(m, p_, s, k).size()) / layers : 1.0;
        chunk.forward[i] += std::max(Seconds(0), own.forward - st.forward) * share;
        chunk.backward[i] += std::max(Seconds(0), own.backward - st.backward) * share;
        chunk.forward_link[i] = own.forward_link * share;
        chunk.backward_link[i] = own.backward_link * share;
        chunk.backward_tail[i] = own.backward_tail * share;
      }
    }
    // The first stage's last backward ends the iteration, with its reduce-scatter's rest.
    const Seconds gathered =
        schedule_makespan(pipeline_.few_chunks, out.microbatches, pipeline_.hops, c_.gpipe) +
        first_tail;
    // The closed form holds every backward of the pacing stage for its whole reduce-scatter,
    // but the last one's rest runs on beside the drain's backwards on the stages before it.
    // (One micro-batch over four stages, the last one's 22 ms reduce-scatter over the NICs
    // beside a 19 ms backward: held for it, the planner was 3.9 % over the simulator.)
    Seconds closed = (worst.pass() - per_mb) * mb;
    if (worst.stage > 0) {
      Seconds drain;
      for (int64_t s = 0; s < worst.stage; ++s)
        drain += stage(s).backward +
                 (pipeline_.hops.empty() ? Seconds(0) : pipeline_.hops[static_cast<size_t>(s + 1)]);
      const Seconds held = worst.backward - worst_shared.backward;
      closed -= std::clamp(held, Seconds(0), drain);
    }
    out.dp_paced = std::max({Seconds(0), gathered - pipeline_.few_walked, closed});
  } else {
    out.dp_paced = (worst.pass() - per_mb) * mb;
    // ZeRO-2's pacing puts each backward's reduce-scatter rest into the next forward; the last
    // micro-batch has none, and its rest runs on behind the drain, as ZeRO-1's single one does
    // (one micro-batch over two stages, FP32 gradients over the NICs: 15 % over the simulator).
    // What the pacing counted for that last micro-batch is in the tail already.
    if (c_.zero_stage == 2) {
      const Exposed e = most_exposed(true);
      out.dp_paced += std::max(Seconds(0), e.exposure - (worst.pass() - per_mb));
    }
  }
  out.dp_comm += out.dp_paced;
  // The once-per-iteration gradient reduce-scatter and weight gather share their link with every
  // micro-batch's traffic too: the link must carry it all within the iteration, and without
  // interleaving the bubble too, where the stage's link is idle (the gather runs on while the
  // stage waits for its first backward: one micro-batch over two stages priced 16 % over the
  // simulator without it; interleaved, the idle time is spread between chunk passes that load
  // the link, and counting it took GLM-4.5 on 240 H800 from +9.5 to +10.7 % under) (less the
  // in-node stage of a hierarchical sync when DP crosses nodes: that rides NVLink).
  Seconds once = (c_.zero_stage <= 1 ? sync_.reduce_scatter : Seconds(0)) +
                 (c_.zero_stage <= 2 ? sync_.all_gather : Seconds(0));
  if (sync_.crosses_nodes) {
    once -= (c_.zero_stage <= 1 ? sync_.reduce_scatter_in_node : Seconds(0)) +
            (c_.zero_stage <= 2 ? sync_.all_gather_in_node : Seconds(0));
  }
  const Seconds on_dp_link = (sync_.crosses_nodes ? worst.nic : worst.fabric) * mb + once;
  const Seconds idle = *p_.vpp == 1 ? out.bubble + out.pp_comm : Seconds(0);
  out.dp_link = std::max(Seconds(0), on_dp_link - (per_mb * mb + idle + out.dp_comm));
  out.dp_comm += out.dp_link;
  if (c_.zero_stage >= 2) {
    const Seconds streamed = reduce_stream_end(out.microbatches, worst);
    out.dp_stream =
        std::max(Seconds(0), streamed - (per_mb * mb + out.bubble + out.pp_comm + out.dp_comm));
    out.dp_comm += out.dp_stream;
  }
}

}  // namespace dp_sync

void add_dp_sync_exposure(const TimeContext& ctx, const PlanChoice& c, PricedPipeline& pipeline,
                          const std::vector<DpSync>& syncs, ScratchContext& scratch,
                          TimeBreakdown& out) {
  dp_sync::SyncPricing(ctx, c, pipeline, syncs, scratch).add_to(out);
}

}  // namespace moe
