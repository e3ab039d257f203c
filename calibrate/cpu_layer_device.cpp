// The CPU reference LayerDevice: FP32 matrices multiplied by Eigen, each operator timed by the
// clock. Its peak counts two bytes per element, what the GPU's BF16 matrices hold, so a test
// can check the runner's memory behaviour (and `execute` its GPU run) against it.
#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "calibrate/layer_device.h"

namespace moe::calibrate {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMajor>;

constexpr double kCountedBytesPerElement = 2;  // BF16, as on the GPU

struct Ledger {
  double held = 0, base = 0, high = 0;
};

class CpuLayerDevice final : public LayerDevice {
 public:
  const char* name() const override { return "CPU (FP32, Eigen)"; }

  DeviceMatrix alloc(int64_t rows, int64_t cols) override {
    const size_t n = static_cast<size_t>(rows * cols);
    const double bytes = static_cast<double>(n) * kCountedBytesPerElement;
    ledger_->held += bytes;
    ledger_->high = std::max(ledger_->high, ledger_->held);
    auto ledger = ledger_;
    float* p = new float[std::max<size_t>(n, 1)];
    std::fill(p, p + n, std::nanf(""));  // poisoned: a read before a write shows
    return {rows, cols, std::shared_ptr<void>(p, [ledger, bytes](void* q) {
              ledger->held -= bytes;
              delete[] static_cast<float*>(q);
            })};
  }
  DeviceMatrix upload(const std::vector<float>& host, int64_t rows, int64_t cols) override {
    DeviceMatrix m = alloc(rows, cols);
    std::memcpy(m.data.get(), host.data(), host.size() * sizeof(float));
    return m;
  }
  std::vector<float> download(const DeviceMatrix& m) override {
    const float* p = static_cast<const float*>(m.data.get());
    return {p, p + m.rows * m.cols};
  }
  std::shared_ptr<void> upload_indices(const std::vector<int32_t>& v) override {
    return std::make_shared<std::vector<int32_t>>(v);
  }
  std::shared_ptr<void> upload_weights(const std::vector<float>& v) override {
    return std::make_shared<std::vector<float>>(v);
  }

  void gemm(RowSlice a, bool ta, RowSlice b, bool tb, RowSlice c, bool accumulate) override {
    const Map ma = map(a), mb = map(b);
    Map mc = map(c);
    auto product = [&](const auto& x, const auto& y) {
      if (accumulate)
        mc.noalias() += x * y;
      else
        mc.noalias() = x * y;
    };
    if (ta && tb)
      product(ma.transpose(), mb.transpose());
    else if (ta)
      product(ma.transpose(), mb);
    else if (tb)
      product(ma, mb.transpose());
    else
      product(ma, mb);
  }
  void gather_rows(RowSlice src, const void* index, const void* weight, RowSlice dst) override {
    const Map s = map(src);
    Map out = map(dst);
    const int32_t* ix = indices(index);
    const float* w = weights(weight);
    for (int64_t r = 0; r < dst.count; ++r) out.row(r) = s.row(ix[r]) * (w ? w[r] : 1.0f);
  }
  void gather_sum_rows(RowSlice src, const void* index, const void* weight, int64_t k,
                       RowSlice dst) override {
    const Map s = map(src);
    Map out = map(dst);
    const int32_t* ix = indices(index);
    const float* w = weights(weight);
    for (int64_t t = 0; t < dst.count; ++t) {
      out.row(t).setZero();
      for (int64_t j = 0; j < k; ++j)
        out.row(t) += s.row(ix[t * k + j]) * (w ? w[t * k + j] : 1.0f);
    }
  }
  void activation(RowSlice h, RowSlice a, bool gated) override {
    const Map x = map(h);
    Map y = map(a);
    const int64_t g = y.cols();
    for (int64_t r = 0; r < y.rows(); ++r) {
      for (int64_t j = 0; j < g; ++j) {
        const float u = x(r, j);
        y(r, j) = gated ? u / (1.0f + std::exp(-u)) * x(r, g + j) : std::max(u, 0.0f);
      }
    }
  }
  void activation_backward(RowSlice h, RowSlice da, RowSlice dh, bool gated) override {
    const Map x = map(h), dy = map(da);
    Map dx = map(dh);
    const int64_t g = dy.cols();
    for (int64_t r = 0; r < dy.rows(); ++r) {
      for (int64_t j = 0; j < g; ++j) {
        const float u = x(r, j);
        if (!gated) {
          dx(r, j) = u > 0 ? dy(r, j) : 0.0f;
          continue;
        }
        const float sig = 1.0f / (1.0f + std::exp(-u));
        const float silu = u * sig;
        dx(r, j) = dy(r, j) * x(r, g + j) * (sig + silu * (1.0f - sig));
        dx(r, g + j) = dy(r, j) * silu;
      }
    }
  }
  void zero(const DeviceMatrix& m) override {
    float* p = static_cast<float*>(m.data.get());
    std::fill(p, p + m.rows * m.cols, 0.0f);
  }

  void timed(int slot, const std::function<void()>& work) override {
    const auto start = std::chrono::steady_clock::now();
    work();
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    if (static_cast<size_t>(slot) >= seconds_.size())
      seconds_.resize(static_cast<size_t>(slot) + 1);
    seconds_[static_cast<size_t>(slot)] += s.count();
  }
  std::vector<double> collect_times(int slots) override {
    seconds_.resize(static_cast<size_t>(slots));
    std::vector<double> out(static_cast<size_t>(slots), 0.0);
    std::swap(out, seconds_);
    return out;
  }

  void reset_peak() override { ledger_->base = ledger_->high = ledger_->held; }
  double peak_bytes() override { return ledger_->high - ledger_->base; }

 private:
  static Map map(RowSlice s) {
    float* base = static_cast<float*>(s.m->data.get());
    return Map(base + s.first * s.m->cols, s.count, s.m->cols);
  }
  static const int32_t* indices(const void* p) {
    return static_cast<const std::vector<int32_t>*>(p)->data();
  }
  static const float* weights(const void* p) {
    return p ? static_cast<const std::vector<float>*>(p)->data() : nullptr;
  }

  std::shared_ptr<Ledger> ledger_ = std::make_shared<Ledger>();
  std::vector<double> seconds_;
};

}  // namespace

std::unique_ptr<LayerDevice> make_cpu_layer_device() {
  return std::make_unique<CpuLayerDevice>();
}

}  // namespace moe::calibrate
