#include <fmt/format.h>

#include <cmath>

#include "planner/efficiencies.h"
#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"

namespace moe::io {

namespace {
constexpr const char* kCalibrationFormat = "moeplan-calibration/1";
constexpr const char* kPopularityFormat = "moeplan-popularity/1";
}  // namespace

Calibration calibration_from_json(const nlohmann::json& j, const std::string& source) {
  ObjectReader r(j, source, "");
  const std::string format = r.string("format");
  if (format != kCalibrationFormat)
    r.fail("format", fmt::format("'{}' is not {}", format, kCalibrationFormat));
  Calibration cal;
  cal.provenance = r.has("provenance") ? r.raw("provenance") : nlohmann::json::object();
  r.ignore("provenance");
  if (r.has("constants")) {
    ObjectReader k = r.object("constants");
    const nlohmann::json& all = r.raw("constants");
    Efficiencies probe;
    for (auto it = all.begin(); it != all.end(); ++it) {
      const double value = k.number(it.key());
      try {
        set_constant(probe, it.key(), value);
      } catch (const ConfigError& e) {
        k.fail(it.key(), e.what());
      }
      cal.constants.emplace(it.key(), value);
    }
    k.finish();
  } else {
    r.ignore("constants");
  }
  if (!r.has("curves") && cal.constants.empty())
    r.fail("curves", "missing: a calibration file holds curves, constants or both");
  const nlohmann::json& curves = r.has("curves") ? r.raw("curves") : nlohmann::json::object();
  if (!curves.is_object()) r.fail("curves", "expected an object of named curves");
  for (auto it = curves.begin(); it != curves.end(); ++it) {
    ObjectReader c(it.value(), source, r.pointer("curves") + "/" + it.key());
    std::optional<BytesPerSec> reference;
    if (c.has("reference_bandwidth"))
      reference = c.rate_string("reference_bandwidth");
    else
      c.ignore("reference_bandwidth");
    c.ignore("unit");
    c.ignore("note");
    if (c.has("reference_GFLOPS"))
      cal.reference_flops.emplace(it.key(),
                                  FlopsPerSec(positive_number(c, "reference_GFLOPS") * 1e9));
    else
      c.ignore("reference_GFLOPS");
    c.ignore("threads");
    std::vector<EfficiencyCurve::Point> points;
    for (ObjectReader p : c.object_array("points")) {
      // Transfers are sized in bytes, compute curves (GEMM, CPU expert) in FLOPs.
      const double size =
          p.has("size_flops") ? positive_number(p, "size_flops") : positive_number(p, "size_bytes");
      points.push_back({size, positive_number(p, "efficiency")});
      p.ignore("seconds");
      p.finish();
    }
    c.finish();
    try {
      cal.curves.emplace(it.key(), EfficiencyCurve(std::move(points), reference));
    } catch (const ConfigError& e) {
      c.fail("points", e.what());
    }
  }
  r.finish();
  return cal;
}

Calibration load_calibration(const std::string& path) {
  return calibration_from_json(read_json_file(path), path);
}

std::vector<std::vector<double>> popularity_from_json(const nlohmann::json& j,
                                                      const std::string& source) {
  ObjectReader r(j, source, "");
  const std::string format = r.string("format");
  if (format != kPopularityFormat)
    r.fail("format", fmt::format("'{}' is not {}", format, kPopularityFormat));
  const nlohmann::json& layers = r.raw("layers");
  if (!layers.is_array() || layers.empty())
    r.fail("layers", "expected a non-empty array of per-expert counts");
  std::vector<std::vector<double>> out;
  size_t experts = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string where = fmt::format("/layers/{}", l);
    if (!layers[l].is_array() || layers[l].empty())
      throw InputError(source, where, "expected a non-empty array");
    if (l == 0) experts = layers[l].size();
    if (layers[l].size() != experts) {
      throw InputError(source, where,
                       fmt::format("has {} experts, layer 0 has {}", layers[l].size(), experts));
    }
    std::vector<double> row;
    double total = 0;
    for (size_t e = 0; e < layers[l].size(); ++e) {
      const nlohmann::json& v = layers[l][e];
      if (!v.is_number() || v.get<double>() < 0 || !std::isfinite(v.get<double>())) {
        throw InputError(source, fmt::format("{}/{}", where, e), "expected a non-negative number");
      }
      row.push_back(v.get<double>());
      total += row.back();
    }
    if (!(total > 0)) throw InputError(source, where, "all counts are zero");
    for (double& x : row) x /= total;
    out.push_back(std::move(row));
  }
  r.ignore("note");
  r.finish();
  return out;
}

std::vector<std::vector<double>> load_popularity(const std::string& path) {
  return popularity_from_json(read_json_file(path), path);
}

}  // namespace moe::io
