#include "tools/moeplan/common.h"

#include <fmt/format.h>

#include <cstdio>

#include "planner/errors.h"
#include "planner/io/loaders.h"

namespace moe::cli {

ParallelConfig layout_for(const std::string& text, const ModelSpec& m) {
  try {
    ParallelConfig p = resolve(parse_parallel(text));
    check(p, m);
    return p;
  } catch (const ConfigError& e) {
    throw InputError("--parallel", "", e.what());
  }
}

void warn_world_size(const ParallelConfig& p, const ClusterSpec& c) {
  if (p.world() != c.num_gpus()) {
    fmt::print(stderr,
               "warning: layout {} spans {} GPUs; cluster {} has {} (per-GPU numbers still hold)\n",
               p.to_string(), p.world(), c.name, c.num_gpus());
  }
}

RoutingSkew skew_for(const std::string& text, const ModelSpec& m) {
  if (text.find(".json") == std::string::npos) return parse_skew(text, m);
  RoutingSkew skew;
  skew.kind = RoutingSkew::Kind::kPopularity;
  skew.proportions = io::load_popularity(text);
  for (size_t l = 0; l < skew.proportions.size(); ++l) {
    if (static_cast<int64_t>(skew.proportions[l].size()) != m.num_routed_experts) {
      throw InputError(text, fmt::format("/layers/{}", l),
                       fmt::format("has {} experts, model has {}", skew.proportions[l].size(),
                                   m.num_routed_experts));
    }
  }
  return skew;
}

Efficiencies efficiencies_from(const std::string& calibration_file) {
  if (calibration_file.empty()) return efficiencies();
  return efficiencies(io::load_calibration(calibration_file).curves);
}

Dtype parse_dtype(const std::string& text, const std::string& option) {
  for (Dtype d : {Dtype::kFp32, Dtype::kTf32, Dtype::kBf16, Dtype::kFp16, Dtype::kFp8}) {
    if (text == dtype_name(d)) return d;
  }
  throw InputError(option, "", fmt::format("'{}' is not one of fp32, tf32, bf16, fp16, fp8", text));
}

}  // namespace moe::cli
