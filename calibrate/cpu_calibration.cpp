#include "calibrate/cpu_calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace moe::calibrate {

nlohmann::json cpu_curve(const ExpertShape& shape, const std::vector<CpuExpertTiming>& timings) {
  double best = 0;
  for (const CpuExpertTiming& t : timings) best = std::max(best, t.forward_flops / t.forward_s);
  nlohmann::json points = nlohmann::json::array();
  for (const CpuExpertTiming& t : timings) {
    points.push_back({{"size_flops", t.forward_flops},
                      {"efficiency", t.forward_flops / t.forward_s / best},
                      {"seconds", t.forward_s}});
  }
  return {{"unit", "flops"},
          {"threads", timings.empty() ? 0 : timings.front().threads},
          {"reference_GFLOPS", best / 1e9},
          {"note", fmt::format("Eigen FP32 expert FFN forward, h = {}, g = {}, {}; efficiency "
                               "against the best rate at this thread count",
                               shape.hidden, shape.ffn, shape.gated ? "gated" : "plain")},
          {"points", points}};
}

void run_cpu_sweep(const CpuSweep& sweep, const std::vector<std::string>& skip,
                   const std::function<void(const CpuExpertTiming&)>& progress,
                   const CurveDone& done) {
  std::vector<int> threads = sweep.threads;
  if (threads.empty()) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = hw > 1 ? std::vector<int>{1, hw} : std::vector<int>{1};
  }
  std::vector<int64_t> tokens = sweep.tokens;
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  for (size_t k = 0; k < threads.size(); ++k) {
    const bool all = k + 1 == threads.size();
    const std::string name =
        all ? std::string("cpu_expert_ffn") : fmt::format("cpu_expert_ffn_{}t", threads[k]);
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;  // --resume
    std::vector<CpuExpertTiming> timings;
    for (int64_t t : tokens) {
      int repeats = sweep.repeats;
      if (!timings.empty()) {
        const CpuExpertTiming& last = timings.back();
        const double pass = (last.forward_s + last.backward_s) * static_cast<double>(t) /
                            static_cast<double>(last.tokens);
        if (pass > sweep.seconds_per_point) break;  // the curve holds its last rate beyond
        repeats = std::clamp(static_cast<int>(sweep.seconds_per_point / pass), 1, repeats);
      }
      const CpuExpertTiming r = time_cpu_expert(sweep.shape, t, threads[k], repeats);
      if (r.max_relative_error > 1e-4) {
        throw std::runtime_error(fmt::format(
            "CPU expert at {} tokens: forward differs from the float64 reference by {:.2e}", t,
            r.max_relative_error));
      }
      if (progress) progress(r);
      timings.push_back(r);
    }
    done(name, cpu_curve(sweep.shape, timings));
  }
}

}  // namespace moe::calibrate
