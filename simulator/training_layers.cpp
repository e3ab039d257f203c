// Routing, FCDA/MACT chunks and operator costs of every layer, for one iteration.
#include <algorithm>

#include "simulator/training_run.h"

namespace moe::sim::training {

// Routing, chunks and costs of every layer for iteration `it`.
void Training::plan_layers(int64_t it) {
  layers_.assign(static_cast<size_t>(m_.num_layers), {});
  const Recompute rc = plan_.recompute;
  const bool full = rc == Recompute::kFull;
  for (int64_t s = 0; s < *p_.pp; ++s) {
    const StageState& st = stages_[static_cast<size_t>(s)];
    for_each_stage_layer(m_, p_, s, [&](int64_t l) {
      LayerState& L = layers_[static_cast<size_t>(l)];
      L.moe = m_.moe_layer[static_cast<size_t>(l)];
      const LayerParams& params = ctx_.params.layers[static_cast<size_t>(l)];
      double received = static_cast<double>(ctx_.seq_len);
      std::vector<double> loads;
      if (L.moe) {
        loads = routing_.rank_loads(l, it, *p_.ep);
        L.load = RoutingGenerator::busiest_of(loads);
        received = static_cast<double>(ctx_.seq_len) * static_cast<double>(m_.top_k) * L.load;
        L.chunks = std::max<int64_t>(plan_.fcda_chunks, 1);
        if (plan_.mact) {
          // MACT, eq. (8)-(9), on this layer's s'' at this iteration.
          const int64_t bin =
              memfine::select_bin(memfine::chunks_needed(received, st.max_received), o_.chunk_bins);
          L.chunks = bin > 0 ? bin : o_.chunk_bins.back();
        }
        ++report_.chunk_histogram[static_cast<size_t>(
            std::min<int64_t>(L.chunks, static_cast<int64_t>(report_.chunk_histogram.size()) - 1))];
      }
      L.forward = layer_forward_ops(ctx_, plan_, params, L.moe, L.load, L.chunks);
      L.backward.assign(L.forward.rbegin(), L.forward.rend());
      L.replayed = recompute_ops(ctx_, plan_, L.moe, L.load, L.forward);
      Seconds backward_compute;
      for (const LayerOp& op : L.forward) {
        if (op.kind == OpKind::kCompute) {
          L.forward_compute += op.time;
          backward_compute += op.backward_compute();
        }
        if (op.kind == OpKind::kTp) L.forward_tp += op.time;
        if (op.kind == OpKind::kEp) L.forward_ep += op.time;
      }
      L.least_forward_compute = L.forward_compute;
      L.least_backward_compute = backward_compute;
      const uint32_t mods = plan_.recompute_modules;
      const Bytes whole =
          layer_activation_bytes(m_, p_, shape_, L.moe, received, L.chunks, rc, mods);
      L.sequence_part = layer_activation_bytes(m_, p_, shape_, L.moe, 0.0, L.chunks, rc, mods);
      if (!L.moe) L.sequence_part = whole;
      L.token_part = whole - L.sequence_part;
      if (plan_.offload_modules != 0) {
        L.offloaded =
            layer_offloaded_bytes(m_, shape_, L.moe, received, rc, mods, plan_.offload_modules);
        if (L.offloaded.value() > 0) L.offload_copy = host_copy_time(ctx_, L.offloaded);
      }
      // A measured static figure (MemFine Table 4) already holds the checkpoints.
      L.checkpoint =
          full && !o_.static_override ? memfine::recompute_checkpoints(shape_, 1.0, 1) : Bytes(0);
      L.token_op = -1;
      for (size_t q = 0; q < L.forward.size() && L.token_op < 0; ++q) {
        if (L.forward[q].receives_tokens) L.token_op = static_cast<int64_t>(q);
      }
      const bool uneven =
          std::any_of(loads.begin(), loads.end(), [&](double x) { return x != L.load; });
      if (every_gpu() && L.moe && uneven) {
        for (double load : loads) {
          const std::vector<LayerOp> own =
              layer_forward_ops(ctx_, plan_, params, true, load, L.chunks);
          std::vector<double> ratio(L.forward.size(), 1.0);
          // Communication scales with the bytes on the member's own ports (join spreads them
          // as PXN does), compute with its time.
          for (size_t q = 0; q < own.size() && q < ratio.size(); ++q) {
            const bool comm = L.forward[q].kind != OpKind::kCompute;
            const Seconds busiest = comm ? L.forward[q].port_time() : L.forward[q].time;
            if (busiest.value() > 0) ratio[q] = (comm ? own[q].port_time() : own[q].time) / busiest;
          }
          Seconds compute, backward;
          for (size_t q = 0; q < L.forward.size(); ++q) {
            if (L.forward[q].kind != OpKind::kCompute) continue;
            compute += L.forward[q].time * ratio[q];
            backward += L.forward[q].backward_compute() * ratio[q];
          }
          L.least_forward_compute = std::min(L.least_forward_compute, compute);
          L.least_backward_compute = std::min(L.least_backward_compute, backward);
          L.rank_ratio.push_back(std::move(ratio));
          const double own_received =
              static_cast<double>(ctx_.seq_len) * static_cast<double>(m_.top_k) * load;
          L.rank_token_part.push_back(
              layer_activation_bytes(m_, p_, shape_, true, own_received, L.chunks, rc) -
              L.sequence_part);
        }
      }
    });
  }
}

}  // namespace moe::sim::training
