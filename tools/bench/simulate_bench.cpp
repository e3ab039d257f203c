// Google Benchmark of the simulator (issue 4 targets): one iteration of the Internal-352B model
// on 1,440 H800 in the symmetric mode (a representative GPU per pipeline stage) under 1 s and
// with every GPU simulated under 10 s, and a DeepSeek-V3 iteration on 16,384 H800 that
// completes. Reports simulated events per second.
// Run through tools/bench.sh, which also records the CLI's wall time and peak memory.
#include <benchmark/benchmark.h>

#include <string>

#include "planner/io/loaders.h"
#include "planner/search.h"
#include "simulator/training_sim.h"

#ifndef MOEPLAN_SOURCE_DIR
#error "MOEPLAN_SOURCE_DIR must point at the source tree"
#endif

namespace {

void simulate_benchmark(benchmark::State& state, const char* model, const char* cluster,
                        const char* layout, int64_t seq, moe::AttentionMode attention,
                        bool every_gpu = false) {
  const std::string root = MOEPLAN_SOURCE_DIR;
  const moe::ModelSpec m = moe::io::load_model(root + "/models/" + model);
  const moe::ClusterSpec c = moe::io::load_cluster(root + "/topologies/" + cluster);
  const moe::TimeContext ctx =
      moe::make_time_context(m, c, moe::efficiencies(), moe::RoutingSkew{}, seq);
  moe::PlanChoice plan;
  plan.parallel = moe::resolve(moe::parse_parallel(layout));
  moe::check(plan.parallel, m);
  plan.seq_len = seq;
  plan.attention = attention;
  plan.dp_bf16_compression = true;
  moe::sim::TrainingOptions options;
  options.every_gpu = every_gpu;
  uint64_t events = 0, tasks = 0;
  for (auto _ : state) {
    const moe::sim::TrainingReport r = moe::sim::simulate_training(ctx, c, plan, options);
    benchmark::DoNotOptimize(r.mean_iteration);
    events += r.events;
    tasks += r.tasks;
    state.counters["simulated_iteration_ms"] = r.mean_iteration.value() * 1e3;
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["events"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kAvgIterations);
  state.counters["tasks"] =
      benchmark::Counter(static_cast<double>(tasks), benchmark::Counter::kAvgIterations);
}

// MegaScale-MoE's layout for the 352B model (Table 3): Ulysses SP = EP = 8 inside a node,
// 15 pipeline stages, data parallel over the rest.
void BM_Simulate352BOn1440H800(benchmark::State& state) {
  simulate_benchmark(state, "megascale-internal-352b.json", "megascale-h800-1440.json",
                     "tp=8,pp=15,ep=8,dp=12,mbs=1,gbs=720", 8192, moe::AttentionMode::kUlysses);
}
// Every one of the 1,440 GPUs simulated: MegaScale-MoE's layout (96 GPUs a stage, 15 stages)
// and the planner's best (tp=4, no pipeline, 1,440 GPUs in one stage).
void BM_Simulate352BOn1440H800EveryGpu(benchmark::State& state) {
  simulate_benchmark(state, "megascale-internal-352b.json", "megascale-h800-1440.json",
                     "tp=8,pp=15,ep=8,dp=12,mbs=1,gbs=720", 8192, moe::AttentionMode::kUlysses,
                     true);
}
void BM_Simulate352BOn1440H800PlannersBestEveryGpu(benchmark::State& state) {
  simulate_benchmark(state, "megascale-internal-352b.json", "megascale-h800-1440.json",
                     "tp=4,pp=1,ep=32,dp=360,mbs=2,gbs=720", 8192, moe::AttentionMode::kUlysses,
                     true);
}
void BM_Simulate352BOn240H800(benchmark::State& state) {
  simulate_benchmark(state, "megascale-internal-352b.json", "megascale-h800-240.json",
                     "tp=8,pp=15,ep=8,dp=2,mbs=1,gbs=720", 8192, moe::AttentionMode::kUlysses);
}
// The planner's best layout for DeepSeek-V3 on 16,384 H800 (GBS 15,360, seq 4,096).
void BM_SimulateDeepSeekV3On16384H800(benchmark::State& state) {
  simulate_benchmark(state, "deepseek-v3.json", "h800-16384.json",
                     "tp=8,pp=16,ep=16,dp=128,mbs=1,gbs=15360,pp_first=2,pp_last=3", 4096,
                     moe::AttentionMode::kUlysses);
}

BENCHMARK(BM_Simulate352BOn1440H800)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Simulate352BOn1440H800EveryGpu)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Simulate352BOn1440H800PlannersBestEveryGpu)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Simulate352BOn240H800)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SimulateDeepSeekV3On16384H800)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
