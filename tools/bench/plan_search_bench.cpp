// Google Benchmark of the planner's full search (issue 3 targets: < 5 s wall on 2 cores,
// < 1 GB, >= 100,000 candidates per second):
//   DeepSeek-V3 on 2,048 H800, global batch 15,360, sequence 4,096
//   Internal-352B on 1,440 H800, global batch 720, sequence 8,192
// and the first under the energy objective, which also weighs ten power caps a candidate.
// Run through tools/bench.sh, which also records peak memory of the CLI doing the same search.
#include <benchmark/benchmark.h>

#include <string>

#include "planner/io/loaders.h"
#include "planner/power_limit.h"
#include "planner/search.h"

#ifndef MOEPLAN_SOURCE_DIR
#error "MOEPLAN_SOURCE_DIR must point at the source tree"
#endif

namespace {

void search_benchmark(benchmark::State& state, const char* model, const char* cluster, int64_t gbs,
                      int64_t seq, moe::Objective objective = moe::Objective::kThroughput) {
  const std::string root = MOEPLAN_SOURCE_DIR;
  const moe::ModelSpec m = moe::io::load_model(root + "/models/" + model);
  const moe::ClusterSpec c = moe::io::load_cluster(root + "/topologies/" + cluster);
  const moe::TimeContext ctx =
      moe::make_time_context(m, c, moe::efficiencies(), moe::RoutingSkew{}, seq);
  moe::SearchRequest req;
  req.num_gpus = c.num_gpus();
  req.global_batch = gbs;
  req.threads = static_cast<int>(state.range(0));
  req.objective = objective;
  if (objective == moe::Objective::kEnergy)
    req.power_caps = moe::energy_power_caps(c.node.gpu.power);
  int64_t evaluated = 0, bounded = 0, layouts = 0;
  for (auto _ : state) {
    const moe::SearchResult r = moe::search_plans(ctx, req);
    benchmark::DoNotOptimize(r.ranked.data());
    evaluated += r.stats.evaluated;
    bounded += r.stats.bounded;
    layouts += r.stats.layouts;
  }
  state.counters["candidates_per_s"] =
      benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kIsRate);
  state.counters["layouts"] =
      benchmark::Counter(static_cast<double>(layouts), benchmark::Counter::kAvgIterations);
  state.counters["candidates"] =
      benchmark::Counter(static_cast<double>(evaluated), benchmark::Counter::kAvgIterations);
  state.counters["cut_by_time_bound"] =
      benchmark::Counter(static_cast<double>(bounded), benchmark::Counter::kAvgIterations);
}

void BM_SearchDeepSeekV3On2048H800(benchmark::State& state) {
  search_benchmark(state, "deepseek-v3.json", "h800-2048.json", 15360, 4096);
}
void BM_SearchDeepSeekV3On2048H800ForEnergy(benchmark::State& state) {
  search_benchmark(state, "deepseek-v3.json", "h800-2048.json", 15360, 4096,
                   moe::Objective::kEnergy);
}
void BM_Search352BOn1440H800(benchmark::State& state) {
  search_benchmark(state, "megascale-internal-352b.json", "megascale-h800-1440.json", 720, 8192);
}

BENCHMARK(BM_SearchDeepSeekV3On2048H800)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_SearchDeepSeekV3On2048H800ForEnergy)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Search352BOn1440H800)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
