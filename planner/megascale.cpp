#include "planner/megascale.h"

namespace moe::megascale {

namespace {
double frac(int64_t n) {
  return static_cast<double>(n - 1) / static_cast<double>(n);
}
double bsh(int64_t b, int64_t s, int64_t h) {
  return static_cast<double>(b) * static_cast<double>(s) * static_cast<double>(h);
}
}  // namespace

double tp_attention_volume(int64_t b, int64_t s, int64_t h, int64_t n) {
  return 2.0 * bsh(b, s, h) * frac(n);
}

double sp_attention_volume(int64_t b, int64_t s, int64_t h, int64_t n, double m) {
  return tp_attention_volume(b, s, h, n) * (2.0 + 2.0 / m) / static_cast<double>(n);
}

double ep_ffn_volume(int64_t b, int64_t s, int64_t h, int64_t n, int64_t top_k) {
  return 2.0 * static_cast<double>(top_k) / static_cast<double>(n) * bsh(b, s, h) * frac(n);
}

double tp_ffn_volume(int64_t b, int64_t s, int64_t h, int64_t n) {
  return 2.0 * bsh(b, s, h) * frac(n);
}

const char* dispatcher_name(Dispatcher d) {
  switch (d) {
    case Dispatcher::kAllGather:
      return "allgather";
    case Dispatcher::kDeepEp:
      return "deepep";
    case Dispatcher::kAllToAll:
      break;
  }
  return "alltoall";
}

bool dispatcher_priced(Dispatcher d, int64_t ep, int64_t etp) {
  switch (d) {
    case Dispatcher::kAllToAll:
      return true;
    case Dispatcher::kAllGather:
      return ep == 1 || etp == 1;
    case Dispatcher::kDeepEp:
      return etp == 1;
  }
  return false;
}

const char* dispatcher_priced_where(Dispatcher d) {
  switch (d) {
    case Dispatcher::kAllGather:
      return "with etp = 1 or ep = 1";
    case Dispatcher::kDeepEp:
      return "with etp = 1";
    case Dispatcher::kAllToAll:
      break;
  }
  return "everywhere";
}

Dispatcher choose_dispatcher(int64_t top_k, int64_t n, double a2a_over_ag_efficiency) {
  const double a2a_cost =
      static_cast<double>(top_k) / static_cast<double>(n) / a2a_over_ag_efficiency;
  return a2a_cost <= 1.0 ? Dispatcher::kAllToAll : Dispatcher::kAllGather;
}

double compute_comm_ratio_approx(const RatioInputs& in) {
  // Eq. (5)-(6) with units made explicit: comm moves 2k bsh (n-1)/n^2 elements of
  // bytes_per_element bytes; comp does 3k bsh h_ffn / n multiply-adds of 2 FLOPs. The paper's
  // 3/2 h_ffn bandwidth/peak is this with BF16 (2 bytes) and bandwidth in bytes/s.
  return 3.0 * static_cast<double>(in.ffn_hidden) * in.bandwidth.value() /
         (in.bytes_per_element * in.peak.value());
}

double compute_comm_ratio(const RatioInputs& in) {
  return compute_comm_ratio_approx(in) * static_cast<double>(in.n) / static_cast<double>(in.n - 1);
}

double activation_units_full(int64_t n, int64_t top_k, double f, double m) {
  const double k = static_cast<double>(top_k);
  return 2.0 * n + 2.0 * k + 3.0 * k * f + 12.0 + 5.0 / m;
}

double activation_units_remat(int64_t top_k, double f, double m) {
  return 2.0 * static_cast<double>(top_k) * f + 4.0 + 2.0 / m;
}

Bytes activation_bytes(double units, int64_t b, int64_t s, int64_t h, int64_t n,
                       double bytes_per_element) {
  return Bytes(units * bsh(b, s, h) / static_cast<double>(n) * bytes_per_element);
}

SyncVolume tp_attention_sync(double params, int64_t n, int64_t d) {
  return {2.0 * params / static_cast<double>(n) * frac(d), 0.0};
}

SyncVolume sp_attention_sync(double params, int64_t n, int64_t d) {
  SyncVolume v = tp_attention_sync(params, n, d);
  v.intra_node = 2.0 * params * frac(n);
  return v;
}

double hierarchical_sync_latency_ratio(int64_t n, int64_t d, double intra_over_inter) {
  const double nn = static_cast<double>(n);
  const double dd = static_cast<double>(d);
  return 1.0 / nn * intra_over_inter * nn * (dd - 1.0) / (dd * (nn - 1.0));
}

Bytes dp_gradient_bytes(double params, int64_t d, bool bf16_compression) {
  return Bytes(params * (bf16_compression ? 2.0 : 4.0) * frac(d));
}

Bytes tp_reduce_scatter_bytes(double elements, int64_t n, bool fp8) {
  return Bytes(elements * (fp8 ? 1.0 : 2.0) * frac(n));
}

}  // namespace moe::megascale
