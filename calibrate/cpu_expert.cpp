#include "calibrate/cpu_expert.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "calibrate/median.h"

namespace moe::calibrate {

namespace {

float silu(float a) {
  return a / (1.0f + std::exp(-a));
}
float silu_grad(float a) {
  const float s = 1.0f / (1.0f + std::exp(-a));
  return s * (1.0f + a * (1.0f - s));
}

// Runs body(first_row, rows) over `threads` contiguous blocks of `total` rows.
template <typename Body>
void split_rows(int64_t total, int threads, Body body) {
  threads = static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(total, 1)));
  if (threads == 1) {
    body(0, total, 0);
    return;
  }
  std::vector<std::thread> pool;
  const int64_t per = (total + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const int64_t first = t * per;
    const int64_t rows = std::min(per, total - first);
    if (rows <= 0) break;
    pool.emplace_back([&body, first, rows, t] { body(first, rows, t); });
  }
  for (std::thread& th : pool) th.join();
}

// The hidden activation of rows [first, first + rows): H = act(X W1) (* X W3 when gated).
void hidden_of(const ExpertShape& s, const ExpertWeights& w, const Eigen::MatrixXf& x,
               int64_t first, int64_t rows, Eigen::MatrixXf& a, Eigen::MatrixXf& b,
               Eigen::MatrixXf& h) {
  a.noalias() = x.middleRows(first, rows) * w.w1;
  if (s.gated) {
    b.noalias() = x.middleRows(first, rows) * w.w3;
    h = a.unaryExpr([](float v) { return silu(v); }).cwiseProduct(b);
  } else {
    h = a.cwiseMax(0.0f);
  }
}

}  // namespace

double ExpertShape::forward_flops(int64_t tokens) const {
  return 2.0 * static_cast<double>(tokens) * static_cast<double>(hidden) *
         static_cast<double>(ffn) * (gated ? 3.0 : 2.0);
}

ExpertWeights random_expert(const ExpertShape& s, uint32_t seed) {
  std::srand(seed);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  ExpertWeights w;
  w.w1 = Eigen::MatrixXf::Random(s.hidden, s.ffn) * scale;
  if (s.gated) w.w3 = Eigen::MatrixXf::Random(s.hidden, s.ffn) * scale;
  w.w2 = Eigen::MatrixXf::Random(s.ffn, s.hidden) * scale;
  return w;
}

Eigen::MatrixXf random_tokens(int64_t tokens, int64_t hidden, uint32_t seed) {
  std::srand(seed);
  return Eigen::MatrixXf::Random(tokens, hidden);
}

Eigen::MatrixXf expert_forward(const ExpertShape& s, const ExpertWeights& w,
                               const Eigen::MatrixXf& x, int threads) {
  Eigen::MatrixXf y(x.rows(), s.hidden);
  split_rows(x.rows(), threads, [&](int64_t first, int64_t rows, int) {
    Eigen::MatrixXf a, b, h;
    hidden_of(s, w, x, first, rows, a, b, h);
    y.middleRows(first, rows).noalias() = h * w.w2;
  });
  return y;
}

void expert_backward(const ExpertShape& s, const ExpertWeights& w, const Eigen::MatrixXf& x,
                     const Eigen::MatrixXf& dy, int threads, ExpertGrads& g,
                     BackwardWorkspace& workspace) {
  const int used =
      static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(x.rows(), 1)));
  std::vector<ExpertGrads>& part = workspace.parts;
  if (part.size() < static_cast<size_t>(used)) part.resize(static_cast<size_t>(used));
  for (ExpertGrads& p : part) p.dw1.resize(0, 0);  // marks a block this call did not run
  g.dx.resize(x.rows(), s.hidden);
  split_rows(x.rows(), used, [&](int64_t first, int64_t rows, int t) {
    ExpertGrads& p = part[static_cast<size_t>(t)];
    p.dw1.resize(s.hidden, s.ffn);
    Eigen::MatrixXf a, b, h;
    hidden_of(s, w, x, first, rows, a, b, h);  // recomputed, as a CPU expert keeps no activation
    const auto xs = x.middleRows(first, rows);
    const auto dys = dy.middleRows(first, rows);
    p.dw2.noalias() = h.transpose() * dys;
    const Eigen::MatrixXf dh = dys * w.w2.transpose();
    Eigen::MatrixXf da;
    if (s.gated) {
      da = dh.cwiseProduct(b).cwiseProduct(a.unaryExpr([](float v) { return silu_grad(v); }));
      const Eigen::MatrixXf db = dh.cwiseProduct(a.unaryExpr([](float v) { return silu(v); }));
      p.dw3.noalias() = xs.transpose() * db;
      g.dx.middleRows(first, rows).noalias() = db * w.w3.transpose();
    } else {
      da = dh.cwiseProduct((a.array() > 0.0f).cast<float>().matrix());
      g.dx.middleRows(first, rows).setZero();
    }
    p.dw1.noalias() = xs.transpose() * da;
    g.dx.middleRows(first, rows).noalias() += da * w.w1.transpose();
  });
  g.dw1 = part[0].dw1;
  g.dw2 = part[0].dw2;
  if (s.gated) g.dw3 = part[0].dw3;
  for (size_t t = 1; t < part.size(); ++t) {
    if (part[t].dw1.size() == 0) continue;
    g.dw1 += part[t].dw1;
    g.dw2 += part[t].dw2;
    if (s.gated) g.dw3 += part[t].dw3;
  }
}

CpuExpertTiming time_cpu_expert(const ExpertShape& s, int64_t tokens, int threads, int repeats) {
  if (tokens < 1 || threads < 1 || repeats < 1)
    throw std::invalid_argument("CPU expert timing needs tokens, threads and repeats >= 1");
  const ExpertWeights w = random_expert(s, 1);
  const Eigen::MatrixXf x = random_tokens(tokens, s.hidden, 2);
  const Eigen::MatrixXf dy = random_tokens(tokens, s.hidden, 3);
  using Clock = std::chrono::steady_clock;
  CpuExpertTiming out;
  out.tokens = tokens;
  out.threads = threads;
  out.forward_flops = s.forward_flops(tokens);
  out.backward_flops = 2.0 * out.forward_flops;
  ExpertGrads g;
  BackwardWorkspace workspace;
  Eigen::MatrixXf y = expert_forward(s, w, x, threads);  // warm-up
  expert_backward(s, w, x, dy, threads, g, workspace);
  std::vector<double> fwd, bwd;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    y = expert_forward(s, w, x, threads);
    const auto t1 = Clock::now();
    expert_backward(s, w, x, dy, threads, g, workspace);
    const auto t2 = Clock::now();
    if (!g.dw1.allFinite())
      throw std::runtime_error("CPU expert backward produced non-finite values");
    fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
    bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
  }
  out.forward_s = median(fwd);
  out.backward_s = median(bwd);
  // Reference: a float64 product on up to 4 sampled rows.
  const Eigen::MatrixXd w1 = w.w1.cast<double>(), w2 = w.w2.cast<double>();
  const Eigen::MatrixXd w3 = s.gated ? w.w3.cast<double>() : Eigen::MatrixXd();
  for (int64_t k = 0; k < std::min<int64_t>(tokens, 4); ++k) {
    const int64_t row = k * (tokens - 1) / std::max<int64_t>(std::min<int64_t>(tokens, 4) - 1, 1);
    const Eigen::RowVectorXd xr = x.row(row).cast<double>();
    const Eigen::RowVectorXd a = xr * w1;
    Eigen::RowVectorXd h(a.size());
    if (s.gated) {
      const Eigen::RowVectorXd b = xr * w3;
      for (Eigen::Index i = 0; i < a.size(); ++i) h(i) = a(i) / (1.0 + std::exp(-a(i))) * b(i);
    } else {
      h = a.cwiseMax(0.0);
    }
    const Eigen::RowVectorXd ref = h * w2;
    const double err = (y.row(row).cast<double>() - ref).norm() / std::max(ref.norm(), 1e-30);
    out.max_relative_error = std::max(out.max_relative_error, err);
  }
  return out;
}

}  // namespace moe::calibrate
