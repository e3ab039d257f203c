#include "planner/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace moe {

std::vector<SchedulePass> schedule_order(int64_t stage, int64_t p, int64_t m, int64_t v,
                                         bool gpipe) {
  std::vector<SchedulePass> ops;
  const int64_t total = m * v;
  ops.reserve(static_cast<size_t>(2 * total));
  // Megatron's interleaved order: virtual micro-batch i runs chunk (i / p) % v of micro-batch
  // (i / (p v)) p + i % p; backward walks the chunks in reverse.
  auto forward = [&](int64_t i) {
    return SchedulePass{true, (i / p) % v, (i / (p * v)) * p + i % p};
  };
  auto backward = [&](int64_t i) {
    return SchedulePass{false, v - 1 - (i / p) % v, (i / (p * v)) * p + i % p};
  };
  if (gpipe) {
    for (int64_t i = 0; i < total; ++i) ops.push_back(forward(i));
    for (int64_t i = 0; i < total; ++i) ops.push_back(backward(i));
    return ops;
  }
  const int64_t warmup =
      std::min(v == 1 ? p - stage - 1 : (p - stage - 1) * 2 + (v - 1) * p, total);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back(forward(f));
  while (f < total) {
    ops.push_back(forward(f++));
    ops.push_back(backward(b++));
  }
  while (b < total) ops.push_back(backward(b++));
  return ops;
}

Seconds one_f_one_b_period(const std::vector<Seconds>& per_stage, Seconds hop) {
  return one_f_one_b_period(per_stage, std::vector<Seconds>(per_stage.size(), hop));
}

Seconds one_f_one_b_period(const std::vector<Seconds>& per_stage,
                           const std::vector<Seconds>& hops) {
  const int64_t p = static_cast<int64_t>(per_stage.size());
  if (hops.size() != per_stage.size())
    throw std::invalid_argument("a pipeline needs one hop a stage");
  Seconds period, later, later_hops;
  for (int64_t s = p - 1; s >= 0; --s) {
    const Seconds t = per_stage[static_cast<size_t>(s)];
    later += t;
    if (s + 1 < p) later_hops += hops[static_cast<size_t>(s + 1)];
    const Seconds cycle = later + later_hops * 2.0;
    period = std::max({period, t, cycle / static_cast<double>(p - s)});
  }
  return period;
}

Seconds schedule_makespan(const std::vector<ChunkTimes>& stages, int64_t m, Seconds hop,
                          bool gpipe) {
  return schedule_makespan(stages, m, std::vector<Seconds>(stages.size(), hop), gpipe);
}

namespace {

// Every stage's order, kept for the next walk of the same shape: the search walks thousands of
// candidates a shape, and building the orders took a fifth of its walking time. A few shapes
// are kept, as a long schedule's line is walked at two lengths (time_model.cpp).
const std::vector<std::vector<SchedulePass>>& stage_orders(int64_t p, int64_t m, int64_t v,
                                                           bool gpipe) {
  struct Kept {
    int64_t p = -1, m = -1, v = -1;
    bool gpipe = false;
    std::vector<std::vector<SchedulePass>> order;
  };
  thread_local std::array<Kept, 4> kept;
  thread_local size_t next = 0;
  for (const Kept& k : kept)
    if (k.p == p && k.m == m && k.v == v && k.gpipe == gpipe) return k.order;
  Kept& k = kept[next];
  next = (next + 1) % kept.size();
  k.order.clear();
  for (int64_t s = 0; s < p; ++s) k.order.push_back(schedule_order(s, p, m, v, gpipe));
  k.p = p, k.m = m, k.v = v, k.gpipe = gpipe;
  return k.order;
}

}  // namespace

Seconds schedule_makespan(const std::vector<ChunkTimes>& stages, int64_t m,
                          const std::vector<Seconds>& hops, bool gpipe) {
  const int64_t p = static_cast<int64_t>(stages.size());
  if (p == 0 || m <= 0) throw std::invalid_argument("a pipeline needs stages and micro-batches");
  if (hops.size() != stages.size()) throw std::invalid_argument("a pipeline needs one hop a stage");
  const int64_t v = static_cast<int64_t>(stages.front().forward.size());
  for (const ChunkTimes& s : stages) {
    if (v == 0 || static_cast<int64_t>(s.forward.size()) != v ||
        static_cast<int64_t>(s.backward.size()) != v)
      throw std::invalid_argument("every stage needs a forward and backward time per chunk");
    for (const auto* link : {&s.forward_link, &s.backward_link, &s.backward_tail}) {
      if (!link->empty() && static_cast<int64_t>(link->size()) != v)
        throw std::invalid_argument("a stage's link times need one entry per chunk");
    }
  }
  if (v > 1 && m % p != 0)
    throw std::invalid_argument("interleaving needs micro-batches divisible by stages");
  // End time of each pass, by (stage, chunk, micro); negative until it has run.
  auto cell = [&](int64_t s, int64_t c, int64_t i) {
    return static_cast<size_t>((s * v + c) * m + i);
  };
  std::vector<double> fwd_end(static_cast<size_t>(p * v * m), -1.0), bwd_end = fwd_end;
  // Where each pass stands in its stage's order, once it has run.
  std::vector<int64_t> fwd_at, bwd_at;
  const std::vector<std::vector<SchedulePass>>& order = stage_orders(p, m, v, gpipe);
  // Where a pass's input comes from: the pass before it in the pipeline, on stage `from`, the
  // cell its end is kept in, and the hop between them; the data loader's (from = -1) for the
  // first chunk, and the last virtual stage's backward starts from its own forward, on the
  // same GPU (hop 0).
  struct Source {
    int64_t from = -1;
    bool forward = true;
    size_t cell = 0;
    double hop = 0;
  };
  auto source = [&](int64_t s, const SchedulePass& op) -> Source {
    if (op.forward) {
      if (s == 0 && op.chunk == 0) return {};
      if (s > 0)
        return {s - 1, true, cell(s - 1, op.chunk, op.micro), hops[static_cast<size_t>(s)].value()};
      return {p - 1, true, cell(p - 1, op.chunk - 1, op.micro), hops[0].value()};
    }
    if (s == p - 1 && op.chunk == v - 1) return {s, true, cell(s, op.chunk, op.micro), 0.0};
    if (s < p - 1)
      return {s + 1, false, cell(s + 1, op.chunk, op.micro),
              hops[static_cast<size_t>(s + 1)].value()};
    return {0, false, cell(0, op.chunk + 1, op.micro), hops[0].value()};
  };
  auto end_of = [&](const Source& from) {
    return from.from < 0 ? 0.0 : (from.forward ? fwd_end : bwd_end)[from.cell];
  };
  // Without traffic beside any send (most walks), each hop as it is: the rules of `source`
  // inline, as the search walks millions of passes.
  auto plain_input_at = [&](int64_t s, const SchedulePass& op) -> double {
    if (op.forward) {
      if (s == 0 && op.chunk == 0) return 0.0;
      const double e = s > 0 ? fwd_end[cell(s - 1, op.chunk, op.micro)]
                             : fwd_end[cell(p - 1, op.chunk - 1, op.micro)];
      return e < 0 ? -1.0 : e + hops[static_cast<size_t>(s)].value();
    }
    if (s == p - 1 && op.chunk == v - 1) return fwd_end[cell(s, op.chunk, op.micro)];
    const double e = s < p - 1 ? bwd_end[cell(s + 1, op.chunk, op.micro)]
                               : bwd_end[cell(0, op.chunk + 1, op.micro)];
    return e < 0 ? -1.0 : e + hops[static_cast<size_t>(s < p - 1 ? s + 1 : 0)].value();
  };
  const bool any_busy = std::any_of(stages.begin(), stages.end(),
                                    [](const ChunkTimes& t) { return !t.forward_busy.empty(); });
  if (any_busy) fwd_at.assign(fwd_end.size(), -1), bwd_at = fwd_at;
  // When a pass's input is there: its source's end and the hop. A send leaves as its stage ends
  // the pass that made it; where the stage goes straight on to its next pass (that one's input
  // is there), the send shares its link with that pass's traffic and goes at half the rate
  // while the traffic runs: 1 / (1 - busy / 2) as long. (A hop alone, one host-bound layer a
  // chunk over the A800 nodes at pp 2, vpp 4, EP across nodes: every 1.3 ms send beside the
  // next chunk's all-to-alls took 2.4 ms in the simulator, on the critical path of two
  // micro-batches, and the planner came out 8.2 % under it.)
  auto input_at = [&](int64_t s, const SchedulePass& op) -> double {
    if (!any_busy) return plain_input_at(s, op);
    const Source from = source(s, op);
    const double e = end_of(from);
    if (e < 0) return -1.0;
    if (from.from < 0 || from.hop <= 0) return e + from.hop;
    const ChunkTimes& t = stages[static_cast<size_t>(from.from)];
    const std::vector<SchedulePass>& ops = order[static_cast<size_t>(from.from)];
    const int64_t j = (from.forward ? fwd_at : bwd_at)[from.cell];
    if (t.forward_busy.empty() || j < 0 || j + 1 >= static_cast<int64_t>(ops.size()))
      return e + from.hop;
    const SchedulePass& then = ops[static_cast<size_t>(j + 1)];
    const Source its = source(from.from, then);
    const double ready = end_of(its);
    if (ready < 0 || ready + its.hop > e) return e + from.hop;
    const bool across = from.forward ? t.down_across : t.up_across;
    const auto c = static_cast<size_t>(then.chunk);
    const double busy = (then.forward ? t.forward_busy : t.backward_busy)[c].on(across);
    return e + from.hop / (1.0 - busy / 2.0);
  };
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  std::vector<double> link_free_at(static_cast<size_t>(p), 0.0);  // a backward's sync rest
  double makespan = 0.0;
  // Each sweep runs every stage as far as its inputs allow; a sweep that runs nothing while
  // passes remain would be a schedule that deadlocks, which Megatron's orders never do.
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      const auto& ops = order[static_cast<size_t>(s)];
      size_t& k = next[static_cast<size_t>(s)];
      for (; k < ops.size(); ++k) {
        const SchedulePass& op = ops[k];
        const double ready = input_at(s, op);
        if (ready < 0) break;
        const ChunkTimes& t = stages[static_cast<size_t>(s)];
        const auto c = static_cast<size_t>(op.chunk);
        const double start = std::max(free_at[static_cast<size_t>(s)], ready);
        double took = (op.forward ? t.forward : t.backward)[c].value();
        const auto& link = op.forward ? t.forward_link : t.backward_link;
        double& link_free = link_free_at[static_cast<size_t>(s)];
        if (!link.empty())
          took = std::max(took, link[c].value() + std::max(0.0, link_free - start));
        const double end = start + took;
        if (!op.forward && !t.backward_tail.empty()) link_free = end + t.backward_tail[c].value();
        (op.forward ? fwd_end : bwd_end)[cell(s, op.chunk, op.micro)] = end;
        if (any_busy)
          (op.forward ? fwd_at : bwd_at)[cell(s, op.chunk, op.micro)] = static_cast<int64_t>(k);
        free_at[static_cast<size_t>(s)] = end;
        makespan = std::max(makespan, end);
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < p; ++s) {
    if (next[static_cast<size_t>(s)] != order[static_cast<size_t>(s)].size())
      throw std::logic_error("pipeline schedule deadlocked");
  }
  return Seconds(makespan);
}

std::vector<Seconds> first_backward_starts(const std::vector<ChunkTimes>& stages, int64_t m,
                                           const std::vector<Seconds>& hops, bool gpipe,
                                           const std::vector<Seconds>& gathers) {
  const int64_t p = static_cast<int64_t>(stages.size());
  if (p == 0 || m <= 0) throw std::invalid_argument("a pipeline needs stages and micro-batches");
  if (hops.size() != stages.size()) throw std::invalid_argument("a pipeline needs one hop a stage");
  if (!gathers.empty() && gathers.size() != stages.size())
    throw std::invalid_argument("a pipeline's gathers need one entry a stage");
  const int64_t v = static_cast<int64_t>(stages.front().forward.size());
  const std::vector<std::vector<SchedulePass>>& order = stage_orders(p, m, v, gpipe);
  auto forward = [&](int64_t s, int64_t c) {
    return stages[static_cast<size_t>(s)].forward[static_cast<size_t>(c)];
  };
  // Each stage's forward time before micro-batch 0's forward of each chunk (own[s][c]), and
  // before its first backward (warm[s]).
  std::vector<std::vector<Seconds>> own(static_cast<size_t>(p));
  std::vector<Seconds> warm(static_cast<size_t>(p));
  for (int64_t s = 0; s < p; ++s) {
    std::vector<Seconds>& mine = own[static_cast<size_t>(s)];
    mine.assign(static_cast<size_t>(v), Seconds(0));
    Seconds ran;
    for (const SchedulePass& op : order[static_cast<size_t>(s)]) {
      if (!op.forward) break;
      if (op.micro == 0) mine[static_cast<size_t>(op.chunk)] = ran;
      ran += forward(s, op.chunk);
    }
    warm[static_cast<size_t>(s)] = ran;
  }
  // Micro-batch 0 round the ring once a chunk: each forward once its input is there and its
  // stage has run the forwards before it.
  std::vector<Seconds> first_forward(static_cast<size_t>(p));
  Seconds arrive, end;
  for (int64_t c = 0; c < v; ++c) {
    for (int64_t s = 0; s < p; ++s) {
      const auto i = static_cast<size_t>(s);
      if (s > 0) arrive = end + hops[i];
      if (c == 0) first_forward[i] = arrive;
      const Seconds start = std::max(arrive, first_forward[i] + own[i][static_cast<size_t>(c)]);
      end = start + forward(s, c);
      if (!gathers.empty())
        end = std::max(end, gathers[i] * (static_cast<double>(c + 1) / static_cast<double>(v)));
    }
    arrive = end + hops[0];
  }
  // Then back down the last chunk.
  std::vector<Seconds> starts(static_cast<size_t>(p));
  Seconds ready = end;
  for (int64_t s = p - 1; s >= 0; --s) {
    const auto i = static_cast<size_t>(s);
    starts[i] = std::max(ready, first_forward[i] + warm[i]);
    ready = starts[i] + stages[i].backward[static_cast<size_t>(v - 1)] + hops[i];
  }
  return starts;
}

}  // namespace moe
