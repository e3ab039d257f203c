#include "calibrate/gpu_curves.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "planner/time_model.h"

namespace moe::calibrate {

std::vector<GemmShape> gemm_shapes(const ModelSpec* m, bool quick) {
  std::vector<GemmShape> shapes = {{8192, 8192, 8192}};
  if (m == nullptr) {
    for (int64_t n : quick ? std::vector<int64_t>{1024, 4096}
                           : std::vector<int64_t>{256, 512, 1024, 2048, 4096})
      shapes.push_back({n, n, n});
  } else {
    const int64_t h = m->hidden_size;
    const AttentionSpec& a = m->attention;
    const int64_t qkv = a.num_heads * a.qk_head_dim() + a.num_kv_heads * a.qk_head_dim() +
                        a.num_kv_heads * a.value_head_dim();
    const int64_t ffn = m->is_moe() ? m->expert_ffn_size : m->dense_ffn_size;
    const int64_t up = (m->gated_ffn ? 2 : 1) * ffn;
    for (int64_t tokens : quick ? std::vector<int64_t>{512, 8192}
                                : std::vector<int64_t>{128, 512, 2048, 8192, 32768}) {
      shapes.push_back({tokens, up, h});   // expert (or FFN) up projection
      shapes.push_back({tokens, h, ffn});  // and down
    }
    shapes.push_back({4096, qkv, h});                               // QKV projection
    shapes.push_back({4096, h, a.num_heads * a.value_head_dim()});  // output projection
  }
  // Dimensions in multiples of 16 (what FP8 kernels require); drop what rounds to nothing.
  for (GemmShape& s : shapes) {
    s.m = std::max<int64_t>(16, (s.m + 15) / 16 * 16);
    s.n = std::max<int64_t>(16, (s.n + 15) / 16 * 16);
    s.k = std::max<int64_t>(16, (s.k + 15) / 16 * 16);
  }
  std::sort(shapes.begin(), shapes.end(), [](const GemmShape& a, const GemmShape& b) {
    return a.flops() != b.flops() ? a.flops() < b.flops()
                                  : std::tie(a.m, a.n, a.k) < std::tie(b.m, b.n, b.k);
  });
  shapes.erase(std::unique(shapes.begin(), shapes.end(),
                           [](const GemmShape& a, const GemmShape& b) {
                             return a.m == b.m && a.n == b.n && a.k == b.k;
                           }),
               shapes.end());
  return shapes;
}

std::vector<double> transfer_sizes(bool quick) {
  if (quick) return {65536.0, 4194304.0, 268435456.0};
  std::vector<double> sizes;
  for (double s = 4096; s <= 1073741824.0; s *= 4) sizes.push_back(s);
  return sizes;
}

namespace {
// Points of equal size averaged, sorted by size.
// Measurements by size: (efficiency, seconds) of each.
using Samples = std::map<double, std::vector<std::pair<double, double>>>;

nlohmann::json points_of(const Samples& by_size, const char* size_key) {
  nlohmann::json points = nlohmann::json::array();
  for (const auto& [size, samples] : by_size) {
    double eff = 0, seconds = 0;
    for (auto [e, s] : samples) eff += e, seconds += s;
    const double n = static_cast<double>(samples.size());
    points.push_back(
        {{size_key, size}, {"efficiency", std::min(eff / n, 1.5)}, {"seconds", seconds / n}});
  }
  return points;
}

// A curve of bytes moved, against a reference bandwidth the file records.
nlohmann::json bandwidth_curve(const Samples& by_bytes, BytesPerSec reference, const char* unit,
                               const std::string& note) {
  return {{"unit", unit},
          {"reference_bandwidth", fmt::format("{:.6g} GB/s", reference.value() / 1e9)},
          {"note", note},
          {"points", points_of(by_bytes, "size_bytes")}};
}
}  // namespace

nlohmann::json gemm_curve(const std::vector<GemmTiming>& timings, FlopsPerSec peak,
                          const std::string& note) {
  Samples by_flops;
  for (const GemmTiming& t : timings) {
    const double achieved = t.shape.flops() / t.seconds / peak.value();
    const double shape =
        gemm_shape_factor(static_cast<double>(t.shape.m), static_cast<double>(t.shape.k),
                          static_cast<double>(t.shape.n));
    by_flops[t.shape.flops()].push_back({achieved / shape, t.seconds});
  }
  return {{"unit", "FLOPs per call"},
          {"reference_GFLOPS", peak.value() / 1e9},
          {"note", note},
          {"points", points_of(by_flops, "size_flops")}};
}

nlohmann::json collective_curve(const std::vector<NcclTiming>& timings, BytesPerSec reference,
                                const std::string& note) {
  Samples by_bytes;
  for (const NcclTiming& t : timings)
    if (t.busbw > 0) by_bytes[t.bytes].push_back({t.busbw / reference.value(), t.seconds});
  return bandwidth_curve(by_bytes, reference, "bytes (nccl-tests size)", note);
}

nlohmann::json transfer_curve(const std::vector<CopyTiming>& timings, BytesPerSec reference,
                              const std::string& note) {
  Samples by_bytes;
  for (const CopyTiming& t : timings)
    by_bytes[t.bytes].push_back({t.bytes / t.seconds / reference.value(), t.seconds});
  return bandwidth_curve(by_bytes, reference, "bytes per direction", note);
}

}  // namespace moe::calibrate
