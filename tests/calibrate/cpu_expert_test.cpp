// The CPU expert of APTMoE's affinity split and the calibration curves made from it: numerics
// against references, thread-count independence, curve shape, and resume.
#include "calibrate/cpu_expert.h"

#include <gtest/gtest.h>

#include "calibrate/cpu_calibration.h"
#include "planner/io/loaders.h"

namespace moe::calibrate {

namespace {
constexpr ExpertShape kGated{16, 24, true};
constexpr ExpertShape kPlain{16, 24, false};

// L = sum(Y * dY), so dL/dX is the backward's dx and dL/dW1 its dw1.
double loss(const ExpertShape& s, const ExpertWeights& w, const Eigen::MatrixXf& x,
            const Eigen::MatrixXf& dy) {
  return static_cast<double>(expert_forward(s, w, x, 1).cwiseProduct(dy).sum());
}
}  // namespace

TEST(CpuExpert, ForwardMatchesAFloat64Product) {
  for (const ExpertShape& s : {kGated, kPlain}) {
    const CpuExpertTiming t = time_cpu_expert(s, 33, 2, 1);
    EXPECT_LT(t.max_relative_error, 1e-5);
    EXPECT_GT(t.forward_s, 0.0);
    EXPECT_DOUBLE_EQ(t.forward_flops, 2.0 * 33 * 16 * 24 * (s.gated ? 3 : 2));
    EXPECT_DOUBLE_EQ(t.backward_flops, 2.0 * t.forward_flops);
  }
}

TEST(CpuExpert, BackwardMatchesFiniteDifferences) {
  for (const ExpertShape& s : {kGated, kPlain}) {
    const ExpertWeights w = random_expert(s, 5);
    Eigen::MatrixXf x = random_tokens(5, s.hidden, 6);
    const Eigen::MatrixXf dy = random_tokens(5, s.hidden, 7);
    ExpertGrads g;
    BackwardWorkspace ws;
    expert_backward(s, w, x, dy, 1, g, ws);
    const float h = 1e-2f;
    for (auto [r, c] : {std::pair{0, 0}, {2, 5}, {4, 15}}) {
      const float keep = x(r, c);
      x(r, c) = keep + h;
      const double up = loss(s, w, x, dy);
      x(r, c) = keep - h;
      const double down = loss(s, w, x, dy);
      x(r, c) = keep;
      EXPECT_NEAR(g.dx(r, c), (up - down) / (2 * h), 2e-3) << (s.gated ? "gated" : "plain");
    }
    // Each weight gradient against a central difference of the loss in that weight.
    auto check = [&](Eigen::MatrixXf ExpertWeights::*m, const Eigen::MatrixXf& grad, int r, int c) {
      ExpertWeights v = w;
      (v.*m)(r, c) += h;
      const double up = loss(s, v, x, dy);
      (v.*m)(r, c) -= 2 * h;
      const double down = loss(s, v, x, dy);
      EXPECT_NEAR(grad(r, c), (up - down) / (2 * h), 2e-3) << r << "," << c;
    };
    check(&ExpertWeights::w1, g.dw1, 3, 7);
    check(&ExpertWeights::w2, g.dw2, 7, 3);
    if (s.gated) check(&ExpertWeights::w3, g.dw3, 2, 9);
  }
}

TEST(CpuExpert, ThreadsSplitTokensWithoutChangingResults) {
  const ExpertWeights w = random_expert(kGated, 1);
  const Eigen::MatrixXf x = random_tokens(37, kGated.hidden, 2);
  const Eigen::MatrixXf dy = random_tokens(37, kGated.hidden, 3);
  EXPECT_LT((expert_forward(kGated, w, x, 1) - expert_forward(kGated, w, x, 3)).norm(), 1e-4);
  ExpertGrads one, three;
  BackwardWorkspace a, b;
  expert_backward(kGated, w, x, dy, 1, one, a);
  expert_backward(kGated, w, x, dy, 3, three, b);
  EXPECT_LT((one.dw1 - three.dw1).norm() / one.dw1.norm(), 1e-5);
  EXPECT_LT((one.dw3 - three.dw3).norm() / one.dw3.norm(), 1e-5);
  EXPECT_LT((one.dx - three.dx).norm() / one.dx.norm(), 1e-5);
  // A workspace reused at another thread count gives the same again.
  expert_backward(kGated, w, x, dy, 1, three, b);
  EXPECT_LT((one.dw2 - three.dw2).norm() / one.dw2.norm(), 1e-6);
}

TEST(CpuCalibration, CurvesLoadAndResumeSkipsWhatIsDone) {
  CpuSweep sweep;
  sweep.shape = kGated;
  sweep.tokens = {64, 8, 32};
  sweep.threads = {1, 2};
  sweep.repeats = 1;
  nlohmann::json doc = {{"format", "moeplan-calibration/1"}, {"curves", nlohmann::json::object()}};
  std::vector<std::string> names;
  int points = 0;
  run_cpu_sweep(
      sweep, {}, [&](const CpuExpertTiming&) { ++points; },
      [&](const std::string& name, const nlohmann::json& curve) {
        names.push_back(name);
        doc["curves"][name] = curve;
      });
  EXPECT_EQ(points, 6);
  EXPECT_EQ(names, (std::vector<std::string>{"cpu_expert_ffn_1t", "cpu_expert_ffn"}));
  // Sizes ascend, efficiencies are relative to the best point (which is 1).
  double last = 0, best = 0, last_efficiency = 0;
  for (const auto& p : doc["curves"]["cpu_expert_ffn"]["points"]) {
    EXPECT_GT(p["size_flops"].get<double>(), last);
    last = p["size_flops"].get<double>();
    last_efficiency = p["efficiency"].get<double>();
    EXPECT_LE(p["efficiency"].get<double>(), 1.0 + 1e-12);
    best = std::max(best, p["efficiency"].get<double>());
  }
  EXPECT_DOUBLE_EQ(best, 1.0);
  const io::Calibration cal = io::calibration_from_json(doc, "test");
  EXPECT_EQ(cal.curves.count("cpu_expert_ffn"), 1u);
  // The loader reads FLOP-sized points back as written.
  EXPECT_NEAR(cal.curves.at("cpu_expert_ffn").at(last), last_efficiency, 1e-12);

  names.clear();
  run_cpu_sweep(sweep, {"cpu_expert_ffn_1t"}, {},
                [&](const std::string& name, const nlohmann::json&) { names.push_back(name); });
  EXPECT_EQ(names, (std::vector<std::string>{"cpu_expert_ffn"}));
}

TEST(CpuCalibration, StopsAThreadCountWhoseNextPassWouldOverrunItsBudget) {
  CpuSweep sweep;
  sweep.shape = kGated;
  sweep.tokens = {8, 64, 512};
  sweep.threads = {1};
  // Any measured pass, scaled to the next token count, overruns a nanosecond: one point only.
  sweep.seconds_per_point = 1e-9;
  std::vector<int64_t> measured;
  nlohmann::json curve;
  run_cpu_sweep(
      sweep, {}, [&](const CpuExpertTiming& t) { measured.push_back(t.tokens); },
      [&](const std::string&, const nlohmann::json& c) { curve = c; });
  EXPECT_EQ(measured, (std::vector<int64_t>{8}));
  EXPECT_EQ(curve["points"].size(), 1u);
  // A generous budget measures every token count.
  sweep.seconds_per_point = 1e9;
  measured.clear();
  run_cpu_sweep(
      sweep, {}, [&](const CpuExpertTiming& t) { measured.push_back(t.tokens); },
      [](const std::string&, const nlohmann::json&) {});
  EXPECT_EQ(measured, (std::vector<int64_t>{8, 64, 512}));
}

}  // namespace moe::calibrate
