#include "calibrate/moe_layer_case.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "planner/errors.h"

namespace moe::calibrate {

namespace {

// Integer counts proportional to `share` that sum to `total` (largest remainders), none above
// `cap`: what is cut off a capped expert goes to the others by the same rule.
std::vector<int64_t> apportion(const std::vector<double>& share, int64_t total, int64_t cap) {
  const size_t n = share.size();
  std::vector<int64_t> count(n, 0);
  std::vector<bool> full(n, false);
  int64_t left = total;
  while (left > 0) {
    double sum = 0;
    for (size_t e = 0; e < n; ++e)
      if (!full[e]) sum += share[e];
    std::vector<std::pair<double, size_t>> rest;
    int64_t given = 0;
    for (size_t e = 0; e < n; ++e) {
      if (full[e]) continue;
      const double want = sum > 0 ? share[e] / sum * static_cast<double>(left)
                                  : static_cast<double>(left) / static_cast<double>(n);
      const int64_t whole = std::min(static_cast<int64_t>(std::floor(want)), cap - count[e]);
      count[e] += whole;
      given += whole;
      rest.emplace_back(want - std::floor(want), e);
    }
    std::stable_sort(rest.begin(), rest.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (const auto& [frac, e] : rest) {
      if (given == left) break;
      if (count[e] < cap) {
        ++count[e];
        ++given;
      }
    }
    left -= given;
    for (size_t e = 0; e < n; ++e) full[e] = full[e] || count[e] >= cap;
  }
  return count;
}

}  // namespace

int64_t MoeLayerCase::rows() const {
  return std::accumulate(expert_rows.begin(), expert_rows.end(), int64_t{0});
}

void check_moe_layer(const ModelSpec& m, int64_t layer) {
  if (!m.is_moe() || layer < 0 || layer >= m.num_layers ||
      !m.moe_layer[static_cast<size_t>(layer)]) {
    throw InputError("--layer", "",
                     fmt::format("layer {} of {} has no routed experts", layer, m.name));
  }
}

MoeLayerCase layer_case_of(const TimeContext& ctx, const PlanChoice& c, int64_t layer) {
  const ModelSpec& m = *ctx.model;
  check_moe_layer(m, layer);
  const ParallelConfig& p = c.parallel;
  const int64_t ep = p.ep.value_or(1), etp = p.etp.value_or(1);
  const int64_t local = m.num_routed_experts / ep;
  const double tokens = static_cast<double>(p.mbs.value_or(1) * c.seq_len) /
                        static_cast<double>(p.tp.value_or(1) * p.cp.value_or(1));
  // The busiest rank (rank 0 for capacity and worst; by placement for popularity), and how its
  // rows spread over its experts.
  const std::vector<double> loads = ctx.skew.rank_loads(m, ep, layer);
  const size_t busiest =
      static_cast<size_t>(std::max_element(loads.begin(), loads.end()) - loads.begin());
  std::vector<double> share(static_cast<size_t>(local), 1.0);
  if (ctx.skew.kind == RoutingSkew::Kind::kPopularity) {
    const std::vector<double>& row = ctx.skew.layer_row(layer);
    for (int64_t e = 0; e < local; ++e) {
      const size_t g = busiest * static_cast<size_t>(local) + static_cast<size_t>(e);
      share[static_cast<size_t>(e)] = g < row.size() ? row[g] : 0.0;
    }
  }
  MoeLayerCase out;
  out.hidden = m.hidden_size;
  out.ffn = m.expert_ffn_size / etp;
  out.gated = m.gated_ffn;
  out.top_k = std::min(m.top_k, local);
  // Expert TP: every rank of the etp group computes all of the group's rows at width g / etp.
  const double rows =
      static_cast<double>(m.top_k) * tokens * static_cast<double>(etp) * loads[busiest];
  out.tokens = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(rows / out.top_k)));
  out.expert_rows = apportion(share, out.tokens * out.top_k, out.tokens);
  return out;
}

MoeLayerCase shrink(const MoeLayerCase& c, int64_t tokens, int64_t experts) {
  MoeLayerCase out = c;
  out.tokens = std::min(c.tokens, tokens);
  const int64_t keep = std::clamp(experts, c.top_k, c.experts());
  std::vector<double> share(c.expert_rows.begin(), c.expert_rows.begin() + keep);
  out.expert_rows = apportion(share, out.tokens * out.top_k, out.tokens);
  return out;
}

std::vector<ChunkRouting> route_in_chunks(const MoeLayerCase& c, int64_t chunks, uint32_t seed) {
  const int64_t n = c.tokens, k = c.top_k, experts = c.experts();
  if (chunks < 1 || chunks > n)
    throw InputError("--chunks", "", fmt::format("{} chunks of {} tokens", chunks, n));
  // Each token takes the k experts with the most rows still to fill; with no expert above the
  // token count this fills every quota exactly.
  std::vector<int64_t> left = c.expert_rows;
  std::vector<int32_t> route(static_cast<size_t>(n * k));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < n; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return left[static_cast<size_t>(a)] != left[static_cast<size_t>(b)]
                 ? left[static_cast<size_t>(a)] > left[static_cast<size_t>(b)]
                 : a < b;
    });
    for (int64_t j = 0; j < k; ++j) {
      route[static_cast<size_t>(t * k + j)] = order[static_cast<size_t>(j)];
      --left[static_cast<size_t>(order[static_cast<size_t>(j)])];
    }
  }
  // Routing is random over a sequence, not sorted by popularity: shuffle which token is which.
  std::mt19937 rng(seed);
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<float> gate(0.05f, 1.0f);
  std::vector<float> weight(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t) {
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += weight[static_cast<size_t>(t * k + j)] = gate(rng);
    for (int64_t j = 0; j < k; ++j) weight[static_cast<size_t>(t * k + j)] /= sum;
  }

  std::vector<ChunkRouting> out(static_cast<size_t>(chunks));
  for (int64_t ci = 0; ci < chunks; ++ci) {
    ChunkRouting& ch = out[static_cast<size_t>(ci)];
    ch.first_token = ci * n / chunks;
    ch.tokens = (ci + 1) * n / chunks - ch.first_token;
    ch.expert_rows.assign(static_cast<size_t>(experts), 0);
    for (int64_t t = ch.first_token; t < ch.first_token + ch.tokens; ++t)
      for (int64_t j = 0; j < k; ++j)
        ++ch.expert_rows[static_cast<size_t>(
            route[static_cast<size_t>(perm[static_cast<size_t>(t)] * k + j)])];
    std::vector<int64_t> next(static_cast<size_t>(experts), 0);
    std::exclusive_scan(ch.expert_rows.begin(), ch.expert_rows.end(), next.begin(), int64_t{0});
    const size_t rows = static_cast<size_t>(ch.tokens * k);
    ch.row_token.resize(rows);
    ch.row_weight.resize(rows);
    ch.token_rows.resize(rows);
    ch.token_weights.resize(rows);
    for (int64_t t = ch.first_token; t < ch.first_token + ch.tokens; ++t) {
      const int64_t src = perm[static_cast<size_t>(t)];
      for (int64_t j = 0; j < k; ++j) {
        const size_t slot = static_cast<size_t>((t - ch.first_token) * k + j);
        const int32_t e = route[static_cast<size_t>(src * k + j)];
        const int64_t row = next[static_cast<size_t>(e)]++;
        const float w = weight[static_cast<size_t>(src * k + j)];
        ch.row_token[static_cast<size_t>(row)] = static_cast<int32_t>(t);
        ch.row_weight[static_cast<size_t>(row)] = w;
        ch.token_rows[slot] = static_cast<int32_t>(row);
        ch.token_weights[slot] = w;
      }
    }
  }
  return out;
}

}  // namespace moe::calibrate
