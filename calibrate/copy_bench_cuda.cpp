// Copies timed with CUDA events (calibrate/gpu_bench.h): device to device, and pinned host to
// device, device to host, or both at once on two streams (PCIe is full duplex; APTMoE loads
// weights one way while gradients go the other).
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "calibrate/cuda_util.h"

namespace moe::calibrate {

namespace {

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    const uint32_t r = rng();
    std::memcpy(&v[i], &r, std::min<size_t>(4, n - i));
  }
  return v;
}

// The first and last 4 KiB of `got` (device or host) must equal `want`.
void check_ends(const void* got, bool on_device, const unsigned char* want, size_t n,
                const char* what) {
  const size_t edge = std::min<size_t>(4096, n);
  std::vector<unsigned char> head(edge), tail(edge);
  const auto* p = static_cast<const unsigned char*>(got);
  if (on_device) {
    MOE_CUDA(cudaMemcpy(head.data(), p, edge, cudaMemcpyDeviceToHost));
    MOE_CUDA(cudaMemcpy(tail.data(), p + n - edge, edge, cudaMemcpyDeviceToHost));
  } else {
    std::memcpy(head.data(), p, edge);
    std::memcpy(tail.data(), p + n - edge, edge);
  }
  if (std::memcmp(head.data(), want, edge) != 0 ||
      std::memcmp(tail.data(), want + n - edge, edge) != 0)
    throw GpuError(fmt::format("{} copy of {} bytes delivered wrong bytes", what, n));
}

}  // namespace

CopyTiming time_copy(CopyKind kind, double bytes_d, const BenchOptions& o) {
  const cudaDeviceProp prop = cuda::use_device(o.device);
  if (!(bytes_d >= 1)) throw GpuError("copy size must be at least one byte");
  const size_t n = static_cast<size_t>(bytes_d);
  const std::vector<unsigned char> data = random_bytes(n, static_cast<unsigned>(n));
  CopyTiming out;
  out.kind = kind;
  out.bytes = static_cast<double>(n);
  cuda::Stream stream, other;

  if (kind == CopyKind::kDeviceToDevice) {
    // Source and destination pairs rotated so that small copies do not run from L2.
    const size_t sets = cuda::rotation(2 * n, prop);
    std::vector<std::unique_ptr<cuda::DeviceBuffer>> src, dst;
    for (size_t k = 0; k < sets; ++k) {
      src.push_back(std::make_unique<cuda::DeviceBuffer>(n));
      dst.push_back(std::make_unique<cuda::DeviceBuffer>(n));
      MOE_CUDA(cudaMemcpy(src.back()->get(), data.data(), n, cudaMemcpyHostToDevice));
      MOE_CUDA(cudaMemset(dst.back()->get(), 0, n));
    }
    out.seconds = cuda::median_seconds(stream.get(), o, [&](int r) {
      const size_t k = static_cast<size_t>(r) % sets;
      MOE_CUDA(
          cudaMemcpyAsync(dst[k]->get(), src[k]->get(), n, cudaMemcpyDeviceToDevice, stream.get()));
    });
    // Only the pairs some run used hold the copy (fewer runs than pairs leaves some untouched).
    const size_t used = std::min(sets, static_cast<size_t>(o.warmup + std::max(o.repeats, 1)));
    for (size_t k = 0; k < used; ++k) check_ends(dst[k]->get(), true, data.data(), n, "d2d");
    return out;
  }

  cuda::PinnedBuffer host_src(n), host_dst(n);
  std::memcpy(host_src.get(), data.data(), n);
  std::memset(host_dst.get(), 0, n);
  cuda::DeviceBuffer dev_dst(n), dev_src(n);
  MOE_CUDA(cudaMemcpy(dev_src.get(), data.data(), n, cudaMemcpyHostToDevice));
  cuda::Event forked, joined;
  out.seconds = cuda::median_seconds(stream.get(), o, [&](int) {
    if (kind == CopyKind::kBothDirections) {
      // Device to host on its own stream, forked from this one before the host-to-device copy
      // is queued (so the two run together) and joined back after it.
      MOE_CUDA(cudaEventRecord(forked.get(), stream.get()));
      MOE_CUDA(cudaStreamWaitEvent(other.get(), forked.get(), 0));
      MOE_CUDA(
          cudaMemcpyAsync(host_dst.get(), dev_src.get(), n, cudaMemcpyDeviceToHost, other.get()));
      MOE_CUDA(cudaEventRecord(joined.get(), other.get()));
    }
    if (kind == CopyKind::kDeviceToHost) {
      MOE_CUDA(
          cudaMemcpyAsync(host_dst.get(), dev_src.get(), n, cudaMemcpyDeviceToHost, stream.get()));
    } else {
      MOE_CUDA(
          cudaMemcpyAsync(dev_dst.get(), host_src.get(), n, cudaMemcpyHostToDevice, stream.get()));
    }
    if (kind == CopyKind::kBothDirections)
      MOE_CUDA(cudaStreamWaitEvent(stream.get(), joined.get(), 0));
  });
  if (kind != CopyKind::kDeviceToHost) check_ends(dev_dst.get(), true, data.data(), n, "h2d");
  if (kind != CopyKind::kHostToDevice) check_ends(host_dst.get(), false, data.data(), n, "d2h");
  return out;
}

}  // namespace moe::calibrate
