// A pipeline pass (one micro-batch through a stage's model chunk, forward or backward) as a task
// graph: each layer's operators in overlap slices, recompute and rematerialization, ZeRO-3
// gathers, MoNTA's all-to-all pieces, the memory each task allocates and frees, and the DP
// gradient sync it starts.
#include <algorithm>

#include "planner/host_time.h"
#include "planner/monta.h"
#include "simulator/training_run.h"

namespace moe::sim::training {

namespace {

// `scale` on a layer pass's compute, times what the overlapped expert dispatch and combine
// take of its SMs (overlap_compute_stretch, as the planner prices the pass).
template <class Ops, class OpOf>
double compute_scale_beside_ep(const TimeContext& ctx, const PlanChoice& c, const Ops& ops,
                               OpOf op_of, double scale) {
  Seconds compute, ep;
  for (const auto& item : ops) {
    const LayerOp& op = op_of(item);
    if (op.kind == OpKind::kCompute) compute += op.time;
    if (op.kind == OpKind::kEp) ep += op.time;
  }
  return scale * overlap_compute_stretch(ctx, c, compute * scale, ep);
}

int stream_of(OpKind k) {
  switch (k) {
    case OpKind::kCompute:
      return kCompute;
    case OpKind::kTp:
      return kTpStream;
    case OpKind::kEp:
      return kEpStream;
    case OpKind::kCp:
      return kCpStream;
  }
  return kCompute;
}

// The stream a flow carried by another task runs on, in the TP or EP group (Task::carries).
int carried_stream_of(OpKind k) {
  return k == OpKind::kEp ? kCarriedEpStream : kCarriedTpStream;
}

// The exchange a layer op's collective runs: a ring, or an all-to-all whose heavy side is the
// receiver for the dispatch's forward and the combine's backward (tokens and their gradients
// go to the hot experts' rank), the sender otherwise.
Exchange exchange_of(CommPattern pattern, bool receives_tokens, bool backward) {
  if (pattern == CommPattern::kRing) return Exchange::kRing;
  return receives_tokens != backward ? Exchange::kAllToAllIntoHeavy : Exchange::kAllToAllFromHeavy;
}
Exchange exchange_of(const LayerOp& op, bool backward) {
  return exchange_of(op.pattern, op.receives_tokens, backward);
}

}  // namespace

// MoNTA (experts tensor-parallel with EP): the expert all-to-all as its pieces. O1 sends 1/t of
// the tokens across (EP stream, on the link the group crosses) and all-gathers the rest inside
// the node (TP stream, NVLink); O2 and O3 cut that into N chunks whose all-to-all, all-gather
// and token-order D2D copy pipeline: O2 copies on the all-gather's stream, O3 on the copy
// engine (MoNTA Algorithms 1 and 2). Each chunk pays the per-chunk overhead on its all-to-all;
// what the planner's op holds beyond MoNTA's time (FCDA chunk latencies) goes on the first.
uint32_t Training::add_monta(std::vector<Task>& g, const StageState& st, const LayerOp& op,
                             double scale, double load, bool backward,
                             std::vector<uint32_t> after) {
  monta::Problem prob = expert_alltoall_problem(ctx_, plan_);
  prob.volume = prob.volume * (load / ctx_.skew.imbalance(m_, *p_.ep));
  const bool nic = crosses_nodes(ctx_, p_, OpKind::kEp);
  const bool o3 = plan_.alltoall == monta::Strategy::kO3;
  const monta::StrategyRun run = monta::run_strategy(prob, plan_.alltoall, plan_.alltoall_chunks);
  const int64_t n = run.chunks;
  const monta::ChunkCosts& c = run.per_chunk;
  const Seconds residual = std::max(Seconds(0), op.time - run.time);
  const Seconds overhead = run.overhead;
  auto push = [&](Task t, std::vector<uint32_t> deps) {
    t.after = std::move(deps);
    return append(g, std::move(t));
  };
  uint32_t last = 0;
  for (int64_t j = 0; j < n; ++j) {
    const Seconds aa = c.alltoall + overhead + (j == 0 ? residual : Seconds(0));
    const uint32_t a = push(
        comm_task(st, "MoNTA all-to-all", kEpStream, aa * scale, nic, exchange_of(op, backward)),
        after);
    last = push(comm_task(st, "MoNTA all-gather", kTpStream, c.allgather * scale, false), {a});
    if (plan_.alltoall != monta::Strategy::kO1) {
      last =
          push(compute_task("MoNTA D2D copy", o3 ? kCopyStream : kTpStream, c.d2d * scale), {last});
    }
  }
  return last;
}

// Appends one op (a slice of it) and returns its index.
uint32_t Training::add_op(std::vector<Task>& g, const StageState& st, const LayerOp& op,
                          double scale, double compute_scale, std::vector<uint32_t> after,
                          double load, bool backward) {
  if (op.kind == OpKind::kEp && *p_.etp > 1 && *p_.ep > 1 &&
      plan_.alltoall != monta::Strategy::kBaseline) {
    return add_monta(g, st, op, scale, load, backward, std::move(after));
  }
  if (op.fused.kind != OpKind::kCompute) {
    // MegaScale's fused GEMM and communication: the kernel carries its communication, which
    // holds the group's link beside the GEMM from the kernel's start (LayerOp::Fused; on a
    // stream of its own, as it moves inside the kernel rather than behind the group's NCCL
    // collectives), and holds the SMs until it has landed (a communication-bound kernel's GEMM
    // tiles wait for their rows), so a sync that shares the link stretches the op as it would
    // the collective unfused.
    // With every GPU simulated the communication is a collective its group joins, and a
    // kernel that held its SMs for it could wait on a peer whose SMs wait on another such
    // collective: there the kernel takes the op's time and the flow runs beside it unheld.
    const LayerOp::Fused& f = op.fused;
    Task gemm = compute_task(op.name, kCompute,
                             (every_gpu() ? op.time : f.compute) * (scale * compute_scale));
    gemm.after = after;
    if (!every_gpu()) gemm.carries = static_cast<int64_t>(g.size() + 1);
    const uint32_t computed = append(g, std::move(gemm));
    Task comm = comm_task(st, op.name, carried_stream_of(f.kind),
                          (every_gpu() ? f.time + f.pxn_saving : f.time) * scale,
                          crosses_nodes(ctx_, p_, f.kind),
                          exchange_of(f.pattern, op.receives_tokens, backward), f.latency * scale);
    if (every_gpu()) comm.after = std::move(after);
    append(g, std::move(comm));
    return computed;
  }
  const bool across = op.kind != OpKind::kCompute && crosses_nodes(ctx_, p_, op.kind);
  if (across && op.in_node.value() > 0 && !every_gpu()) {
    // An all-to-all that leaves the node: its local peers' bytes go over the GPU's node port
    // beside the NIC's (LayerOp::in_node), on the group's second stream, and the collective has
    // landed when both have. (Every GPU simulated, the ports' loads spread it: port_loads.h.)
    Task nic = comm_task(st, op.name, stream_of(op.kind), op.time * scale, true,
                         exchange_of(op, backward), op.latency * scale);
    nic.after = std::move(after);
    nic.carries = static_cast<int64_t>(g.size() + 1);
    const uint32_t id = append(g, std::move(nic));
    append(g, comm_task(st, op.name, carried_stream_of(op.kind), (op.in_node + op.latency) * scale,
                        false, exchange_of(op, backward), op.latency * scale));
    return id;
  }
  Task t = op.kind == OpKind::kCompute
               ? compute_task(op.name, kCompute, op.time * (scale * compute_scale))
               : comm_task(st, op.name, stream_of(op.kind),
                           (every_gpu() ? op.port_time() : op.time) * scale,
                           crosses_nodes(ctx_, p_, op.kind), exchange_of(op, backward),
                           op.latency * scale);
  t.after = std::move(after);
  return append(g, std::move(t));
}

// Appends a task of the pass being built, naming the layer operator it runs (ref_).
uint32_t Training::append(std::vector<Task>& g, Task t) {
  g.push_back(std::move(t));
  ++report_.tasks;
  if (every_gpu()) {
    StageState& st = stages_[static_cast<size_t>(building_stage_)];
    st.refs.resize(g.size(), OpRef{});
    st.refs.back() = ref_;
  }
  return static_cast<uint32_t>(g.size() - 1);
}

int64_t Training::add_action(StageState& st, MemAction a) {
  st.actions.push_back(a);
  return static_cast<int64_t>(st.actions.size());
}

void Training::run_pass(const PassId& id, std::function<void()> done) {
  StageState& st = stages_[static_cast<size_t>(id.stage)];
  st.actions.clear();
  st.refs.clear();
  building_stage_ = id.stage;
  ref_ = OpRef{};
  const int64_t v = *p_.vpp;
  const LayerRange layers = chunk_layers(m_, p_, id.stage, id.chunk);
  const int64_t begin = layers.begin, end = layers.end;
  const int64_t slices = plan_.overlap ? kOverlapSlices : 1;
  const double share = 1.0 / static_cast<double>(slices);
  const bool full = plan_.recompute == Recompute::kFull;
  const bool last_chunk = id.chunk == v - 1;
  const bool head_here = last_chunk && id.stage == *p_.pp - 1;
  const bool mtp_here = last_chunk && id.stage == mtp_stage(p_);
  std::vector<Task> g;
  std::vector<int64_t> tail(static_cast<size_t>(slices), -1);  // last task of each slice
  auto after_tail = [&](int64_t j) {
    return tail[static_cast<size_t>(j)] < 0
               ? std::vector<uint32_t>{}
               : std::vector<uint32_t>{static_cast<uint32_t>(tail[static_cast<size_t>(j)])};
  };
  auto all_tails = [&] {
    std::vector<uint32_t> out;
    for (int64_t t : tail)
      if (t >= 0) out.push_back(static_cast<uint32_t>(t));
    return out;
  };
  auto head_task = [&](const char* name, Seconds time) {
    if (time.value() <= 0) return;
    Task t = compute_task(name, kCompute, time);
    t.after = all_tails();
    append(g, std::move(t));
    std::fill(tail.begin(), tail.end(), static_cast<int64_t>(g.size() - 1));
  };
  // ZeRO-3: each layer's weights are gathered before its first operator, the next layer's
  // gather running while this one computes (FSDP's prefetch of one layer); a pass's compute
  // stalls on the DP stream when the gathers cannot keep up.
  std::vector<int64_t> gather_of;  // task index by layer - begin
  std::vector<uint32_t> gate;      // what the next chain's first operators also wait for
  if (plan_.zero_stage >= 3 && st.sync.all_gather.value() > 0 && end > begin) {
    gather_of.assign(static_cast<size_t>(end - begin), -1);
    const double per_layer = 1.0 / static_cast<double>(v) / static_cast<double>(end - begin);
    // Hierarchical (the weights Ulysses SP replicates, App. A.1): across the nodes, then in the
    // node on NVLink, as the once-per-iteration gather runs (training_sim.cpp). (The whole
    // gather on the NIC, ZeRO-3 over GB200 racks with SP over 64 GPUs kept the NIC busy
    // through every pass with the 80 % that rides NVLink: 6.1 % under the planner.)
    const Seconds in_node = st.sync.crosses_nodes ? st.sync.all_gather_in_node : Seconds(0);
    for (int64_t k = 0; k < end - begin; ++k) {
      const int64_t l = id.forward ? begin + k : end - 1 - k;
      append(g, comm_task(st, "ZeRO-3 parameter all-gather", kDpStream,
                          (st.sync.all_gather - in_node) * per_layer, st.sync.crosses_nodes));
      if (in_node.value() > 0) {
        append(g, comm_task(st, "ZeRO-3 parameter all-gather (in node)", kDpStream,
                            in_node * per_layer, false));
      }
      gather_of[static_cast<size_t>(l - begin)] = static_cast<int64_t>(g.size() - 1);
    }
  }
  auto gate_on = [&](int64_t layer) {
    gate.clear();
    if (gather_of.empty()) return;
    gate.push_back(static_cast<uint32_t>(gather_of[static_cast<size_t>(layer - begin)]));
  };
  // Rematerialization (MegaScale-MoE Sec. 4.1): backward gathers a layer's inputs again
  // instead of keeping them. `remat` holds, per slice, the gather the next chain's first
  // compute behind a communication (the block whose weight gradients need those inputs)
  // waits for; `last_comm` the last communication of the chain just built, per slice, which
  // the gather for the layer below follows, so it runs while this layer's remaining backward
  // computes rather than ahead of its own collectives.
  std::vector<uint32_t> remat;
  std::vector<int64_t> last_comm(static_cast<size_t>(slices), -1);
  // The host issuing layer `layer`'s forward, or its backward with what recompute replays
  // (planner/host_time.h): a task on the host stream from the layer's start, which the layer's
  // end waits for, so that no layer ends before the host has issued it (-1: none).
  auto host_issue = [&](int64_t layer, bool forward) -> int64_t {
    const LayerState& L = layers_.at(static_cast<size_t>(layer));
    const LayerHostTime h = layer_host_time(ctx_, plan_, L.moe);
    const Seconds time = forward ? h.forward : h.backward + h.recompute;
    // A layer whose compute stream alone outlasts the host on every GPU needs no host task.
    if (time <= (forward ? L.least_forward_compute : L.least_backward_compute)) return -1;
    Task t = compute_task("host issues the layer", kHostStream, time);
    const int64_t barrier = tail[static_cast<size_t>(slices - 1)];
    if (barrier >= 0) t.after = {static_cast<uint32_t>(barrier)};
    append(g, std::move(t));
    return static_cast<int64_t>(g.size() - 1);
  };
  // Runs layer `layer`'s `ops` (its forward list, or reversed: backward) as `slices` pipelined
  // chains continuing from the tails. `alloc_first` and `alloc_token` tag the first op and the
  // token op of slice 0; `release` tags slice (slices - 1)'s last op. The layer ends once host
  // task `host` (when not -1) has too.
  auto chain = [&](int64_t layer, bool reversed, double compute_scale, int64_t token_op,
                   int64_t alloc_first, int64_t alloc_token, int64_t release, int64_t host) {
    const LayerState& L = layers_.at(static_cast<size_t>(layer));
    const std::vector<LayerOp>& ops = reversed ? L.backward : L.forward;
    // Slices pipeline inside a layer; a layer starts once the one before has ended, so its
    // memory is released before the next allocates (and each layer pays its own pipeline
    // fill, as the planner's overlap residual has it).
    const int64_t barrier = tail[static_cast<size_t>(slices - 1)];
    std::fill(last_comm.begin(), last_comm.end(), barrier);
    compute_scale = compute_scale_beside_ep(
        ctx_, plan_, ops, [](const LayerOp& op) -> const LayerOp& { return op; }, compute_scale);
    for (int64_t j = 0; j < slices; ++j) {
      bool remat_pending = !remat.empty();
      for (size_t q = 0; q < ops.size(); ++q) {
        std::vector<uint32_t> after =
            q > 0 ? after_tail(j)
                  : (barrier < 0 ? std::vector<uint32_t>{}
                                 : std::vector<uint32_t>{static_cast<uint32_t>(barrier)});
        if (q == 0) after.insert(after.end(), gate.begin(), gate.end());
        if (remat_pending && q > 0 && ops[q].kind == OpKind::kCompute &&
            ops[q - 1].kind != OpKind::kCompute) {
          after.push_back(remat[static_cast<size_t>(j)]);
          remat_pending = false;
        }
        const size_t forward_index = reversed ? ops.size() - 1 - q : q;
        ref_ = {static_cast<int32_t>(layer), static_cast<int32_t>(forward_index)};
        // An op of several tasks allocates as its first starts and releases as its last ends.
        const size_t first = g.size();
        const uint32_t i =
            add_op(g, st, ops[q], share, compute_scale, std::move(after), L.load, reversed);
        ref_ = OpRef{};
        if (j == 0 && q == 0 && alloc_first) g[first].tag = alloc_first;
        if (j == 0 && static_cast<int64_t>(q) == token_op && alloc_token)
          g[first].tag = alloc_token;
        if (j == slices - 1 && q + 1 == ops.size() && release) g[i].tag = release;
        if (ops[q].kind != OpKind::kCompute) last_comm[static_cast<size_t>(j)] = i;
        tail[static_cast<size_t>(j)] = i;
      }
    }
    // The layer has ended when its operators have and the host has issued it: what the next
    // layer starts after.
    const int64_t last = tail[static_cast<size_t>(slices - 1)];
    if (host >= 0 && last >= 0) {
      Task issued = compute_task("layer issued", kHostStream, Seconds(0));
      issued.after = {static_cast<uint32_t>(host), static_cast<uint32_t>(last)};
      append(g, std::move(issued));
      tail[static_cast<size_t>(slices - 1)] = static_cast<int64_t>(g.size() - 1);
    }
  };
  // Layer `layer`'s rematerializing gather, per slice, after the last communication of the
  // chain built before it (or the tails, first in a pass).
  // (`any_layer`: an MTP module's, priced as the model's last layer wherever that runs.)
  auto rematerialize = [&](int64_t layer, bool any_layer = false) {
    remat.clear();
    // A chunk may hold no layer (layout=E|...).
    if (!any_layer && (layer < begin || layer >= end)) return;
    const LayerState& L = layers_.at(static_cast<size_t>(layer));
    if (plan_.recompute != Recompute::kRematerialize) return;
    // Half of each group's forward communication, on that group's own link: a dense layer's
    // replays only its TP gathers, inside the node. (As one EP operator, a dense layer's went
    // out over the NICs where EP crosses nodes, and took MoNTA's pieces there.)
    const LayerOp gathers[] = {{"rematerialized all-gather", OpKind::kTp, L.forward_tp * 0.5},
                               {"rematerialized all-gather", OpKind::kEp, L.forward_ep * 0.5}};
    if (!(L.forward_tp.value() + L.forward_ep.value() > 0)) return;
    for (int64_t j = 0; j < slices; ++j) {
      const int64_t before = last_comm[static_cast<size_t>(j)];
      std::vector<uint32_t> after =
          before < 0 ? after_tail(j) : std::vector<uint32_t>{static_cast<uint32_t>(before)};
      for (const LayerOp& gather : gathers) {
        if (!(gather.time.value() > 0)) continue;
        after = {add_op(g, st, gather, share, 1.0, std::move(after))};
      }
      remat.push_back(after.front());
    }
  };
  // Activation offloading (Megatron's fine-grained offloading): a layer's offloaded inputs go
  // to the host on the copy stream once its forward is through, and the next layer does not end
  // before they are out; in backward each layer's come back while the layer above runs, and its
  // backward starts once they are in. Megatron keeps the first micro-batch's last layer of the
  // last model chunk on the GPU.
  auto offloads = [&](int64_t layer) {
    if (layer < begin || layer >= end) return false;  // a chunk may hold no layer
    const LayerState& L = layers_.at(static_cast<size_t>(layer));
    return L.offloaded.value() > 0 && !(id.micro == 0 && layer == end - 1 && last_chunk);
  };
  auto copy_task = [&](int64_t layer, bool to_host, std::vector<uint32_t> after) {
    const LayerState& L = layers_.at(static_cast<size_t>(layer));
    Task t =
        compute_task(to_host ? "activation offload (to host)" : "activation offload (back to GPU)",
                     to_host ? kD2hStream : kH2dStream, L.offload_copy);
    t.after = std::move(after);
    t.tag = add_action(st, to_host ? MemAction{layer, id.micro, L.chunks, Bytes(0), L.offloaded}
                                   : MemAction{layer, id.micro, L.chunks, L.offloaded, Bytes(0)});
    return static_cast<int64_t>(append(g, std::move(t)));
  };
  // Layer l's forward: what it keeps of the micro-batch (its checkpoint under full recompute),
  // the host issuing it, its operators.
  auto forward_layer = [&](int64_t l) {
    const LayerState& L = layers_.at(static_cast<size_t>(l));
    const int64_t a_first =
        add_action(st, {l, id.micro, L.chunks, full ? L.checkpoint : L.sequence_part, Bytes(0)});
    const int64_t a_token =
        full ? 0 : add_action(st, {l, id.micro, L.chunks, L.token_part, Bytes(0), true});
    const int64_t host = host_issue(l, true);
    chain(l, false, 1.0, L.token_op, a_first, a_token, 0, host);
  };
  // Layer l's backward: what recompute replays first, then its operators, which free what its
  // forward kept.
  auto backward_layer = [&](int64_t l) {
    const LayerState& L = layers_.at(static_cast<size_t>(l));
    const Bytes held =
        full ? L.checkpoint + L.sequence_part + L.token_part : L.sequence_part + L.token_part;
    const int64_t host = host_issue(l, false);
    if (full) {
      const int64_t a_first = add_action(st, {l, id.micro, L.chunks, L.sequence_part, Bytes(0)});
      const int64_t a_token = add_action(st, {l, id.micro, L.chunks, L.token_part, Bytes(0), true});
      chain(l, false, 1.0, L.token_op, a_first, a_token, 0, -1);
    } else if (plan_.recompute == Recompute::kRematerialize) {
      // Rematerialization redoes the element-wise work (5 % of the forward) and replays the
      // all-gather half of TP/EP communication (`remat`, issued during the layer above's
      // backward).
      const LayerOp redo{"rematerialized element-wise work", OpKind::kCompute,
                         L.forward_compute * 0.05};
      for (int64_t j = 0; j < slices; ++j)
        tail[static_cast<size_t>(j)] = add_op(g, st, redo, share, 1.0, after_tail(j));
    } else {
      // Selective recompute replays its modules' ops (the forward's own, so every GPU's
      // share of them, and the element-wise and MLA up-projection work), in forward order,
      // once the layer above is through (as full recompute's replay and autograd have it).
      const int64_t barrier = tail[static_cast<size_t>(slices - 1)];
      const double replay_scale = compute_scale_beside_ep(
          ctx_, plan_, L.replayed, [](const ReplayedOp& r) -> const LayerOp& { return r.op; }, 1.0);
      for (int64_t j = 0; j < slices; ++j) {
        for (size_t q = 0; q < L.replayed.size(); ++q) {
          const ReplayedOp& r = L.replayed[q];
          if (r.forward_index >= 0) ref_ = {static_cast<int32_t>(l), r.forward_index};
          std::vector<uint32_t> after = q > 0 || barrier < 0
                                            ? after_tail(j)
                                            : std::vector<uint32_t>{static_cast<uint32_t>(barrier)};
          tail[static_cast<size_t>(j)] =
              add_op(g, st, r.op, share, replay_scale, std::move(after), L.load, false);
          ref_ = OpRef{};
        }
      }
    }
    const int64_t a_release = add_action(st, {l, id.micro, L.chunks, Bytes(0), held, true});
    chain(l, true, 2.0, -1, 0, 0, a_release, host);
  };
  // The MTP modules (DeepSeek-V3) after the head: each projects the two normed streams, runs a
  // transformer layer (the model's last layer's operators and routing, as the planner prices
  // it, its communication on the links the layer's takes), then its own pass through the
  // shared output head and a loss, whose logits it keeps until its backward; a backward also
  // adds the shifted tokens' embedding gradient. (As one compute task, a module's all-to-alls
  // left the links to the DP gathers beside them: 6.8 % under the planner.)
  const int64_t last_layer = m_.num_layers - 1;
  const Seconds projection = mtp_here ? mtp_projection_time(ctx_, plan_) : Seconds(0);
  const Seconds head = head_here || mtp_here ? output_head_time(ctx_, plan_) : Seconds(0);
  auto logits = [&](Bytes alloc, Bytes release) {
    g.back().tag = add_action(st, {last_layer, id.micro, layers_.back().chunks, alloc, release});
  };
  ++st.pass_serial;

  if (id.forward) {
    int64_t copying = -1;  // the previous layer's copy to the host
    for (int64_t l = begin; l < end; ++l) {
      gate_on(l);
      forward_layer(l);
      int64_t& last = tail[static_cast<size_t>(slices - 1)];
      if (copying >= 0) {
        Task out = compute_task("layer offloaded", kD2hStream, Seconds(0));
        out.after = {static_cast<uint32_t>(copying), static_cast<uint32_t>(last)};
        last = append(g, std::move(out));
        copying = -1;
      }
      if (offloads(l)) copying = copy_task(l, true, {static_cast<uint32_t>(last)});
    }
    if (head_here) {
      // The loss keeps the micro-batch's logits (as its kernel stores them) until its backward.
      head_task("output head + loss", head + loss_.forward.time);
      logits(loss_.held, Bytes(0));
    }
    gate.clear();
    for (int64_t k = 0; mtp_here && k < m_.mtp_layers; ++k) {
      head_task("MTP projection", projection);
      forward_layer(last_layer);
      head_task("MTP output head + loss", head + loss_.forward.time);
      logits(loss_.held, Bytes(0));
    }
  } else {
    for (int64_t k = 0; mtp_here && k < m_.mtp_layers; ++k) {
      head_task("MTP output head + loss backward", head * 2.0 + loss_.backward);
      logits(Bytes(0), loss_.held);
      rematerialize(last_layer, true);
      backward_layer(last_layer);
      head_task("MTP projection + embedding gradient", projection * 2.0 + embedding_gradient_);
    }
    if (head_here) {
      head_task("output head + loss backward", head * 2.0 + loss_.backward);
      logits(Bytes(0), loss_.held);
    }
    rematerialize(end - 1);
    // The top layer's inputs come back from the pass's start.
    int64_t reloaded = offloads(end - 1) ? copy_task(end - 1, false, all_tails()) : -1;
    for (int64_t l = end - 1; l >= begin; --l) {
      gate_on(l);
      if (reloaded >= 0) gate.push_back(static_cast<uint32_t>(reloaded));
      reloaded = l > begin && offloads(l - 1) ? copy_task(l - 1, false, all_tails()) : -1;
      backward_layer(l);
      if (l > begin) rematerialize(l - 1);
    }
    // The first stage's backward ends in the embedding, whose dense gradient goes into
    // main_grad (the planner's embedding_gradient_op).
    if (id.stage == 0 && id.chunk == 0) head_task("embedding gradient", embedding_gradient_);
  }

  // Data-parallel synchronisation, asynchronous as Megatron overlaps it: ZeRO-1 reduce-
  // scatters a model chunk's gradients from the start of its last backward (with
  // interleaving, chunk v - 1's while the others still run), ZeRO-2 from the start of every
  // backward (the optimizer step waits for them). ZeRO-3's weight gathers are above.
  const double per_chunk = 1.0 / static_cast<double>(v);
  if (!id.forward && (plan_.zero_stage >= 2 || id.micro == microbatches_ - 1)) {
    for (int64_t k = st.first_gpu; k < st.first_gpu + st.num_gpus; ++k) {
      // Hierarchical (App. A.1) for SP-replicated weights: in the node first, then across.
      dp_async(k, "DP gradient reduce-scatter (in node)",
               st.sync.reduce_scatter_in_node * per_chunk, {}, false);
      dp_async(k, "DP gradient reduce-scatter",
               (st.sync.reduce_scatter - st.sync.reduce_scatter_in_node) * per_chunk);
    }
  }
  // Every GPU of the stage runs the graph; the pass ends when the last one is through (the
  // first pass of an iteration not before that GPU's parameters are in).
  // append() kept one OpRef per task in every-GPU mode; the graph's GPUs share them.
  std::shared_ptr<const std::vector<OpRef>> refs;
  if (every_gpu()) refs = std::make_shared<const std::vector<OpRef>>(std::move(st.refs));
  auto graph = std::make_shared<const TaskGraph>(std::move(g));
  report_.tasks += graph->size() * static_cast<uint64_t>(st.num_gpus - 1);
  st.gpus_left = st.num_gpus;
  st.pass_done = std::move(done);
  st.pending.resize(graph->size() * static_cast<size_t>(st.num_gpus));
  for (int64_t k = st.first_gpu; k < st.first_gpu + st.num_gpus; ++k) {
    std::function<void()> finish = [this, s = id.stage] {
      StageState& y = stages_[static_cast<size_t>(s)];
      if (--y.gpus_left == 0) std::exchange(y.pass_done, {})();
    };
    if (id.forward && id.micro == 0) {  // the chunk's first forward this iteration
      finish = [this, k, chunk = id.chunk, finish = std::move(finish)]() mutable {
        GpuState& x = gpus_[static_cast<size_t>(k)];
        if (x.chunks_gathered <= chunk) {
          x.deferred_done[static_cast<size_t>(chunk)] = std::move(finish);
        } else {
          finish();
        }
      };
    }
    GpuState& x = gpus_[static_cast<size_t>(k)];
    x.refs = refs;
    x.gpu->run(
        graph, std::move(finish),
        PendingSlots{st.pending.data() + (k - st.first_gpu), static_cast<size_t>(st.num_gpus)});
  }
}

}  // namespace moe::sim::training
