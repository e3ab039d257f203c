// What the CUDA microbenchmarks share: checked calls, owning buffers, event timing, the device.
// Included by the *_cuda.cpp files only (CMake builds them where the toolkit is found).
#pragma once

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

#include "calibrate/gpu_bench.h"
#include "calibrate/median.h"

namespace moe::calibrate::cuda {

inline void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw GpuError(fmt::format("{}: {}", call, cudaGetErrorString(e)));
}
#define MOE_CUDA(call) ::moe::calibrate::cuda::check((call), #call)

// Selects the device and returns its properties; no device is a NoGpuError.
inline cudaDeviceProp use_device(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    throw NoGpuError(fmt::format(
        "no GPU: {}", e == cudaSuccess ? "no CUDA device is visible" : cudaGetErrorString(e)));
  }
  if (device < 0 || device >= count)
    throw GpuError(fmt::format("device {} does not exist ({} visible)", device, count));
  MOE_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  MOE_CUDA(cudaGetDeviceProperties(&prop, device));
  return prop;
}

// Device memory, freed on scope exit (errors there are ignored: nothing to do about them).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) { MOE_CUDA(cudaMalloc(&p_, bytes)); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (what DMA engines copy at full PCIe speed).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) { MOE_CUDA(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault)); }
  ~PinnedBuffer() { cudaFreeHost(p_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(p_); }

 private:
  void* p_ = nullptr;
};

class Stream {
 public:
  Stream() { MOE_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() { MOE_CUDA(cudaEventCreate(&e_)); }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Runs `work(r)` (which enqueues on `stream`) warmup + repeats times and returns the median of
// the timed repeats, each bracketed by events.
template <class Work>
double median_seconds(cudaStream_t stream, const BenchOptions& o, Work&& work) {
  for (int r = 0; r < o.warmup; ++r) work(r);
  int extra = 0;  // work calls the sustained run made (it keeps the rotation turning)
  if (o.sustain_seconds > 0) {
    const auto begin = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() <
           o.sustain_seconds) {
      for (int i = 0; i < 16; ++i) work(o.warmup + extra++);
      MOE_CUDA(cudaStreamSynchronize(stream));
    }
  }
  const int n = std::max(o.repeats, 1);
  std::vector<Event> start(static_cast<size_t>(n)), stop(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    MOE_CUDA(cudaEventRecord(start[static_cast<size_t>(r)].get(), stream));
    work(o.warmup + extra + r);
    MOE_CUDA(cudaEventRecord(stop[static_cast<size_t>(r)].get(), stream));
  }
  MOE_CUDA(cudaStreamSynchronize(stream));
  MOE_CUDA(cudaGetLastError());
  std::vector<double> s(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    float ms = 0;
    MOE_CUDA(cudaEventElapsedTime(&ms, start[static_cast<size_t>(r)].get(),
                                  stop[static_cast<size_t>(r)].get()));
    s[static_cast<size_t>(r)] = ms * 1e-3;
  }
  return median(std::move(s));
}

// How many copies of a working set of `bytes` to rotate among so that repeats do not run from
// L2: enough to span twice the cache, at most 8.
inline size_t rotation(size_t bytes, const cudaDeviceProp& prop) {
  const size_t l2 = static_cast<size_t>(std::max(prop.l2CacheSize, 1));
  return std::clamp<size_t>((2 * l2 + bytes - 1) / std::max<size_t>(bytes, 1), 1, 8);
}

}  // namespace moe::calibrate::cuda
