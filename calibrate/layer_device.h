// What running one MoE layer needs from a device: row-major matrices in its memory, a GEMM, the
// row gathers of dispatch and combine, the FFN activation, and timing and peak-memory counters.
// Two devices implement it: the GPU (BF16 storage, cuBLAS GEMMs accumulating in FP32, a
// stream-ordered memory pool whose high-water mark is the peak) and the CPU reference (FP32 with
// Eigen; its peak counts the same BF16 bytes the GPU would hold, so the two peaks compare).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace moe::calibrate {

class LayerDevice;

// A matrix in device memory, freed when the last owner goes. Activations allocated after
// reset_peak() count toward the peak; weights allocated before do not.
struct DeviceMatrix {
  int64_t rows = 0, cols = 0;
  std::shared_ptr<void> data;
};

// Rows [first, first + count) of a matrix: contiguous in row-major storage.
struct RowSlice {
  const DeviceMatrix* m = nullptr;
  int64_t first = 0, count = 0;
};
inline RowSlice rows_of(const DeviceMatrix& m, int64_t first, int64_t count) {
  return {&m, first, count};
}
inline RowSlice all_rows(const DeviceMatrix& m) {
  return {&m, 0, m.rows};
}

class LayerDevice {
 public:
  virtual ~LayerDevice() = default;
  virtual const char* name() const = 0;

  virtual DeviceMatrix alloc(int64_t rows, int64_t cols) = 0;
  virtual DeviceMatrix upload(const std::vector<float>& host, int64_t rows, int64_t cols) = 0;
  virtual std::vector<float> download(const DeviceMatrix& m) = 0;
  // Index and weight arrays for gathers, uploaded once per routing (not timed).
  virtual std::shared_ptr<void> upload_indices(const std::vector<int32_t>& v) = 0;
  virtual std::shared_ptr<void> upload_weights(const std::vector<float>& v) = 0;

  // C = op(A) op(B) (+ C when accumulate); op transposes when asked. Shapes are the slices'.
  virtual void gemm(RowSlice a, bool transpose_a, RowSlice b, bool transpose_b, RowSlice c,
                    bool accumulate) = 0;
  // dst row r = src row index[r] (x weight[r] when weights are given): dispatch, and combine's
  // backward.
  virtual void gather_rows(RowSlice src, const void* index, const void* weight, RowSlice dst) = 0;
  // dst row t = sum_j weight[t k + j] x src row index[t k + j] (weights null: 1): combine, and
  // dispatch's backward.
  virtual void gather_sum_rows(RowSlice src, const void* index, const void* weight, int64_t k,
                               RowSlice dst) = 0;
  // Gated: a = silu(h[:, :g]) * h[:, g:] with h [n x 2g]; plain: a = relu(h).
  virtual void activation(RowSlice h, RowSlice a, bool gated) = 0;
  // dh from h and da, the activation's backward.
  virtual void activation_backward(RowSlice h, RowSlice da, RowSlice dh, bool gated) = 0;
  virtual void zero(const DeviceMatrix& m) = 0;

  // Runs `work` and adds its time to `slot` (resolved by collect_times). The GPU brackets the
  // enqueued work with events; the CPU reads a clock.
  virtual void timed(int slot, const std::function<void()>& work) = 0;
  // Waits for the device and returns each slot's seconds since the last call.
  virtual std::vector<double> collect_times(int slots) = 0;

  virtual void reset_peak() = 0;
  virtual double peak_bytes() = 0;  // activation bytes held at once since reset_peak()
};

// The CPU reference (always built).
std::unique_ptr<LayerDevice> make_cpu_layer_device();
// The GPU `device`; throws NoGpuError without one (or in a build without CUDA).
std::unique_ptr<LayerDevice> make_gpu_layer_device(int device);

}  // namespace moe::calibrate
