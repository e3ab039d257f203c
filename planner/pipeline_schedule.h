// Pipeline schedules as pass orders, and the makespan they give with per-chunk pass times and
// a hop between stages: the planner's exact bubble where the closed form misses it.
//
// The closed form, (m + (p - 1)/v)(t_f + t_b), assumes equal chunks and free hops. An
// interleaved pipeline sends each micro-batch round the ring of stages once per model chunk, p
// hops a round; when a hop outlasts a chunk's forward (PCIe-only nodes, a slow stage boundary)
// or one chunk is heavier (the output head on the last), a stage waits for its next input in
// the steady state, not just at warm-up: OLMoE on 4 x 8 A800 over PCIe, p = v = 4, runs 16 %
// slower than the closed form. The makespan below walks the schedule instead: each stage runs
// its passes in order, a pass starting once the stage is free and its input has crossed the hop.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/units.h"

namespace moe {

// One pass: forward or backward of micro-batch `micro` on model chunk `chunk`.
struct SchedulePass {
  bool forward = true;
  int64_t chunk = 0;
  int64_t micro = 0;
};

// The order in which stage `stage` of `p` runs its passes over `m` micro-batches and `v` model
// chunks: 1F1B (min(p - s - 1, m) warm-up forwards, then one forward and one backward, then
// the drain), Megatron's interleaved 1F1B when v > 1 ((p - s - 1) x 2 + (v - 1) x p warm-up
// passes, chunks taken p micro-batches at a time), or GPipe (every forward, then every
// backward).
std::vector<SchedulePass> schedule_order(int64_t stage, int64_t p, int64_t m, int64_t v,
                                         bool gpipe);

// The steady-state time per micro-batch of a 1F1B pipeline (no interleaving) whose stage s
// takes `per_stage[s]` (forward + backward) a micro-batch and whose hops take `hop`: at least
// the slowest stage, and at least what Little's law asks of each stage s, which holds p - s
// micro-batches in flight while each makes the round trip through the later stages, 2 (p - 1 -
// s) hops included: (sum of t over s' >= s + 2 (p - 1 - s) hop) / (p - s). With equal stages
// that is t + 2 (p - 1) hop / p: the hops a micro-batch waits for in the steady state, beyond
// the 2 (p - 1) of warm-up and drain. schedule_makespan walks the same schedule and agrees.
Seconds one_f_one_b_period(const std::vector<Seconds>& per_stage, Seconds hop);
// The same with each boundary's own hop: hops[s] into stage s from stage s - 1 (hops[0], the
// wrap, unused here).
Seconds one_f_one_b_period(const std::vector<Seconds>& per_stage, const std::vector<Seconds>& hops);

// Forward and backward time of each model chunk of a stage, one micro-batch.
struct ChunkTimes {
  std::vector<Seconds> forward, backward;  // v entries
  // ZeRO-3's syncs on the stage's DP link, where they are walked (empty: none): the link work of
  // each chunk's forward and backward (its gathers, the backward's reduce-scatter as far as it
  // shares the pass), and what a backward leaves running there when it ends (the rest of its
  // reduce-scatter). A pass that starts while that rest runs shares the link with it: it takes
  // at least its own link work plus what is left of the rest.
  std::vector<Seconds> forward_link, backward_link, backward_tail;
  // The share of the NIC and of the node's fabric each chunk's forward and backward keep busy
  // with their own traffic (empty: none), and whether the stage's sends down the pipeline (to
  // the next stage) and up it cross nodes. A send that leaves as its stage starts its next pass
  // shares the link with that pass's traffic.
  struct LinkBusy {
    double nic = 0, fabric = 0;
    double on(bool across) const { return across ? nic : fabric; }
  };
  std::vector<LinkBusy> forward_busy, backward_busy;
  bool down_across = false, up_across = false;
};

// The time from the first forward to the last backward when stage s runs chunk c's passes in
// `stages[s].forward[c]` / `.backward[c]` and every hop between neighbouring stages (the wrap
// from the last to the first included) takes `hop`. Throws std::invalid_argument on an empty
// pipeline, chunk lists of the wrong length, or interleaving with m not a multiple of p.
Seconds schedule_makespan(const std::vector<ChunkTimes>& stages, int64_t m, Seconds hop,
                          bool gpipe);
// The same with each boundary's own hop: hops[s] between stages s - 1 and s, either way, and
// hops[0] the wrap between the last stage and the first (one entry a stage).
Seconds schedule_makespan(const std::vector<ChunkTimes>& stages, int64_t m,
                          const std::vector<Seconds>& hops, bool gpipe);

// When each stage starts its first backward at the earliest: micro-batch 0's trip through every
// chunk's forward and back down the last chunk, each stage also running the forwards its order
// puts before each of its passes (its warm-up). Exact where the stages never wait beyond
// that; a lower bound otherwise. (What ZeRO-2's per-micro-batch reduce-scatters, which start
// with the backwards, must wait for.) `gathers`, where not empty, holds each stage's weight
// all-gather ahead of the iteration, one chunk after another: a chunk's first forward ends no
// earlier than its weights are in.
std::vector<Seconds> first_backward_starts(const std::vector<ChunkTimes>& stages, int64_t m,
                                           const std::vector<Seconds>& hops, bool gpipe,
                                           const std::vector<Seconds>& gathers = {});

}  // namespace moe
