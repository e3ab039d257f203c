#include "calibrate/affinity_run.h"

#include <algorithm>

namespace moe::calibrate {

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
