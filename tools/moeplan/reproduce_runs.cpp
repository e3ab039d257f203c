#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "planner/anchor.h"
#include "planner/aptmoe.h"
#include "planner/io/loaders.h"
#include "planner/layer_ops.h"
#include "planner/offload.h"
#include "planner/search.h"
#include "simulator/offload_sim.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/reproduce_rows.h"

namespace moe::cli {

namespace {

// The two systems MegaScale-MoE Sec. 6.1 compares: MegaScale-MoE runs SP attention and EP in a
// node with its overlap, Megatron-LM TP for attention and experts without it.
struct System {
  AttentionMode attention;
  bool overlap;
};
constexpr System kMegaScaleMoe{AttentionMode::kUlysses, true};
constexpr System kMegatronLm{AttentionMode::kTensor, false};

// Both are built on Megatron-LM commit f1f03922 (Sec. 6.1, mid 2024), whose token dispatcher
// predates Megatron-Core's fused permutation (--moe-permute-fusion, core_r0.10): every run of
// either system here permutes unfused, except where intra-operator overlap folds the scatter
// and gather into the grouped GEMM (Sec. 4.2).
constexpr bool kPermuteFusion = false;

// The best plan's score for a fixed layout and system; none when nothing fits.
std::optional<Plan> planned(const TimeContext& ctx, int64_t gpus, int64_t gbs,
                            const std::string& layout, const System& system);

std::optional<PlanScore> planned_score(const TimeContext& ctx, int64_t gpus, int64_t gbs,
                                       const std::string& layout, const System& system) {
  const std::optional<Plan> p = planned(ctx, gpus, gbs, layout, system);
  return p ? std::optional<PlanScore>(p->score) : std::nullopt;
}

std::optional<Plan> planned(const TimeContext& ctx, int64_t gpus, int64_t gbs,
                            const std::string& layout, const System& system) {
  SearchRequest req;
  req.num_gpus = gpus;
  req.global_batch = gbs;
  req.fixed = parse_parallel(layout);
  req.attention = system.attention;
  req.overlap = system.overlap;
  req.permute_fusion = kPermuteFusion;
  req.threads = 1;
  const SearchResult r = search_plans(ctx, req);
  if (r.ranked.empty()) return std::nullopt;
  return r.ranked.front();
}

double planned_tokens_per_second(const TimeContext& ctx, int64_t gpus, int64_t gbs,
                                 const std::string& layout, const System& system) {
  const auto s = planned_score(ctx, gpus, gbs, layout, system);
  return s ? s->tokens_per_second : NAN;
}

// Sec. 6.1: both systems with 15 pipeline stages.
constexpr const char* kMegaScaleLayout = "tp=8,pp=15,ep=8,etp=1,cp=1,vpp=1,mbs=1";
constexpr const char* kMegatronLayout = "tp=8,pp=15,ep=1,etp=8,cp=1,vpp=1,mbs=1";

}  // namespace

std::vector<Row> megascale_end_to_end(const std::string& root) {
  std::vector<Row> rows;
  const ModelSpec m = io::load_model(root + "/models/megascale-internal-352b.json");
  const ClusterSpec c = io::load_cluster(root + "/topologies/megascale-h800-1440.json");
  const TimeContext ctx = make_time_context(m, c, efficiencies(), RoutingSkew{}, 8192);
  auto megascale = [&](int64_t gpus, int64_t gbs) {
    return planned_tokens_per_second(ctx, gpus, gbs, kMegaScaleLayout, kMegaScaleMoe);
  };
  auto megatron = [&](int64_t gpus, int64_t gbs) {
    return planned_tokens_per_second(ctx, gpus, gbs, kMegatronLayout, kMegatronLm);
  };

  // Table 3: strong scaling at GBS 720.
  struct Point {
    int64_t gpus;
    double megatron, megascale;
  };
  const Point table3[] = {{240, 151.1e3, 272.9e3},
                          {480, 301.1e3, 498.6e3},
                          {720, 430.5e3, 740.1e3},
                          {960, 550.2e3, 963.8e3},
                          {1440, 746.6e3, 1407.7e3}};
  const std::string uncalibrated =
      "default curves: 2.0-2.4x the paper's throughput (an H100's measured GEMM curve, "
      "calibrate/data/h100.json, takes 4-6 % off); MegaScale-MoE MFU at 240 GPUs: ours 57 %, "
      "the paper's 32.5 % (which counts 282 GFLOP per token where we count 219: Sec. 6.1 rows)";
  // Sec. 6.1's MFU (32.48 % at 240 GPUs, 27.89 % at 1,440) over Table 3's tokens/s gives the
  // FLOPs per token the paper counts. Megatron-LM's num_floating_point_operations,
  // 12 L h^2 (attention (1 + g/a + s/h) + MLP (f/h) k m + logits V / (2 L h)), gives it with the
  // attention term causal (s/2h) and the gated multiplier m = 2 rather than Megatron's 3/2 (as if
  // the MLP had four matrices, or were recomputed); moeplan counts three, so its MFU for the
  // same run is 282/219 of the paper's lower.
  {
    const double L = static_cast<double>(m.num_layers), h = static_cast<double>(m.hidden_size);
    const double a = static_cast<double>(m.attention.num_heads);
    const double g = static_cast<double>(m.attention.num_kv_heads);
    const double f = static_cast<double>(m.expert_ffn_size) / h;
    const double k = static_cast<double>(m.top_k), V = static_cast<double>(m.vocab_size);
    const double per_token =
        12.0 * L * h * h * ((1.0 + g / a + 8192.0 / (2.0 * h)) + f * k * 2.0 + V / (2.0 * L * h));
    const double peak = c.node.gpu.peak.at(Dtype::kBf16).value();
    rows.push_back({"Sec. 6.1", "GFLOP per token behind the paper's MFU, 240 H800",
                    0.3248 * 240 * peak / 272.9e3 / 1e9, per_token / 1e9, "GFLOP",
                    "Megatron-LM's formula, causal attention, gated MLP counted as four matrices"});
    rows.push_back({"Sec. 6.1", "GFLOP per token behind the paper's MFU, 1,440 H800",
                    0.2789 * 1440 * peak / 1407.7e3 / 1e9, per_token / 1e9, "GFLOP", ""});
    const auto ours = planned_score(ctx, 240, 720, kMegaScaleLayout, kMegaScaleMoe);
    rows.push_back({"Sec. 6.1", "GFLOP per token moeplan's MFU counts", NAN,
                    ours ? ours->mfu * 240 * peak / ours->tokens_per_second / 1e9 : NAN, "GFLOP",
                    "model FLOPs: causal attention, the gated MLP's three matrices"});
  }
  for (const Point& p : table3) {
    const double ours_lm = megatron(p.gpus, 720), ours_ms = megascale(p.gpus, 720);
    rows.push_back({"Table 3", fmt::format("Megatron-LM tokens/s on {} H800", p.gpus), p.megatron,
                    ours_lm, "tokens/s", p.gpus == 240 ? uncalibrated : ""});
    rows.push_back({"Table 3", fmt::format("MegaScale-MoE tokens/s on {} H800", p.gpus),
                    p.megascale, ours_ms, "tokens/s", p.gpus == 240 ? uncalibrated : ""});
    rows.push_back({"Table 3", fmt::format("speedup over Megatron-LM on {} H800", p.gpus),
                    p.megascale / p.megatron, ours_ms / ours_lm, "x", ""});
  }

  // Table 3 anchored (moeplan anchor): every efficiency scaled so that Megatron-LM's plan at
  // 240 GPUs takes its measured iteration, 720 x 8,192 tokens at 151.1k tokens/s = 39.04 s; the
  // other nine points are predictions.
  if (const std::optional<Plan> lm240 = planned(ctx, 240, 720, kMegatronLayout, kMegatronLm)) {
    const Seconds measured(720.0 * 8192.0 / table3[0].megatron);
    const AnchorFit fit = fit_anchor(ctx, lm240->choice, measured, true);
    TimeContext anchored = ctx;
    anchored.eff = scale_efficiencies(ctx.eff, fit.scale, true);
    // Each point's plan, searched once: planned here, simulated below.
    struct AnchoredPoint {
      std::optional<Plan> megatron, megascale;
    };
    std::vector<AnchoredPoint> plans;
    auto tokens_per_second = [](const std::optional<Plan>& plan) {
      return plan ? plan->score.tokens_per_second : NAN;
    };
    for (const Point& p : table3) {
      plans.push_back({planned(anchored, p.gpus, 720, kMegatronLayout, kMegatronLm),
                       planned(anchored, p.gpus, 720, kMegaScaleLayout, kMegaScaleMoe)});
      const double lm = tokens_per_second(plans.back().megatron);
      const double ms = tokens_per_second(plans.back().megascale);
      rows.push_back({"Table 3", fmt::format("anchored: Megatron-LM tokens/s on {} H800", p.gpus),
                      p.megatron, lm, "tokens/s",
                      p.gpus == 240
                          ? fmt::format("the fit: every efficiency x {:.3f} so that this run "
                                        "takes the paper's {:.2f} s; the other nine predicted",
                                        fit.scale, measured.value())
                          : ""});
      rows.push_back({"Table 3", fmt::format("anchored: MegaScale-MoE tokens/s on {} H800", p.gpus),
                      p.megascale, ms, "tokens/s", ""});
    }
    // The same ten through the simulator (one representative GPU per stage, operator by
    // operator, on the anchored efficiencies): the check is on simulated runs.
    auto simulated = [&](const std::optional<Plan>& plan) {
      return plan ? sim::simulate_training(anchored, c, plan->choice, {}).tokens_per_second : NAN;
    };
    for (size_t i = 0; i < plans.size(); ++i) {
      const Point& p = table3[i];
      const double lm = simulated(plans[i].megatron);
      const double ms = simulated(plans[i].megascale);
      rows.push_back({"Table 3",
                      fmt::format("simulated, anchored: Megatron-LM tokens/s on {} H800", p.gpus),
                      p.megatron, lm, "tokens/s",
                      p.gpus == 240 ? "moeplan simulate on the anchored calibration" : ""});
      rows.push_back({"Table 3",
                      fmt::format("simulated, anchored: MegaScale-MoE tokens/s on {} H800", p.gpus),
                      p.megascale, ms, "tokens/s", ""});
      rows.push_back(
          {"Table 3",
           fmt::format("simulated, anchored: speedup over Megatron-LM on {} H800", p.gpus),
           p.megascale / p.megatron, ms / lm, "x", ""});
    }
  }

  // Fig. 11: weak scaling, GBS 360 to 1,080 on 480 to 1,440 GPUs.
  std::vector<double> lm, ms;
  for (int64_t gpus : {480, 960, 1440}) {
    lm.push_back(megatron(gpus, gpus * 3 / 4) / static_cast<double>(gpus));
    ms.push_back(megascale(gpus, gpus * 3 / 4) / static_cast<double>(gpus));
  }
  rows.push_back({"Fig. 11", "Megatron-LM tokens/s per GPU, 1,440 vs 480 GPUs", 1.0 - 0.0274,
                  lm.back() / lm.front(), "x", "the paper: throughput drops by 2.74 %"});
  rows.push_back({"Fig. 11", "MegaScale-MoE tokens/s per GPU, 1,440 vs 480 GPUs", 1.0,
                  ms.back() / ms.front(), "x", "the paper: near linear"});
  std::vector<double> speedups;
  for (size_t i = 0; i < lm.size(); ++i) speedups.push_back(ms[i] / lm[i]);
  rows.push_back({"Fig. 11", "smallest speedup over Megatron-LM (480-1,440 GPUs)", 1.74,
                  *std::min_element(speedups.begin(), speedups.end()), "x", ""});
  rows.push_back({"Fig. 11", "largest speedup over Megatron-LM (480-1,440 GPUs)", 1.79,
                  *std::max_element(speedups.begin(), speedups.end()), "x", ""});

  // Fig. 12: Mixtral-8x7B on 32 H800, A100 and H20, DP 4 with TP 8 (Megatron-LM) or SP and EP
  // 8 (MegaScale-MoE). The paper gives no batch; GBS 128 at sequence 8,192 here.
  {
    const ModelSpec mixtral = io::load_model(root + "/models/mixtral-8x7b.json");
    std::vector<double> mfu;
    double best_speedup = 0;
    for (const char* file : {"megascale-h800-240", "megascale-a100-4x8", "megascale-h20-4x8"}) {
      const ClusterSpec gpu = io::load_cluster(root + "/topologies/" + file + ".json");
      const TimeContext at = make_time_context(mixtral, gpu, efficiencies(), RoutingSkew{}, 8192);
      const auto ms =
          planned_score(at, 32, 128, "tp=8,pp=1,ep=8,etp=1,dp=4,cp=1,vpp=1", kMegaScaleMoe);
      const auto lm =
          planned_score(at, 32, 128, "tp=8,pp=1,ep=1,etp=8,dp=4,cp=1,vpp=1", kMegatronLm);
      mfu.push_back(ms ? ms->mfu : NAN);
      if (ms && lm) best_speedup = std::max(best_speedup, ms->mfu / lm->mfu);
    }
    rows.push_back({"Fig. 12", "MegaScale-MoE MFU falls as compute rises (H800 < A100 < H20)", 1,
                    mfu[0] < mfu[1] && mfu[1] < mfu[2] ? 1.0 : 0.0, "1 = yes",
                    fmt::format("MFU {:.1f} % / {:.1f} % / {:.1f} %", 100 * mfu[0], 100 * mfu[1],
                                100 * mfu[2])});
    rows.push_back({"Fig. 12", "largest MFU speedup over Megatron-LM (H800, A100, H20)", 1.58,
                    best_speedup, "x", "the paper: up to 1.58x"});
  }

  // One 8 x H800 node, GBS 32, six models of Table 2, no overlap (the paper's other
  // optimizations off). Fig. 13: SP+EP against TP+TP. Fig. 15 and Sec. 6.2: SP+EP with
  // intra-operator overlap against the same layout without: each fused pair's time against its
  // parts (the all-to-all with the attention projections; dispatch, scatter/gather and combine
  // with the grouped GEMM), and the iteration.
  const ClusterSpec node = io::load_cluster(root + "/topologies/megascale-h800-240.json");
  std::vector<double> gains, pair_cuts, iteration_cuts;
  bool spep_best = true;
  for (const char* file :
       {"megascale-internal-352b.json", "mixtral-8x7b.json", "mixtral-8x22b.json",
        "hunyuan-large.json", "phi-3.5-moe.json", "deepseekmoe-16b.json"}) {
    const ModelSpec model = io::load_model(root + "/models/" + file);
    const TimeContext one = make_time_context(model, node, efficiencies(), RoutingSkew{}, 4096);
    auto choice_for = [](const char* layout, AttentionMode attention) {
      PlanChoice choice;
      choice.parallel = resolve(parse_parallel(layout));
      choice.attention = attention;
      choice.overlap = false;
      choice.permute_fusion = kPermuteFusion;
      return choice;
    };
    auto mfu = [&](const PlanChoice& choice) {
      return score_plan(one, choice, node.node.gpu.hbm_capacity, 1.0).mfu;
    };
    // The four strategies of Fig. 13, attention + experts: TP+TP, TP+EP, SP+TP, SP+EP.
    const char* kExpertTp = "tp=8,etp=8,ep=1,dp=1,pp=1,mbs=1,gbs=32";
    const char* kExpertEp = "tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=32";
    PlanChoice spep = choice_for(kExpertEp, AttentionMode::kUlysses);
    const double tptp = mfu(choice_for(kExpertTp, AttentionMode::kTensor));
    const double tpep = mfu(choice_for(kExpertEp, AttentionMode::kTensor));
    const double sptp = mfu(choice_for(kExpertTp, AttentionMode::kUlysses));
    const double best = mfu(spep);
    gains.push_back(best / tptp - 1.0);
    spep_best = spep_best && best >= std::max({tptp, tpep, sptp});
    rows.push_back(
        {"Fig. 13", fmt::format("{}: SP+EP MFU over TP+TP", model.name), NAN, best / tptp - 1.0, "",
         fmt::format("MFU TP+TP {:.1f} %, TP+EP {:.1f} %, SP+TP {:.1f} %, SP+EP {:.1f} %",
                     100 * tptp, 100 * tpep, 100 * sptp, 100 * best)});

    const size_t moe_layer = static_cast<size_t>(
        std::find(model.moe_layer.begin(), model.moe_layer.end(), true) - model.moe_layer.begin());
    auto ops = [&](bool intra) {
      spep.intra_overlap = intra;
      std::map<std::string, double> by_name;
      for (const LayerOp& op :
           layer_forward_ops(one, spep, one.params.layers[moe_layer], true, 1.0, 1))
        by_name[op.name] = op.time.value();
      return by_name;
    };
    const auto apart = ops(false), together = ops(true);
    const char* kMemory = "norms, residuals, activations";
    pair_cuts.push_back((apart.at("attention projections") + apart.at("Ulysses SP all-to-all")) /
                        together.at("attention projections (fused TP/SP communication)"));
    pair_cuts.push_back((apart.at("dispatch") + apart.at("routed experts") + apart.at("combine") +
                         apart.at(kMemory) - together.at(kMemory)) /
                        together.at("routed experts (fused dispatch and combine)"));
    spep.intra_overlap = false;
    const double base = estimate_time(one, spep).iteration.value();
    spep.intra_overlap = true;
    iteration_cuts.push_back(1.0 - estimate_time(one, spep).iteration.value() / base);
  }
  const auto [pair_lo, pair_hi] = std::minmax_element(pair_cuts.begin(), pair_cuts.end());
  const auto [it_lo, it_hi] = std::minmax_element(iteration_cuts.begin(), iteration_cuts.end());
  const std::string fig15 =
      "six models on one 8 x H800 node, SP+EP, against no overlap; the fused pair's time is "
      "max(comm, GEMM slowed by 8 of 132 SMs) plus one tile wave, its permutation folded into "
      "the GEMM";
  rows.push_back({"Fig. 15", "smallest cut of a fused pair's communication + computation", 1.2,
                  *pair_lo, "x", fig15});
  rows.push_back({"Fig. 15", "largest cut of a fused pair's communication + computation", 4.7,
                  *pair_hi, "x", ""});
  rows.push_back({"Sec. 6.2", "smallest iteration-time cut from intra-operator overlap", 0.071,
                  *it_lo, "", ""});
  rows.push_back({"Sec. 6.2", "largest iteration-time cut from intra-operator overlap", 0.129,
                  *it_hi, "", ""});

  const std::string fig13 =
      "six models of Table 2, no overlap as the paper runs it; TP's 4-6 NVLink collectives "
      "per layer, shallow sliced expert GEMMs and every rank permuting the gathered batch "
      "weigh most on the narrow models (h 2048-4096); Table 3 and Fig. 11 compare the same "
      "layouts at scale and match within 11 %";
  rows.push_back({"Fig. 13", "smallest MFU gain of SP+EP over TP+TP", 0.149,
                  *std::min_element(gains.begin(), gains.end()), "", fig13});
  rows.push_back({"Fig. 13", "largest MFU gain of SP+EP over TP+TP", 0.329,
                  *std::max_element(gains.begin(), gains.end()), "", ""});
  rows.push_back({"Fig. 13", "SP+EP has the highest MFU of the four strategies for all six", 1.0,
                  spep_best ? 1.0 : 0.0, "1 = yes", ""});
  return rows;
}

std::vector<Row> monta_end_to_end(const std::string& root) {
  // Fig. 14 on 2 x 8 A800: TP = 8, EP = 2, experts tensor-parallel, the efficiencies of Table 8;
  // 2 layers of the 2x70B model (the choice depends on the per-layer volume only).
  ModelSpec m = io::load_model(root + "/models/monta-2x70b.json");
  m.num_layers = 2;
  m.moe_layer = {true, true};
  const ClusterSpec c = io::load_cluster(root + "/topologies/monta-2x8-a800.json");
  const auto curves =
      io::load_calibration(root + "/calibrate/data/monta-table8-curves.json").curves;
  std::vector<Row> rows;
  for (int64_t seq : {8192, 65536, 262144}) {
    const TimeContext ctx = make_time_context(m, c, efficiencies(curves), RoutingSkew{}, seq);
    SearchRequest req;
    req.num_gpus = 16;
    req.global_batch = 2;
    req.fixed = parse_parallel("tp=8,etp=8,ep=2,pp=1,cp=1,vpp=1,mbs=1");
    req.recompute = Recompute::kFull;
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    const double chosen =
        r.ranked.empty() ? NAN : static_cast<double>(r.ranked.front().choice.alltoall);
    // The paper: O1 at 8K; the pipelined O2/O3 for long sequences (O3 at 256K).
    const double paper = seq == 8192 ? 1.0 : 3.0;
    rows.push_back({"Fig. 14", fmt::format("strategy chosen at {}K tokens", seq / 1024), paper,
                    chosen, "0 base, 1 O1, 2 O2, 3 O3",
                    seq == 65536 ? "the paper shows O2 and O3 close at 64K; either is right" : ""});
  }
  // Fig. 11: with ZeRO-3 gradient traffic on the NICs, the EP all-to-all's wait under MoNTA's
  // priorities (EP << PP << CP << DP) against fair sharing. The paper draws the conflict and
  // prints no times.
  {
    const ModelSpec mixtral = io::load_model(root + "/models/mixtral-8x7b.json");
    const ClusterSpec h800 = io::load_cluster(root + "/topologies/megascale-h800-240.json");
    const TimeContext ctx = make_time_context(mixtral, h800, efficiencies(), RoutingSkew{}, 4096);
    PlanChoice choice;
    choice.parallel = resolve(parse_parallel("tp=2,pp=1,ep=8,etp=2,dp=64,mbs=1,gbs=128"));
    choice.seq_len = 4096;
    choice.zero_stage = 3;
    sim::TrainingOptions o;
    const Seconds fair =
        sim::simulate_training(ctx, h800, choice, o).stages[0].waited[sim::kEpStream];
    o.comm_priorities = true;
    const Seconds ordered =
        sim::simulate_training(ctx, h800, choice, o).stages[0].waited[sim::kEpStream];
    rows.push_back({"Fig. 11", "EP all-to-all wait with priorities over fair sharing (ZeRO-3 DP)",
                    NAN, ordered / fair, "x",
                    fmt::format("Mixtral-8x7B on 128 H800: {:.0f} ms -> {:.0f} ms per iteration",
                                1e3 * fair.value(), 1e3 * ordered.value())});
  }
  return rows;
}

std::vector<Row> memfine_end_to_end(const std::string& root) {
  // Sec. 5 on 128 x 64 GB: t = 1, p = 4, e = 32, full recompute, the measured static memory;
  // routing skew grows with depth and settles over 5 iterations, peaking at Table 4's s''. Fig.
  // 4 averages TGS over a run: 20 iterations hold the skewed start and the settled routing
  // after it. A further FCDA round costs what calibrate/data/memfine-fcda-round.json fits to
  // Model II's c = 8 (-5.40 %); the other Fig. 4 rows are predictions.
  constexpr int64_t kIterations = 20;
  std::vector<Row> rows;
  const io::Calibration fcda =
      io::load_calibration(root + "/calibrate/data/memfine-fcda-round.json");
  struct ModelCase {
    const char* file;
    double static_gb;
  };
  double tgs[2][3] = {};
  int64_t ooms[2][3] = {};
  // Fig. 4 plots TGS over iterations: each method's first and last simulated iteration.
  double first_tgs[2][3] = {}, last_tgs[2][3] = {};
  // Fig. 5: MACT's chunk counts on Model I, in the first iteration and in the last simulated
  // one (iteration k's histogram is the run of k iterations less the run of k - 1: routing is
  // drawn per layer and iteration, the same whatever follows).
  std::vector<int64_t> first_iteration, last_iteration;
  const ModelCase cases[2] = {{"memfine-model-1.json", 43.0}, {"memfine-model-2.json", 39.5}};
  const ClusterSpec c = io::load_cluster(root + "/topologies/memfine-128x64gb.json");
  for (int model = 0; model < 2; ++model) {
    const ModelSpec m = io::load_model(root + "/models/" + cases[model].file);
    const TimeContext ctx = make_time_context(m, c, efficiencies(fcda.curves, fcda.constants),
                                              parse_skew("capacity=18.21", m), 4096);
    PlanChoice choice;
    choice.parallel = resolve(parse_parallel("tp=1,pp=4,ep=32,dp=32,mbs=1,gbs=128"));
    check(choice.parallel, m);
    choice.seq_len = 4096;
    choice.recompute = Recompute::kFull;
    sim::TrainingOptions o;
    o.iterations = kIterations;
    o.dynamics.drift_iterations = 5;
    o.static_override = gigabytes(cases[model].static_gb);
    for (int method = 0; method < 3; ++method) {
      // Method 1: no chunks; 2: fixed c = 8; 3: MACT.
      choice.fcda_chunks = method == 1 ? 8 : 1;
      choice.mact = method == 2;
      const sim::TrainingReport r = sim::simulate_training(ctx, c, choice, o);
      tgs[model][method] = r.tgs;
      ooms[model][method] = r.oom_count;
      // TGS of one iteration: eq. (10) with that iteration's time.
      const double tokens_per_gpu = static_cast<double>(*choice.parallel.gbs * choice.seq_len) /
                                    static_cast<double>(choice.parallel.world());
      first_tgs[model][method] = tokens_per_gpu / r.iteration_times.front().value();
      last_tgs[model][method] = tokens_per_gpu / r.iteration_times.back().value();
      if (model == 0 && method == 2) {
        sim::TrainingOptions one = o, before = o;
        one.iterations = 1;
        before.iterations = o.iterations - 1;
        first_iteration = sim::simulate_training(ctx, c, choice, one).chunk_histogram;
        last_iteration = r.chunk_histogram;
        const std::vector<int64_t> earlier =
            sim::simulate_training(ctx, c, choice, before).chunk_histogram;
        for (size_t k = 0; k < last_iteration.size() && k < earlier.size(); ++k)
          last_iteration[k] -= earlier[k];
      }
    }
  }
  auto largest = [](const std::vector<int64_t>& histogram) {
    double c = 0;
    for (size_t k = 0; k < histogram.size(); ++k)
      if (histogram[k] > 0) c = static_cast<double>(k);
    return c;
  };
  rows.push_back({"Fig. 5", "Model I largest MACT chunk count, first iteration", 2,
                  largest(first_iteration), "",
                  "the paper: MACT derives c = 2 at the skewed start (Table 4)"});
  rows.push_back({"Fig. 5", "Model I largest MACT chunk count, last simulated iteration", NAN,
                  largest(last_iteration), "",
                  "Fig. 5 shows the chunk count falling as routing balances; it prints no values"});
  rows.push_back({"Table 4", "Model I method 1 (no chunks) runs out of memory", 1,
                  ooms[0][0] > 0 ? 1.0 : 0.0, "1 = yes", ""});
  rows.push_back(
      {"Table 4", "Model I method 3 (MACT) fits", 1, ooms[0][2] == 0 ? 1.0 : 0.0, "1 = yes", ""});
  rows.push_back(
      {"Fig. 4", "Model I TGS, method 3 (MACT) over method 2 (c = 8)", 1.1826,
       tgs[0][2] / tgs[0][1], "x",
       fmt::format("predicted, {} iterations, a round at the Model II fit", kIterations)});
  rows.push_back({"Fig. 4", "Model II TGS, method 3 over method 1", 1.0442, tgs[1][2] / tgs[1][0],
                  "x",
                  "MACT keeps c = 1 on Model II (eq. 8: s'_max 640,200 > s'' 596,797), so it "
                  "runs method 1's schedule; the paper's gain cannot come from chunking"});
  const char* kMethods[3] = {"method 1 (no chunks)", "method 2 (c = 8)", "method 3 (MACT)"};
  for (int model = 0; model < 2; ++model) {
    for (int method = 0; method < 3; ++method) {
      const std::string name =
          fmt::format("Model {} TGS, {}", model == 0 ? "I" : "II", kMethods[method]);
      std::string note = model == 0 && method == 0
                             ? "Fig. 4 plots TGS over iterations and prints no values; routing "
                               "settles, so the last iteration runs faster"
                             : "";
      if (ooms[model][method] > 0)
        note += fmt::format("{}runs out of memory ({} events)", note.empty() ? "" : "; ",
                            ooms[model][method]);
      rows.push_back({"Fig. 4", name + ", first iteration", NAN, first_tgs[model][method],
                      "tokens/GPU/s", note});
      rows.push_back({"Fig. 4", fmt::format("{}, iteration {}", name, kIterations), NAN,
                      last_tgs[model][method], "tokens/GPU/s", ""});
    }
  }
  rows.push_back({"Fig. 4", "Model II TGS, method 2 over method 1", 1.0 - 0.054,
                  tgs[1][1] / tgs[1][0], "x",
                  "fitted: sets the FCDA round overhead (calibrate/data/memfine-fcda-round.json)"});
  return rows;
}

std::vector<Row> aptmoe_end_to_end(const std::string& root) {
  // Sec. IV: FP32, batch 128 with as many micro-batches as GPUs; stages as the planner's best
  // offload plan. The paper does not state its sequence length, but Table I's memory column
  // does: each model's FP32 figure is 16 bytes per parameter plus every expert's FFN activation
  // (h wide, FP32) for about 4,096 tokens, so batch 128 holds 32-token sequences (the row
  // below). 512 tokens would put 550 GB of such activations on MoE-S-8 alone, against its 111.
  constexpr int64_t kSeqLen = 32;
  std::vector<Row> rows;
  {
    // Table I: (memory - 16 P) / (4 bytes x E h L), the tokens each model's column implies.
    struct Entry {
      const char* file;
      double paper_gb;
    };
    double sum = 0;
    int n = 0;
    for (const Entry& e : {Entry{"aptmoe-moe-s-8.json", 111}, Entry{"aptmoe-moe-s-16.json", 213},
                           Entry{"aptmoe-moe-s-64.json", 821}, Entry{"aptmoe-moe-m-8.json", 366},
                           Entry{"aptmoe-moe-m-16.json", 707}}) {
      const ModelSpec m = io::load_model(root + "/models/" + e.file);
      const double per_token = 4.0 * static_cast<double>(m.num_routed_experts) *
                               static_cast<double>(m.expert_ffn_size) *
                               static_cast<double>(m.num_layers);
      sum += (e.paper_gb * 1e9 - 16.0 * count_params(m).total()) / per_token;
      ++n;
    }
    rows.push_back({"Table I", "tokens per batch its FP32 memory column implies (MoE-S/M)", NAN,
                    sum / n, "tokens",
                    "mean of five models; batch 128 x 32 tokens = 4,096, so the runs below use "
                    "32-token sequences (the paper states none)"});
  }
  // One case: files read, the offload plan searched once, then each system simulated on it.
  // `own_uplink` rewires the node so that every GPU has a PCIe switch, and an x16 uplink, of its
  // own under the same socket.
  auto run = [&](const char* model_file, const char* topology, int64_t gpus, double g,
                 std::vector<OffloadSystem> systems, bool own_uplink = false) {
    const ModelSpec m = io::load_model(root + "/models/" + model_file);
    ClusterSpec c = io::load_cluster(root + "/topologies/" + topology);
    if (own_uplink) {
      std::vector<PcieSwitch> one_each;
      for (const PcieSwitch& s : c.node.pcie_switches)
        for (int gpu : s.gpus) one_each.push_back({s.cpu, {gpu}});
      c.node.pcie_switches = one_each;
    }
    RoutingSkew skew;
    skew.kind = RoutingSkew::Kind::kPopularity;
    skew.proportions = {aptmoe::proportions_for_g(m.num_routed_experts, g)};
    const TimeContext ctx = make_time_context(m, c, efficiencies(), skew, kSeqLen);
    SearchRequest req;
    req.num_gpus = gpus;
    req.global_batch = 128;
    req.precision = Precision::kFp32;
    req.fixed = parse_parallel(fmt::format("mbs={}", 128 / gpus));
    const std::vector<Plan> plans = offload_plans(ctx, c, req);
    std::vector<double> tokens_per_second;
    for (OffloadSystem system : systems) {
      tokens_per_second.push_back(
          plans.empty()
              ? std::nan("")
              : sim::simulate_offload(ctx, c, sim::offload_run(plans.front().choice, system))
                    .tokens_per_second);
    }
    return tokens_per_second;
  };
  auto gain = [&](const char* model, const char* topology, int64_t gpus, double g,
                  bool own_uplink = false) {
    const std::vector<double> t =
        run(model, topology, gpus, g, {OffloadSystem::kAptMoe, OffloadSystem::kMobius}, own_uplink);
    return t[0] / t[1];
  };
  auto aptmoe = [&](const char* model, const char* topology, int64_t gpus, double g) {
    return run(model, topology, gpus, g, {OffloadSystem::kAptMoe})[0];
  };
  const std::string regime =
      "32-token sequences: loading binds the forward pass, backward (twice the compute) hides "
      "it, and the CPU optimizer step (0.87 s of Mobius' 2.22 s) is common to both";
  rows.push_back({"Fig. 11", "APTMoE over Mobius, MoE-S-16, C1+G2, G = 0.4", 1.33,
                  gain("aptmoe-moe-s-16.json", "aptmoe-4x-a800-40gb-c1g2.json", 4, 0.4), "x",
                  regime});
  rows.push_back({"Fig. 11", "APTMoE over Mobius, MoE-S-16, C1+G2, G = 0.2", NAN,
                  gain("aptmoe-moe-s-16.json", "aptmoe-4x-a800-40gb-c1g2.json", 4, 0.2), "x",
                  "the paper: the gain grows with G"});
  // Fig. 11 (a), (b), (d), (e): the largest speedup over Mobius across G = 0.2 ... 0.5 per model,
  // and the Mixtral-like MoE-L-8 at G = 0.2 against Mobius and GPipeOffload (Sec. IV-D3).
  struct Sweep {
    const char* file;
    const char* name;
    double paper;
  };
  for (const Sweep& w : {Sweep{"aptmoe-moe-s-8.json", "MoE-S-8", 1.323},
                         Sweep{"aptmoe-moe-m-8.json", "MoE-M-8", 1.171},
                         Sweep{"aptmoe-moe-s-16.json", "MoE-S-16", 1.33},
                         Sweep{"aptmoe-moe-m-16.json", "MoE-M-16", 1.153}}) {
    double best = 0;
    for (double g : {0.2, 0.3, 0.4, 0.5})
      best = std::max(best, gain(w.file, "aptmoe-4x-a800-40gb-c1g2.json", 4, g));
    rows.push_back({"Fig. 11",
                    fmt::format("largest APTMoE speedup over Mobius, {}, G = 0.2-0.5", w.name),
                    w.paper, best, "x", ""});
  }
  {
    const std::vector<double> l8 =
        run("aptmoe-moe-l-8.json", "aptmoe-4x-a800-40gb-c1g2.json", 4, 0.2,
            {OffloadSystem::kAptMoe, OffloadSystem::kMobius, OffloadSystem::kGPipeOffload});
    rows.push_back({"Sec. IV-D3", "APTMoE over Mobius, MoE-L-8 (Mixtral-like), G = 0.2", 1.04,
                    l8[0] / l8[1], "x",
                    std::isnan(l8[0]) ? "no offload plan fits: its dimensions give 64.4 B "
                                        "parameters, 1.29 TB in FP32 with Adam, above the node's "
                                        "1,024 GB (the paper's own 1,126 GB is above it too)"
                                      : ""});
    rows.push_back(
        {"Sec. IV-D3", "APTMoE over GPipeOffload, MoE-L-8, G = 0.2", 1.20, l8[0] / l8[2], "x", ""});
  }
  // Sec. III-B: the popularity predictor's accuracy (0.85 one layer ahead with 8 experts, 0.64
  // four ahead with 128): MoE-S-16 on C1+G2 at batch 128, against an oracle. The paper reports
  // accuracies, not their cost.
  {
    const ModelSpec m = io::load_model(root + "/models/aptmoe-moe-s-16.json");
    const ClusterSpec c = io::load_cluster(root + "/topologies/aptmoe-4x-a800-40gb-c1g2.json");
    RoutingSkew skew;
    skew.kind = RoutingSkew::Kind::kPopularity;
    skew.proportions = {aptmoe::proportions_for_g(m.num_routed_experts, 0.3)};
    const TimeContext ctx = make_time_context(m, c, efficiencies(), skew, kSeqLen);
    auto throughput = [&](double accuracy, double historical) {
      sim::OffloadRun r;
      r.gpus = 4;
      r.stages = 16;
      r.microbatch_size = 32;
      r.global_batch = 128;
      r.predictor_accuracy = accuracy;
      r.historical_accuracy = historical;
      return sim::simulate_offload(ctx, c, r).tokens_per_second;
    };
    const double oracle = throughput(1.0, 1.0);
    for (double accuracy : {0.85, 0.64}) {
      rows.push_back({"Sec. III-B",
                      fmt::format("APTMoE throughput at predictor accuracy {} over an oracle, "
                                  "MoE-S-16, C1+G2",
                                  accuracy),
                      NAN, throughput(accuracy, 1.0) / oracle, "x", ""});
    }
    // Historical popularity steering the inter-stage phase: 73.3 % of picks right (NLLB-MoE).
    rows.push_back({"Sec. III-B",
                    "APTMoE throughput with historical popularity 73.3 % right and predictor "
                    "0.85, over an oracle, MoE-S-16, C1+G2",
                    NAN, throughput(0.85, 0.733) / oracle, "x", ""});
  }
  // Fig. 13: our topology files share one x16 uplink among a socket's GPUs, so C1+G4 loads at a
  // quarter of C1+G1's rate per GPU and Mobius suffers most there; the paper instead finds
  // APTMoE 2 % behind, its 7 cores per process "insufficient". Our affinity (eq. 1) prices the
  // CPU exactly as the simulator runs it, so it does not lose to Mobius here.
  const std::pair<const char*, double> fig13[] = {{"c1g4", 0.98}, {"c1g2", 1.283}, {"c1g1", 1.31}};
  for (auto [topology, paper] : fig13) {
    rows.push_back({"Fig. 13", fmt::format("APTMoE over Mobius, MoE-S-16, G = 0.3, {}", topology),
                    paper,
                    gain("aptmoe-moe-s-16.json",
                         fmt::format("aptmoe-4x-a800-40gb-{}.json", topology).c_str(), 4, 0.3),
                    "x",
                    std::string(topology) == "c1g4"
                        ? "4 GPUs share the socket's x16 uplink here, so Mobius loads slowest; "
                          "the paper's loss needs CPU contention its profiler missed"
                        : ""});
  }
  // The same with an x16 uplink per GPU (the paper does not say how its switches are wired):
  // loading no longer depends on the binding, only the cores per process do, and the gain
  // follows the paper's order (it grows with the cores), though smaller.
  for (auto [topology, paper] : fig13) {
    rows.push_back(
        {"Fig. 13",
         fmt::format("APTMoE over Mobius, MoE-S-16, G = 0.3, {}, an x16 uplink per GPU", topology),
         paper,
         gain("aptmoe-moe-s-16.json", fmt::format("aptmoe-4x-a800-40gb-{}.json", topology).c_str(),
              4, 0.3, true),
         "x", ""});
  }
  struct Scaling {
    const char* file;
    const char* name;
    double x8, x16;
  };
  for (const Scaling& s : {Scaling{"aptmoe-moe-s-64.json", "MoE-S-64", 1.65, 3.08},
                           Scaling{"aptmoe-moe-m-16.json", "MoE-M-16", 1.76, 3.36}}) {
    const char* topo = "aptmoe-4x-a800-40gb-c1g2.json";
    const double four = aptmoe(s.file, topo, 4, 0.3);
    rows.push_back({"Fig. 14", fmt::format("{} APTMoE throughput, 8 vs 4 GPUs", s.name), s.x8,
                    aptmoe(s.file, topo, 8, 0.3) / four, "x", ""});
    rows.push_back({"Fig. 14", fmt::format("{} APTMoE throughput, 16 vs 4 GPUs", s.name), s.x16,
                    aptmoe(s.file, topo, 16, 0.3) / four, "x", ""});
  }
  return rows;
}

}  // namespace moe::cli
