// The GPU LayerDevice: BF16 matrices from a stream-ordered memory pool of their own (so the
// pool's high-water mark is the layer's peak, weights excluded by the reset), cuBLAS GEMMs
// accumulating in FP32, the gathers and the activation of layer_kernels.cu, all on one stream,
// each operator bracketed by CUDA events.
#include <cuda_bf16.h>

#include <memory>
#include <utility>

#include "calibrate/cuda_gemm.h"
#include "calibrate/cuda_util.h"
#include "calibrate/layer_device.h"
#include "calibrate/layer_kernels.h"

namespace moe::calibrate {

namespace {

// What outlives the device object: buffers free themselves on its stream into its pool.
struct GpuState {
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr;
  ~GpuState() {
    if (stream) cudaStreamSynchronize(stream);
    if (pool) cudaMemPoolDestroy(pool);
    if (stream) cudaStreamDestroy(stream);
  }
};

class GpuLayerDevice final : public LayerDevice {
 public:
  explicit GpuLayerDevice(int device) : prop_(cuda::use_device(device)) {
    MOE_CUDA(cudaStreamCreateWithFlags(&state_->stream, cudaStreamNonBlocking));
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    MOE_CUDA(cudaMemPoolCreate(&state_->pool, &props));
    // Keep freed memory in the pool: repeats then time the layer, not cudaMalloc.
    uint64_t keep = UINT64_MAX;
    MOE_CUDA(cudaMemPoolSetAttribute(state_->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    blas_ = std::make_unique<cuda::Blas>(state_->stream);
  }
  GpuLayerDevice(const GpuLayerDevice&) = delete;
  GpuLayerDevice& operator=(const GpuLayerDevice&) = delete;

  const char* name() const override { return prop_.name; }

  DeviceMatrix alloc(int64_t rows, int64_t cols) override {
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * 2;
    MOE_CUDA(cudaMallocFromPoolAsync(&p, bytes, state_->pool, state_->stream));
    auto state = state_;
    return {rows, cols, std::shared_ptr<void>(p, [state](void* q) {
              cudaFreeAsync(q, state->stream);  // nothing to do about an error here
            })};
  }
  DeviceMatrix upload(const std::vector<float>& host, int64_t rows, int64_t cols) override {
    std::vector<__nv_bfloat16> b(host.size());
    for (size_t i = 0; i < host.size(); ++i) b[i] = __float2bfloat16(host[i]);
    DeviceMatrix m = alloc(rows, cols);
    MOE_CUDA(cudaMemcpyAsync(m.data.get(), b.data(), b.size() * 2, cudaMemcpyHostToDevice,
                             state_->stream));
    MOE_CUDA(cudaStreamSynchronize(state_->stream));
    return m;
  }
  std::vector<float> download(const DeviceMatrix& m) override {
    std::vector<__nv_bfloat16> b(static_cast<size_t>(m.rows * m.cols));
    MOE_CUDA(cudaMemcpyAsync(b.data(), m.data.get(), b.size() * 2, cudaMemcpyDeviceToHost,
                             state_->stream));
    MOE_CUDA(cudaStreamSynchronize(state_->stream));
    std::vector<float> out(b.size());
    for (size_t i = 0; i < b.size(); ++i) out[i] = __bfloat162float(b[i]);
    return out;
  }
  std::shared_ptr<void> upload_indices(const std::vector<int32_t>& v) override {
    return upload_plain(v.data(), v.size() * sizeof(int32_t));
  }
  std::shared_ptr<void> upload_weights(const std::vector<float>& v) override {
    return upload_plain(v.data(), v.size() * sizeof(float));
  }

  void gemm(RowSlice a, bool ta, RowSlice b, bool tb, RowSlice c, bool accumulate) override {
    cuda::gemm_bf16(blas_->get(), {at(a), a.count, a.m->cols}, ta, {at(b), b.count, b.m->cols}, tb,
                    at(c), c.m->cols, accumulate);
  }
  void gather_rows(RowSlice src, const void* index, const void* weight, RowSlice dst) override {
    MOE_CUDA(kernels::gather_rows(at(src), static_cast<const int32_t*>(index),
                                  static_cast<const float*>(weight), at(dst), dst.count,
                                  dst.m->cols, state_->stream));
  }
  void gather_sum_rows(RowSlice src, const void* index, const void* weight, int64_t k,
                       RowSlice dst) override {
    MOE_CUDA(kernels::gather_sum_rows(at(src), static_cast<const int32_t*>(index),
                                      static_cast<const float*>(weight), k, at(dst), dst.count,
                                      dst.m->cols, state_->stream));
  }
  void activation(RowSlice h, RowSlice a, bool gated) override {
    MOE_CUDA(kernels::activation(at(h), at(a), a.count, a.m->cols, gated, state_->stream));
  }
  void activation_backward(RowSlice h, RowSlice da, RowSlice dh, bool gated) override {
    MOE_CUDA(kernels::activation_backward(at(h), at(da), at(dh), da.count, da.m->cols, gated,
                                          state_->stream));
  }
  void zero(const DeviceMatrix& m) override {
    MOE_CUDA(
        cudaMemsetAsync(m.data.get(), 0, static_cast<size_t>(m.rows * m.cols) * 2, state_->stream));
  }

  void timed(int slot, const std::function<void()>& work) override {
    Mark mark{slot, std::make_unique<cuda::Event>(), std::make_unique<cuda::Event>()};
    MOE_CUDA(cudaEventRecord(mark.start->get(), state_->stream));
    work();
    MOE_CUDA(cudaEventRecord(mark.stop->get(), state_->stream));
    marks_.push_back(std::move(mark));
  }
  std::vector<double> collect_times(int slots) override {
    MOE_CUDA(cudaStreamSynchronize(state_->stream));
    MOE_CUDA(cudaGetLastError());
    std::vector<double> s(static_cast<size_t>(slots), 0.0);
    for (const Mark& mk : marks_) {
      float ms = 0;
      MOE_CUDA(cudaEventElapsedTime(&ms, mk.start->get(), mk.stop->get()));
      if (mk.slot < slots) s[static_cast<size_t>(mk.slot)] += ms * 1e-3;
    }
    marks_.clear();
    return s;
  }

  void reset_peak() override {
    MOE_CUDA(cudaStreamSynchronize(state_->stream));
    uint64_t zero = 0;
    MOE_CUDA(cudaMemPoolSetAttribute(state_->pool, cudaMemPoolAttrUsedMemHigh, &zero));
    MOE_CUDA(cudaMemPoolGetAttribute(state_->pool, cudaMemPoolAttrUsedMemCurrent, &base_));
  }
  double peak_bytes() override {
    MOE_CUDA(cudaStreamSynchronize(state_->stream));
    uint64_t high = 0;
    MOE_CUDA(cudaMemPoolGetAttribute(state_->pool, cudaMemPoolAttrUsedMemHigh, &high));
    return static_cast<double>(high) - static_cast<double>(base_);
  }

 private:
  struct Mark {
    int slot;
    std::unique_ptr<cuda::Event> start, stop;
  };
  static void* at(RowSlice s) {
    return static_cast<unsigned char*>(s.m->data.get()) + s.first * s.m->cols * 2;
  }
  static std::shared_ptr<void> upload_plain(const void* host, size_t bytes) {
    auto buffer = std::make_shared<cuda::DeviceBuffer>(std::max<size_t>(bytes, 1));
    MOE_CUDA(cudaMemcpy(buffer->get(), host, bytes, cudaMemcpyHostToDevice));
    return std::shared_ptr<void>(buffer, buffer->get());  // owns the buffer, points at its bytes
  }

  cudaDeviceProp prop_;
  std::shared_ptr<GpuState> state_ = std::make_shared<GpuState>();
  std::unique_ptr<cuda::Blas> blas_;
  std::vector<Mark> marks_;
  uint64_t base_ = 0;
};

}  // namespace

std::unique_ptr<LayerDevice> make_gpu_layer_device(int device) {
  return std::make_unique<GpuLayerDevice>(device);
}

}  // namespace moe::calibrate
