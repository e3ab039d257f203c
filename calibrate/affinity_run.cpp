#include "calibrate/affinity_run.h"

#include <algorithm>
#include <cmath>

namespace moe::calibrate {

AffinityCase affinity_case(const ModelSpec& m, const aptmoe::Allocation& a) {
  AffinityCase c{m.hidden_size, m.expert_ffn_size, m.gated_ffn, {}};
  for (size_t i = 0; i < a.experts.size(); ++i) {
    const aptmoe::ExpertCost& e = a.experts[i];
    c.experts.push_back({e.expert, std::max<int64_t>(1, std::llround(e.tokens)), a.on_gpu[i],
                         e.load.value(), e.gpu.value(), e.cpu.value()});
  }
  return c;
}

double two_slot_pipeline(const std::vector<double>& load, const std::vector<double>& run,
                         int slots) {
  const size_t n = load.size(), k = static_cast<size_t>(std::max(slots, 1));
  std::vector<double> loaded(n, 0), done(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const double start = std::max(i > 0 ? loaded[i - 1] : 0.0, i >= k ? done[i - k] : 0.0);
    loaded[i] = start + load[i];
    done[i] = std::max(loaded[i], i > 0 ? done[i - 1] : 0.0) + run[i];
  }
  return n > 0 ? done.back() : 0.0;
}

AffinityTimes predict_affinity(const AffinityCase& c) {
  std::vector<double> all_load, all_run, gpu_load, gpu_run;
  AffinityTimes t;
  for (const AffinityExpert& e : c.experts) {
    all_load.push_back(e.load_s);
    all_run.push_back(e.gpu_s);
    if (e.on_gpu) {
      gpu_load.push_back(e.load_s);
      gpu_run.push_back(e.gpu_s);
    } else {
      t.split_cpu_s += e.cpu_s;
    }
  }
  t.load_all_s = two_slot_pipeline(all_load, all_run);
  t.split_gpu_s = two_slot_pipeline(gpu_load, gpu_run);
  t.split_s = std::max(t.split_gpu_s, t.split_cpu_s);
  return t;
}

}  // namespace moe::calibrate
