// The GPU side of calibrate/affinity_run.h.
#include <cuda_bf16.h>

#include <chrono>
#include <thread>

#include "calibrate/affinity_run.h"
#include "calibrate/cpu_expert.h"
#include "calibrate/cuda_gemm.h"
#include "calibrate/cuda_util.h"
#include "calibrate/layer_kernels.h"
#include "calibrate/median.h"
#include "calibrate/moe_layer_run.h"

namespace moe::calibrate {

namespace {

using Clock = std::chrono::steady_clock;

// `count` BF16 values of standard deviation `scale` (random_values): computed on, never zeros.
void fill_bf16(unsigned char* out, size_t count, float scale, uint64_t stream) {
  auto* p = reinterpret_cast<__nv_bfloat16*>(out);
  const std::vector<float> v = random_values(static_cast<int64_t>(count), scale, 1, stream);
  for (size_t i = 0; i < count; ++i) p[i] = __float2bfloat16(v[i]);
}

struct GpuSide {
  int64_t h, g, up;
  size_t weight_bytes;  // one expert: [h x up] then [g x h]
  cuda::Stream copy, compute;
  cuda::PinnedBuffer host;  // one expert's weights; every load copies these bytes
  cuda::DeviceBuffer slots, input, hidden, act, out;
  cuda::Event loaded[2], freed[2];
  cuda::Blas blas{compute.get()};

  GpuSide(const AffinityCase& c, int64_t max_tokens)
      : h(c.hidden),
        g(c.ffn),
        up(c.gated ? 2 * c.ffn : c.ffn),
        weight_bytes(static_cast<size_t>(h * up + g * h) * 2),
        host(weight_bytes),
        slots(2 * weight_bytes),
        input(static_cast<size_t>(std::max<int64_t>(max_tokens, 1) * h) * 2),
        hidden(static_cast<size_t>(std::max<int64_t>(max_tokens, 1) * up) * 2),
        act(static_cast<size_t>(std::max<int64_t>(max_tokens, 1) * g) * 2),
        out(static_cast<size_t>(std::max<int64_t>(max_tokens, 1) * h) * 2) {
    fill_bf16(host.get(), weight_bytes / 2, 0.02f, 1);
    std::vector<unsigned char> x(input.bytes());
    fill_bf16(x.data(), x.size() / 2, 1.0f, 2);
    MOE_CUDA(cudaMemcpy(input.get(), x.data(), x.size(), cudaMemcpyHostToDevice));
  }

  // Loads and runs `experts` through the two slots; returns when the GPU is done.
  void run(const std::vector<const AffinityExpert*>& experts, bool gated) {
    for (size_t i = 0; i < experts.size(); ++i) {
      const size_t s = i % 2;
      unsigned char* w = static_cast<unsigned char*>(slots.get()) + s * weight_bytes;
      if (i >= 2) MOE_CUDA(cudaStreamWaitEvent(copy.get(), freed[s].get(), 0));
      MOE_CUDA(cudaMemcpyAsync(w, host.get(), weight_bytes, cudaMemcpyHostToDevice, copy.get()));
      MOE_CUDA(cudaEventRecord(loaded[s].get(), copy.get()));
      MOE_CUDA(cudaStreamWaitEvent(compute.get(), loaded[s].get(), 0));
      const int64_t n = experts[i]->tokens;
      cuda::gemm_bf16(blas.get(), {input.get(), n, h}, false, {w, h, up}, false, hidden.get(), up,
                      false);
      MOE_CUDA(kernels::activation(hidden.get(), act.get(), n, g, gated, compute.get()));
      cuda::gemm_bf16(blas.get(), {act.get(), n, g}, false,
                      {w + static_cast<size_t>(h * up) * 2, g, h}, false, out.get(), h, false);
      MOE_CUDA(cudaEventRecord(freed[s].get(), compute.get()));
    }
    MOE_CUDA(cudaStreamSynchronize(copy.get()));
    MOE_CUDA(cudaStreamSynchronize(compute.get()));
    MOE_CUDA(cudaGetLastError());
  }
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

AffinityTimes run_affinity(const AffinityCase& c, int device, int threads, int repeats) {
  cuda::use_device(device);
  int64_t max_tokens = 0;
  std::vector<const AffinityExpert*> all, on_gpu, on_cpu;
  for (const AffinityExpert& e : c.experts) {
    max_tokens = std::max(max_tokens, e.tokens);
    all.push_back(&e);
    (e.on_gpu ? on_gpu : on_cpu).push_back(&e);
  }
  GpuSide gpu(c, max_tokens);
  const ExpertShape shape{c.hidden, c.ffn, c.gated};
  const ExpertWeights weights = random_expert(shape, 3);
  std::vector<Eigen::MatrixXf> inputs;
  for (const AffinityExpert* e : on_cpu) inputs.push_back(random_tokens(e->tokens, c.hidden, 4));

  std::vector<double> load_all, split, split_gpu, split_cpu;
  for (int r = 0; r < 1 + std::max(repeats, 1); ++r) {
    Clock::time_point t0 = Clock::now();
    gpu.run(all, c.gated);
    const double all_s = seconds_since(t0);

    t0 = Clock::now();
    double cpu_s = 0;
    std::thread cpu([&] {
      for (const Eigen::MatrixXf& x : inputs) expert_forward(shape, weights, x, threads);
      cpu_s = seconds_since(t0);
    });
    gpu.run(on_gpu, c.gated);
    const double gpu_s = seconds_since(t0);
    cpu.join();
    if (r == 0) continue;  // the warm-up
    load_all.push_back(all_s);
    split_gpu.push_back(gpu_s);
    split_cpu.push_back(cpu_s);
    split.push_back(std::max(gpu_s, cpu_s));
  }
  return {median(load_all), median(split), median(split_gpu), median(split_cpu)};
}

}  // namespace moe::calibrate
