// Pipeline schedules against their closed forms (issue 4's analytic checks).
#include "simulator/pipeline.h"

#include <gtest/gtest.h>

namespace moe::sim {

namespace {
SimTime ms(double x) {
  return to_sim_time(Seconds(x * 1e-3));
}

PipelineSpec equal_stages(int p, int m, double f_ms, double b_ms) {
  PipelineSpec spec;
  spec.stages.assign(p, StageWork{ms(f_ms), ms(b_ms)});
  spec.microbatches = m;
  spec.boundary_bytes = Bytes(0);
  spec.boundary_bandwidth = gigabytes_per_sec(100);
  return spec;
}
}  // namespace

TEST(Pipeline, OneFOneBOfEqualStagesIsMPlusPMinusOneSteps) {
  // (m + p - 1)(t_f + t_b) with communication off.
  for (auto [p, m] : {std::pair{4, 8}, {4, 2}, {1, 5}, {8, 32}}) {
    const PipelineResult r = simulate_pipeline(equal_stages(p, m, 1.0, 2.0));
    EXPECT_EQ(r.makespan, ms((m + p - 1) * 3.0)) << "p=" << p << " m=" << m;
    size_t compute = 0;
    for (const Span& sp : r.spans) compute += sp.lane == "compute";
    EXPECT_EQ(compute, static_cast<size_t>(2 * p * m));
    for (SimTime busy : r.busy) EXPECT_EQ(busy, ms(3.0 * m));
  }
}

TEST(Pipeline, GPipeTakesTheSameTimeAsOneFOneB) {
  PipelineSpec spec = equal_stages(4, 8, 1.0, 2.0);
  spec.gpipe = true;
  EXPECT_EQ(simulate_pipeline(spec).makespan, ms(11 * 3.0));
}

TEST(Pipeline, TheSlowestStageSetsTheSteadyState) {
  PipelineSpec spec = equal_stages(4, 16, 1.0, 2.0);
  spec.stages[2] = {ms(2.0), ms(4.0)};
  const PipelineResult r = simulate_pipeline(spec);
  EXPECT_GE(r.makespan, ms(16 * 6.0));
  EXPECT_LE(r.makespan, ms(16 * 6.0 + 3 * 6.0));
}

TEST(Pipeline, BoundaryTransfersDelayButNeverSpeedUp) {
  PipelineSpec free = equal_stages(4, 8, 1.0, 2.0);
  PipelineSpec sent = free;
  sent.boundary_bytes = Bytes(50e6);  // 0.5 ms at 100 GB/s
  sent.boundary_latency = ms(0.01);
  const SimTime a = simulate_pipeline(free).makespan;
  const SimTime b = simulate_pipeline(sent).makespan;
  EXPECT_GT(b, a);
  // Synchronous 1F1B waits for each transfer; at most one send each way per step of the
  // (m + p - 1)-step schedule lands on the critical path.
  EXPECT_LE(b, a + ms((8 + 4 - 1) * 2 * 0.51 + 1e-6));
}

TEST(Pipeline, SameInputSameSpans) {
  const PipelineSpec spec = equal_stages(3, 5, 1.0, 2.5);
  const PipelineResult a = simulate_pipeline(spec);
  const PipelineResult b = simulate_pipeline(spec);
  ASSERT_EQ(a.spans.size(), b.spans.size());
  for (size_t i = 0; i < a.spans.size(); ++i) {
    EXPECT_EQ(a.spans[i].name, b.spans[i].name);
    EXPECT_EQ(a.spans[i].start, b.spans[i].start);
  }
}

}  // namespace moe::sim

namespace moe::sim {

TEST(Pipeline, InterleavedShrinksTheBubbleByV) {
  // (m + (p - 1)/v)(t_f + t_b): p = 4, m = 8, v = 2 -> (8 + 1.5) x 3 ms.
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 16, 4}, {2, 4, 2}}) {
    PipelineSpec spec = equal_stages(p, m, 1.0, 2.0);
    spec.chunks = v;
    const PipelineResult r = simulate_pipeline(spec);
    EXPECT_EQ(r.makespan, ms((m + (p - 1.0) / v) * 3.0)) << "p=" << p << " m=" << m << " v=" << v;
    size_t compute = 0;
    for (const Span& sp : r.spans) compute += sp.lane == "compute";
    EXPECT_EQ(compute, static_cast<size_t>(2 * p * m * v));
  }
  PipelineSpec bad = equal_stages(4, 6, 1.0, 2.0);
  bad.chunks = 2;
  EXPECT_THROW(simulate_pipeline(bad), std::invalid_argument);  // 6 micro-batches over 4 stages
}

}  // namespace moe::sim
