#include "planner/monta.h"

#include <fmt/format.h>

#include <algorithm>

namespace moe::monta {

Bytes alltoall_volume(int64_t micro_batch, int64_t seq_len, int64_t hidden,
                      double bytes_per_element) {
  return Bytes(static_cast<double>(micro_batch) * static_cast<double>(seq_len) *
               static_cast<double>(hidden) * bytes_per_element);
}

namespace {
double frac(int64_t n) {
  return static_cast<double>(n - 1) / static_cast<double>(n);
}
}  // namespace

Seconds baseline_time(const Problem& p) {
  const double r1 = p.curves.alltoall.at(p.volume);
  return p.volume * frac(p.ep) / (p.links.inter_alltoall * r1);
}

Seconds o1_time(const Problem& p) {
  const Bytes aa = p.volume / static_cast<double>(p.tp);
  const double r1 = p.curves.alltoall.at(aa);
  const double r2 = p.curves.allgather.at(p.volume);
  return aa * frac(p.ep) / (p.links.inter_alltoall * r1) +
         p.volume * frac(p.tp) / (p.links.intra_allgather * r2);
}

ChunkCosts chunk_costs(const Problem& p, int64_t chunks) {
  ChunkCosts c;
  c.allgather_bytes = p.volume / static_cast<double>(chunks);
  c.alltoall_bytes = c.allgather_bytes / static_cast<double>(p.tp);
  c.r1 = p.curves.alltoall.at(c.alltoall_bytes);
  c.r2 = p.curves.allgather.at(c.allgather_bytes);
  c.r3 = p.curves.d2d.at(c.allgather_bytes);
  c.alltoall = c.alltoall_bytes * frac(p.ep) / (p.links.inter_alltoall * c.r1);
  c.allgather = c.allgather_bytes * frac(p.tp) / (p.links.intra_allgather * c.r2);
  c.d2d = c.allgather_bytes / (p.links.d2d_copy * c.r3);
  return c;
}

Seconds o2_time(const ChunkCosts& c, int64_t n) {
  const double N = static_cast<double>(n);
  // The slower resource runs N times back to back; the faster adds one chunk at an end.
  if (c.alltoall < c.allgather + c.d2d) return c.alltoall + (c.allgather + c.d2d) * N;
  return c.alltoall * N + c.allgather + c.d2d;
}

Seconds o3_time(const ChunkCosts& c, int64_t n) {
  const double N = static_cast<double>(n);
  if (c.alltoall < c.allgather) return c.alltoall + c.allgather * N + c.d2d;
  return c.alltoall * N + c.allgather + c.d2d;
}

ChunkChoice at_chunks(const Problem& p, Pipelining kind, int64_t chunks) {
  ChunkChoice out;
  out.chunks = chunks;
  out.per_chunk = chunk_costs(p, chunks);
  out.time =
      kind == Pipelining::kO2 ? o2_time(out.per_chunk, chunks) : o3_time(out.per_chunk, chunks);
  if (chunks > 1) out.time += p.chunk_overhead * static_cast<double>(chunks);
  return out;
}

StrategyRun run_strategy(const Problem& p, Strategy s, int64_t chunks) {
  StrategyRun run;
  switch (s) {
    case Strategy::kBaseline:
      run.time = baseline_time(p);
      break;
    case Strategy::kO1:
      run.per_chunk = chunk_costs(p, 1);
      run.time = o1_time(p);
      break;
    case Strategy::kO2:
    case Strategy::kO3: {
      const ChunkChoice c =
          at_chunks(p, s == Strategy::kO2 ? Pipelining::kO2 : Pipelining::kO3, chunks);
      run.chunks = chunks;
      run.per_chunk = c.per_chunk;
      run.overhead = chunks > 1 ? p.chunk_overhead : Seconds(0);
      run.time = c.time;
      break;
    }
  }
  return run;
}

ChunkChoice best_chunking(const Problem& p, Pipelining kind) {
  ChunkChoice best = at_chunks(p, kind, 1);
  for (int64_t n = 2; n <= p.max_chunks; ++n) {
    const Bytes aa = p.volume / static_cast<double>(n * p.tp);
    const Bytes ag = p.volume / static_cast<double>(n);
    if (aa < p.min_chunk || ag < p.min_chunk) break;
    ChunkChoice c = at_chunks(p, kind, n);
    if (c.time < best.time) best = c;  // keep the best (N, T): the fix of line 19
  }
  return best;
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::kBaseline:
      return "baseline";
    case Strategy::kO1:
      return "O1";
    case Strategy::kO2:
      return "O2";
    case Strategy::kO3:
      return "O3";
  }
  return "?";
}

Strategy select_strategy(Seconds o1, Seconds o2, Seconds o3) {
  Strategy s = Strategy::kO1;
  Seconds best = o1;
  if (o2 < best) {
    s = Strategy::kO2;
    best = o2;
  }
  if (o3 < best) s = Strategy::kO3;
  return s;
}

double alltoall_to_allgather_ratio(int64_t tp, int64_t ep, double bw_ratio, double r1, double r2) {
  return static_cast<double>(ep - 1) * bw_ratio * r2 /
         (static_cast<double>(ep) * static_cast<double>(tp - 1) * r1);
}

double o3_limit_ratio(int64_t tp, int64_t ep, double bw_ratio, double r1, double r2) {
  const double allgather = frac(tp) / (bw_ratio * r2);
  const double base = frac(ep) / r1;
  return allgather / base;
}

Bytes weight_bytes(double params, int64_t model_parallel, int64_t d, Zero zero) {
  const double mp = static_cast<double>(model_parallel);
  const double dp = static_cast<double>(d);
  double per_param = 0;
  switch (zero) {
    case Zero::kNone:
      per_param = 16.0;
      break;
    case Zero::kStage1:
      per_param = 4.0 + 12.0 / dp;
      break;
    case Zero::kStage2:
      per_param = 2.0 + 14.0 / dp;
      break;
    case Zero::kStage3:
      per_param = 16.0 / dp;
      break;
  }
  return Bytes(params * per_param / mp);
}

const char* activation_config_name(ActivationConfig c) {
  switch (c) {
    case ActivationConfig::kNoParallelism:
      return "none";
    case ActivationConfig::kTpEp:
      return "pp+tp+ep";
    case ActivationConfig::kTpEpSp:
      return "pp+tp+ep+sp";
    case ActivationConfig::kTpEpSpSelective:
      return "pp+tp+ep+sp+selective";
    case ActivationConfig::kTpEpSpFull:
      return "pp+tp+ep+sp+full";
  }
  return "?";
}

Bytes activation_bytes(ActivationConfig c, int64_t b, int64_t s, int64_t h, int64_t a,
                       int64_t layers, int64_t top_k, int64_t tp) {
  const double bshl = static_cast<double>(b) * s * h * layers;
  const double k = static_cast<double>(top_k);
  const double t = static_cast<double>(tp);
  const double scores = 5.0 * a * static_cast<double>(s) / static_cast<double>(h);
  double factor = 0;
  switch (c) {
    case ActivationConfig::kNoParallelism:
      factor = 13 + 21 * k + scores;
      break;
    case ActivationConfig::kTpEp:
      factor = 5 + 5 * k + (8 + 16 * k) / t + scores / t;
      break;
    case ActivationConfig::kTpEpSp:
      factor = (13 + 21 * k) / t + scores / t;
      break;
    case ActivationConfig::kTpEpSpSelective:
      factor = (13 + 21 * k) / t;
      break;
    case ActivationConfig::kTpEpSpFull:
      factor = 2 / t;
      break;
  }
  return Bytes(bshl * factor);
}

const char* cp_expansion_name(CpExpansion e) {
  switch (e) {
    case CpExpansion::kNone:
      return "none";
    case CpExpansion::kHorizontal:
      return "horizontal";
    case CpExpansion::kVertical:
      return "vertical";
  }
  return "?";
}

CpExpansionChoice choose_cp_expansion(int64_t cp, int64_t ep, int64_t switch_radix) {
  CpExpansionChoice c;
  auto fits = [&](int64_t scale) { return switch_radix <= 0 || scale <= switch_radix; };
  if (cp <= 1 || ep <= 1) {
    c.network_scale = std::max(cp, ep);
    c.fits_switch = fits(c.network_scale);
    c.reason = "no CP x EP block to place (cp or ep is 1)";
    return c;
  }
  const int64_t horizontal = cp * ep;
  const int64_t vertical = std::max(cp, ep);
  if (cp < ep && fits(horizontal)) {
    c.expansion = CpExpansion::kHorizontal;
    c.network_scale = horizontal;
    c.reason = fmt::format(
        "cp {} < ep {} and the switch {} cp x ep = {} endpoints: orthogonal CP and EP groups "
        "keep each EP group's micro-batch whole",
        cp, ep, switch_radix > 0 ? fmt::format("(radix {}) holds", switch_radix) : "is unbounded;",
        horizontal);
  } else {
    c.expansion = CpExpansion::kVertical;
    c.network_scale = vertical;
    c.reason = cp >= ep ? fmt::format(
                              "cp {} >= ep {}: CP and EP aligned in one dimension, "
                              "network scale max(cp, ep) = {}",
                              cp, ep, vertical)
                        : fmt::format(
                              "cp {} < ep {} but cp x ep = {} exceeds the switch radix "
                              "{}: aligned instead, network scale {}",
                              cp, ep, horizontal, switch_radix, vertical);
  }
  c.fits_switch = fits(c.network_scale);
  return c;
}

}  // namespace moe::monta
