#include "planner/search.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "planner/anchor.h"
#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/layer_ops.h"
#include "planner/offload.h"
#include "planner/planner_inputs.h"
#include "planner/stage_pricing.h"
#include "test_models.h"

namespace moe {

namespace {
// One MoE layer's forward operators by name for a layout.
std::map<std::string, Seconds> forward_ops(const Inputs& s, const char* layout,
                                           AttentionMode attention = AttentionMode::kTensor,
                                           Precision precision = Precision::kBf16,
                                           bool permute_fusion = true) {
  PlanChoice c;
  c.parallel = resolve(parse_parallel(layout));
  c.attention = attention;
  c.precision = precision;
  c.permute_fusion = permute_fusion;
  std::map<std::string, Seconds> by_name;
  for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], true, 1.0, 1))
    by_name[op.name] = op.time;
  return by_name;
}

SearchRequest request(int64_t gpus, int64_t gbs, const std::string& fixed = "", int top_k = 5) {
  SearchRequest r;
  r.num_gpus = gpus;
  r.global_batch = gbs;
  r.fixed = parse_parallel(fixed);
  r.top_k = top_k;
  return r;
}
}  // namespace

TEST(Search, TheMemoryObjectiveKeepsTheFastestOfEqualMemory) {
  // One layout, recompute, attention and ZeRO stage fixed: the switches the search tries, FP32
  // gradients first and then BF16 (which halve Llama-2-7B's exposed DP sync over 4 A100 nodes:
  // 1,677 against 1,369 ms), need the same memory, so --objective memory must return the plan
  // --objective throughput does, not the first switch it tried.
  const Inputs s("llama-2-7b.json", "megascale-a100-4x8.json");
  SearchRequest req = request(32, 32, "tp=1,pp=1,cp=1,vpp=1,mbs=1");
  req.recompute = Recompute::kFull;
  req.zero = 1;
  req.attention = AttentionMode::kTensor;
  req.overlap = true;
  const Plan fastest = search_plans(s.ctx, req).ranked.at(0);
  req.objective = Objective::kMemory;
  const Plan least = search_plans(s.ctx, req).ranked.at(0);
  EXPECT_EQ(least.score.peak_bytes, fastest.score.peak_bytes)
      << least.choice.describe() << " vs " << fastest.choice.describe();
  EXPECT_EQ(least.score.time.iteration, fastest.score.time.iteration) << least.choice.describe();
}

TEST(Search, FullLayoutEvaluatesExactlyThatLayout) {
  const Inputs s("deepseekmoe-16b.json", "h100-sxm-8.json");
  const SearchResult r =
      search_plans(s.ctx, request(8, 64, "tp=1,pp=1,ep=8,etp=1,cp=1,vpp=1,mbs=1"));
  EXPECT_EQ(r.stats.layouts, 1);
  ASSERT_EQ(r.ranked.size(), 1u);
  EXPECT_EQ(r.ranked[0].choice.parallel.to_string(),
            "tp=1,pp=1,ep=8,etp=1,edp=1,dp=8,cp=1,vpp=1,mbs=1,gbs=64");
}

TEST(Search, PartialLayoutKeepsTheFixedSizes) {
  const Inputs s("deepseekmoe-16b.json", "h100-sxm-8.json");
  const SearchResult r = search_plans(s.ctx, request(8, 64, "tp=2"));
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_GT(r.stats.layouts, 1);
  for (const Plan& p : r.ranked) EXPECT_EQ(*p.choice.parallel.tp, 2);
}

TEST(Search, LayoutsSplitTheSequenceAsMegatronDoes) {
  // Context parallelism cuts a sequence into 2 x cp chunks and sequence parallelism a CP
  // rank's tokens over TP: 4,094 tokens take tp 2 but no cp > 1, 4,095 neither, and an odd
  // sequence still plans at tp = cp = 1 (it once found no layout at all).
  for (int64_t seq : {4094, 4095, 4096}) {
    const Inputs s("deepseekmoe-16b.json", "h100-sxm-8.json", seq);
    const SearchResult free = search_plans(s.ctx, request(8, 64, "pp=1,mbs=1"));
    ASSERT_FALSE(free.ranked.empty()) << seq;
    for (const Plan& p : free.ranked) EXPECT_NO_THROW(check_sequence(p.choice.parallel, seq));
    auto plans = [&](const char* fixed) {
      try {
        return !search_plans(s.ctx, request(8, 64, fixed)).ranked.empty();
      } catch (const ConfigError&) {
        return false;
      }
    };
    EXPECT_EQ(plans("cp=2,pp=1,mbs=1"), seq == 4096) << seq;
    EXPECT_EQ(plans("tp=2,cp=1,pp=1,mbs=1"), seq != 4095) << seq;
  }
  const ParallelConfig p = parse_parallel("tp=4,cp=2");
  EXPECT_NO_THROW(check_sequence(p, 4096));
  EXPECT_THROW(check_sequence(p, 4092), ConfigError);  // 2,046 tokens a CP rank
  EXPECT_THROW(check_sequence(p, 4090), ConfigError);  // not a multiple of 2 x cp
}

TEST(Search, RankedBestFirstAndAllFit) {
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  SearchRequest req = request(32, 64);
  req.zero = 1;  // with ZeRO-3 allowed every layout fits here and nothing is pruned
  const SearchResult r = search_plans(s.ctx, req);
  ASSERT_GE(r.ranked.size(), 2u);
  for (size_t i = 1; i < r.ranked.size(); ++i) {
    EXPECT_LE(r.ranked[i - 1].score.time.iteration, r.ranked[i].score.time.iteration);
  }
  for (const Plan& p : r.ranked) {
    EXPECT_TRUE(p.score.memory.fits);
    EXPECT_GE(p.score.headroom.value(), 0.0);
    EXPECT_GT(p.score.mfu, 0.0);
    EXPECT_LT(p.score.mfu, 1.0);
    EXPECT_EQ(p.choice.parallel.world(), 32);
  }
  EXPECT_GT(r.stats.pruned_by_memory, 0);
  for (const Plan& p : r.ranked) EXPECT_EQ(p.choice.zero_stage, 1);
  // Layouts appear once each.
  for (size_t i = 1; i < r.ranked.size(); ++i) {
    EXPECT_NE(r.ranked[i - 1].choice.parallel.to_string(), r.ranked[i].choice.parallel.to_string());
  }
}

TEST(Search, TwoStagesListEachLayerSplitOnce) {
  // Mixtral's 32 layers over two stages: the even split 16 / 16 is the plain layout, never also
  // spelled pp_first=16,pp_last=16; each uneven split appears once, and up to two layers move
  // either way (a lighter last stage makes room for the output head).
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  const SearchRequest req = request(32, 64, "tp=2,pp=2,ep=8,etp=1,cp=1,vpp=1,mbs=1", 100);
  const SearchResult r = search_plans(s.ctx, req);
  ASSERT_GE(r.ranked.size(), 2u);
  std::vector<std::string> seen;
  std::set<std::pair<int64_t, int64_t>> splits;
  for (const Plan& p : r.ranked) {
    const ParallelConfig& q = p.choice.parallel;
    EXPECT_FALSE(q.pp_first && q.pp_last && *q.pp_first == *q.pp_last) << q.to_string();
    if (q.pp_first && q.pp_last) splits.insert({*q.pp_first, *q.pp_last});
    const std::string layout = q.to_string() + " " + p.choice.describe();
    EXPECT_EQ(std::count(seen.begin(), seen.end(), layout), 0) << layout;
    seen.push_back(layout);
  }
  EXPECT_EQ(splits,
            (std::set<std::pair<int64_t, int64_t>>{{14, 18}, {15, 17}, {17, 15}, {18, 14}}));
}

TEST(Search, DeterministicAcrossThreadCounts) {
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  SearchRequest one = request(32, 64);
  one.threads = 1;
  SearchRequest two = request(32, 64);
  two.threads = 2;
  const SearchResult a = search_plans(s.ctx, one);
  const SearchResult b = search_plans(s.ctx, two);
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_EQ(a.ranked[i].choice.describe(), b.ranked[i].choice.describe());
    EXPECT_EQ(a.ranked[i].score.time.iteration.value(), b.ranked[i].score.time.iteration.value());
  }
  EXPECT_EQ(a.stats.evaluated, b.stats.evaluated);
}

TEST(Search, TheTimeBoundCutsOnlyCandidatesThatCannotBeatIt) {
  // DeepSeekMoE-16B on 240 H800: DP crosses nodes, so the sync windows the bound skips are
  // priced. Each layout's best plan, under every ZeRO stage, overlap and gradient precision:
  // the DP syncs' exposure never subtracts, a bound just above the iteration keeps the
  // candidate exactly as estimate_time prices it, and one at the terms before the syncs cuts it.
  const Inputs s("deepseekmoe-16b.json", "megascale-h800-240.json");
  SearchRequest req = request(240, 240, "mbs=1", 40);
  const SearchResult r = search_plans(s.ctx, req);
  ASSERT_EQ(r.ranked.size(), 40u);
  EXPECT_GT(r.stats.bounded, r.stats.evaluated / 2);
  TimeContext scratch = s.ctx;
  int cut = 0, dp_priced = 0;
  for (const Plan& best : r.ranked) {
    for (int zero = 1; zero <= 3; ++zero) {
      for (bool overlap : {false, true}) {
        for (bool bf16 : {false, true}) {
          PlanChoice c = best.choice;
          c.zero_stage = zero;
          c.overlap = overlap;
          c.dp_bf16_compression = bf16;
          const TimeBreakdown full = estimate_time(s.ctx, c);
          SCOPED_TRACE(c.describe());
          EXPECT_GE(full.dp_comm.value(), 0.0);
          const auto kept = estimate_time_below(s.ctx, c, scratch, full.iteration * (1 + 1e-12));
          ASSERT_TRUE(kept.has_value());
          EXPECT_EQ(kept->iteration.value(), full.iteration.value());
          EXPECT_EQ(kept->dp_comm.value(), full.dp_comm.value());
          const Seconds before_syncs = full.iteration - full.dp_comm;
          if (full.dp_comm.value() > 0) ++dp_priced;
          if (!estimate_time_below(s.ctx, c, scratch, before_syncs * (1 - 1e-9))) ++cut;
          // The terms before the syncs, which the search reuses across gradient precisions: the
          // iteration less the syncs and the optimizer step, the same under either precision.
          Seconds unsynced, other;
          estimate_time_below(s.ctx, c, scratch, full.iteration * 2, &unsynced);
          EXPECT_NEAR(unsynced.value(), (before_syncs - full.optimizer).value(),
                      1e-9 * full.iteration.value());
          PlanChoice flipped = c;
          flipped.dp_bf16_compression = !bf16;
          estimate_time_below(s.ctx, flipped, scratch, full.iteration * 2, &other);
          EXPECT_EQ(other.value(), unsynced.value());
          // A bound the steady state alone reaches cuts the candidate before any schedule walk,
          // and reports those terms: a lower bound of the rest, which the search may reuse.
          Seconds steady;
          EXPECT_FALSE(estimate_time_below(s.ctx, c, scratch, Seconds(1e-9), &steady));
          EXPECT_GT(steady.value(), 0.0);
          EXPECT_LE(steady.value(), unsynced.value());
        }
      }
    }
  }
  EXPECT_EQ(cut, 40 * 12);
  EXPECT_GT(dp_priced, 40 * 6);
  // At one GPU count the cost objective ranks as throughput does, and its bound (in seconds,
  // not its GPU-seconds per token) cuts as much; memory bounds only its ties.
  req.objective = Objective::kCost;
  const SearchResult cost = search_plans(s.ctx, req);
  ASSERT_EQ(cost.ranked.size(), r.ranked.size());
  for (size_t i = 0; i < r.ranked.size(); ++i)
    EXPECT_EQ(cost.ranked[i].choice.describe(), r.ranked[i].choice.describe());
  EXPECT_EQ(cost.stats.bounded, r.stats.bounded);
  req.objective = Objective::kMemory;
  const SearchResult memory = search_plans(s.ctx, req);
  EXPECT_GT(memory.stats.bounded, 0);
  // By peak, but for those within kMemoryTie of the least, which go first and by time.
  Bytes least = memory.ranked.front().score.peak_bytes;
  for (const Plan& p : memory.ranked) least = std::min(least, p.score.peak_bytes);
  const Bytes lean = least * (1.0 + kMemoryTie);
  for (size_t i = 1; i < memory.ranked.size(); ++i) {
    const Plan &a = memory.ranked[i - 1], &b = memory.ranked[i];
    if (b.score.peak_bytes <= lean) {
      EXPECT_LE(a.score.time.iteration, b.score.time.iteration);
    } else {
      EXPECT_LE(a.score.peak_bytes, b.score.peak_bytes);
    }
  }
}

TEST(Search, NothingFitsNamesTheClosestCandidate) {
  // Mixtral-8x7B needs 46.7 B x 18 bytes of weights and optimizer state: more than 8 x 80 GB.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const SearchResult r = search_plans(s.ctx, request(8, 64));
  EXPECT_TRUE(r.ranked.empty());
  ASSERT_TRUE(r.closest.has_value());
  EXPECT_GT(r.closest->needed, r.closest->capacity);
  EXPECT_NE(r.closest->binding.find("static"), std::string::npos);
}

TEST(Search, ImpossibleFixedSizesAreAConfigError) {
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  EXPECT_THROW(search_plans(s.ctx, request(8, 64, "tp=3")), ConfigError);
  EXPECT_THROW(search_plans(s.ctx, request(8, 64, "", 0)), ConfigError);  // no K-th plan to beat
  // Expert sizes on a dense model name the model rather than a generic "does not divide".
  const Inputs dense("llama-2-7b.json", "h100-sxm-8.json");
  try {
    search_plans(dense.ctx, request(8, 64, "ep=2"));
    ADD_FAILURE() << "ep=2 on a dense model searched";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fixed ep=2, but Llama-2-7B has no routed experts"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(search_plans(dense.ctx, request(8, 64, "ep=1,etp=1")).ranked.empty());
  // A count no layout takes names the largest below that does, and that one plans.
  auto suggests = [](const Inputs& in, int64_t gpus, int64_t gbs, int64_t fewer) {
    try {
      search_plans(in.ctx, request(gpus, gbs));
      ADD_FAILURE() << gpus << " GPUs at batch " << gbs << " searched";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("do not divide); {} GPUs divide", fewer)),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(search_plans(in.ctx, request(fewer, gbs)).ranked.empty());
  };
  // 240 GPUs and a batch of 64: a factor 15 no layout takes; 224 does (pp = 7).
  suggests(Inputs("mixtral-8x7b.json", "megascale-h800-240.json"), 240, 64, 224);
  // Far below: GPT-1.7B at a batch of 8 cannot use 16,384 GPUs nor the 16 node counts under
  // it; halving finds 8,192.
  suggests(Inputs("gpt-1.7b.json", "h800-16384.json", 2048), 16384, 8, 8192);
}

TEST(TimeModel, OneFOneBIterationIsMicrobatchesPlusStagesMinusOne) {
  // (m - 1) t_max + the sum of the stages' t = t_f + t_b, plus the terms outside the pipeline:
  // (m + p - 1) t with equal stages. Mixtral's last stage also runs the output head, so the
  // fill and drain are shorter than (p - 1) t_max by what the lighter stages save (with a
  // single micro-batch a pipeline is just its stages in a row).
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=8,pp=4,ep=8,etp=1,cp=1,vpp=1,mbs=1,gbs=64"));
  const TimeBreakdown t = estimate_time(s.ctx, c);
  Seconds per_mb, sum;
  for (int64_t st = 0; st < 4; ++st) {
    const StageTimes x = stage_times(s.ctx, c, st);
    per_mb = std::max(per_mb, x.forward + x.backward);
    sum += x.forward + x.backward;
  }
  EXPECT_LT(sum.value(), 4 * per_mb.value());
  const double m = static_cast<double>(t.microbatches);
  EXPECT_EQ(t.microbatches, 64 / (1 * *c.parallel.dp));
  EXPECT_NEAR((t.iteration - t.dp_comm - t.optimizer - t.pp_comm).value(),
              ((m - 1) * per_mb + sum).value(), 1e-9);
  // Interleaved with v = 2: (m + (p - 1)/v)(t_f + t_b).
  c.parallel.vpp = 2;
  const TimeBreakdown v = estimate_time(s.ctx, c);
  EXPECT_NEAR((v.iteration - v.dp_comm - v.optimizer - v.pp_comm).value(),
              ((m + 3.0 / 2) * per_mb).value(), 1e-9);
}

TEST(TimeModel, GatedDeltaNetLayersArePricedAsTheirOwnKind) {
  // Qwen3-Next cut to 8 layers, the first 4 linear and the last 4 softmax, over 2 stages: each
  // stage is priced by its own layers (a cache keyed on MoE-or-dense alone gave both stages the
  // first layer's linear price), and a linear layer's core attention is its recurrence.
  ModelSpec m = io::load_model(root("models/hf/qwen3-next-80b-a3b.config.json"));
  m.num_layers = 8;
  m.moe_layer.assign(8, true);
  m.linear_layer = {true, true, true, true, false, false, false, false};
  const ClusterSpec cluster = io::load_cluster(root("topologies/h100-sxm-8.json"));
  const TimeContext ctx = make_time_context(m, cluster, efficiencies(), RoutingSkew{}, 32768);
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=1,pp=2,ep=4,etp=1,cp=1,vpp=1,mbs=1,dp=4,gbs=8"));
  auto compute_of = [&](int64_t first) {
    Seconds sum;
    for (int64_t l = first; l < first + 4; ++l) {
      for (const LayerOp& op : layer_forward_ops(ctx, c, ctx.params.layers[l], true, 1.0, 1))
        if (op.kind == OpKind::kCompute) sum += op.time;
    }
    return sum;
  };
  // Forward and twice for backward; the first stage also builds the embedding's dense gradient,
  // the last runs the output head and the loss.
  EXPECT_NEAR(stage_times(ctx, c, 0).compute.value(),
              (3.0 * compute_of(0) + embedding_gradient_op(ctx, c).time).value(), 1e-12);
  const LossPasses loss = cross_entropy_passes(ctx, c);
  EXPECT_NEAR(stage_times(ctx, c, 1).compute.value(),
              (3.0 * (compute_of(4) + output_head_time(ctx, c)) + loss.forward.time + loss.backward)
                  .value(),
              1e-12);
  EXPECT_LT(compute_of(0).value(), compute_of(4).value());
  EXPECT_LT(core_attention_time(ctx, c, true).value(),
            0.1 * core_attention_time(ctx, c, false).value());
}

TEST(TimeModel, GatedDeltaNetContextParallelHandsTheStateRankAfterRank) {
  // Qwen3-Next at 128K tokens over CP = 4 (TP = 2): a softmax layer passes K and V round the
  // ring, a Gated DeltaNet layer has none to pass; its ranks scan their state one after another
  // (Megatron-Core's gdn_recurrent CP), three more scans than one rank's and three hand-offs of
  // 16 heads x 128 x 128 FP32 states. The scan is 2 d_k d_v of the 3 d_k d_v + 64 (3 d_k + 2
  // d_v) + 64^2 / 3 multiply-adds a token and head: 32,768 / 91,477 = 0.358.
  const ModelSpec m = io::load_model(root("models/hf/qwen3-next-80b-a3b.config.json"));
  EXPECT_NEAR(linear_attention_scan_share(m), 32768.0 / (49152.0 + 40960.0 + 4096.0 / 3.0), 1e-12);
  const ClusterSpec cluster = io::load_cluster(root("topologies/h100-sxm-8.json"));
  const TimeContext ctx = make_time_context(m, cluster, efficiencies(), RoutingSkew{}, 131072);
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=2,pp=1,ep=1,etp=1,cp=4,vpp=1,mbs=1,dp=1,gbs=1"));
  auto op_time = [&](bool linear, const std::string& name) {
    const size_t layer = static_cast<size_t>(
        std::find(m.linear_layer.begin(), m.linear_layer.end(), linear) - m.linear_layer.begin());
    for (const LayerOp& op : layer_forward_ops(ctx, c, ctx.params.layers[layer], true, 1.0, 1))
      if (op.name == name) return op.time.value();
    return -1.0;
  };
  const char* kHandOff = "linear attention CP state hand-off";
  const char* kRing = "context-parallel K/V ring";
  EXPECT_EQ(op_time(true, kRing), -1.0);
  EXPECT_EQ(op_time(false, kHandOff), -1.0);  // its ring hides behind its 128K core attention
  const Bytes state(16.0 * 128 * 128 * 4);
  const Seconds hand_off = state / ctx.links.bandwidth(8) + ctx.links.latency(8);
  EXPECT_NEAR(
      op_time(true, kHandOff),
      3.0 * (core_attention_time(ctx, c, true) * linear_attention_scan_share(m) + hand_off).value(),
      1e-12);
}

TEST(TimeModel, OneFlowOnAFreeLinkIsLatencyPlusBytesOverBandwidth) {
  // A two-rank ring moves half the gathered buffer: latency + (S/2) / (B x eff).
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const Bytes total(2e9);
  const double eff = s.ctx.eff.allgather_intra.at(Bytes(1e9));
  EXPECT_NEAR(ring_time(s.ctx, total, 2, 2).value(),
              (s.cluster.intra_node_latency + Bytes(1e9) / (gigabytes_per_sec(450) * eff)).value(),
              1e-12);
  EXPECT_EQ(ring_time(s.ctx, total, 1, 1).value(), 0.0);
}

TEST(TimeModel, CollectiveCurvesAreReadAtTheNcclTestsSize) {
  // nccl-tests prints an all-gather's size as the gathered total; a 16 MiB all-gather over 8
  // NVLink ranks sends 7 x 2 MiB at the curve's 16 MiB efficiency, not its 2 MiB one.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const Bytes total(16.0 * 1024 * 1024);
  const double eff = s.ctx.eff.allgather_intra.at(total);
  EXPECT_GT(eff, s.ctx.eff.allgather_intra.at(total / 8.0) * 1.2);
  EXPECT_NEAR(
      ring_time(s.ctx, total, 8, 8).value(),
      (s.cluster.intra_node_latency * 7.0 + total * (7.0 / 8.0) / (gigabytes_per_sec(450) * eff))
          .value(),
      1e-12);
}

TEST(TimeModel, GroupedGemmFillsTheGpuButKeepsEachExpertsShape) {
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const GemmRate peak = linear_gemm_rate(s.ctx, Precision::kBf16);
  // 64 experts of 1024 x 4096 x 1024 in one grouped launch run at the 64-GEMM size's
  // efficiency, faster than 64 launches at one GEMM's (both compute-bound shapes).
  const double f = 2.0 * 1024 * 4096 * 1024;
  const Seconds one_by_one = gemm_time(s.ctx, peak, 1024, 4096, 1024, 64);
  const Seconds grouped = gemm_time(s.ctx, peak, 1024, 4096, 1024, 64, 64);
  EXPECT_NEAR(one_by_one / grouped, s.ctx.eff.gemm.at(64 * f) / s.ctx.eff.gemm.at(f), 1e-9);
  EXPECT_GT(one_by_one / grouped, 1.1);
  // A shallow K (an expert's down projection cut 8 ways) costs K / (K + 128) of the depth the
  // curve was measured at: the same FLOPs take longer at K = 256 than at K = 8192.
  const Seconds shallow = gemm_time(s.ctx, peak, 4096, 256, 4096);
  const Seconds deep = gemm_time(s.ctx, peak, 512, 8192, 1024);
  EXPECT_NEAR(shallow / deep, (8192.0 / 8320.0) / (256.0 / 384.0), 1e-9);
}

TEST(TimeModel, TilesCountWholeRowsNotRoundingNoise) {
  // A partial 128-row tile costs a whole one, but 512 rows that come out of summed routing
  // proportions as 512.00000000000006 are four tiles, not five (the simulator priced GLM-4.5's
  // balanced experts 25 % above the planner by it); 513 rows are five.
  const double rows = std::nextafter(512.0, 1024.0);
  EXPECT_NEAR(gemm_shape_factor(rows, 5120, 3072), gemm_shape_factor(512, 5120, 3072), 1e-12);
  EXPECT_NEAR(gemm_shape_factor(513, 5120, 3072) / gemm_shape_factor(512, 5120, 3072),
              513.0 / 640.0, 1e-12);
}

TEST(TimeModel, ExpertTensorParallelismPermutesEveryGatheredToken) {
  // With TP experts every rank sorts and scatters the whole gathered micro-batch at full width;
  // with EP it permutes only its own tokens. The memory-bound term shows the difference.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const char* kMemoryBound = "norms, residuals, activations";
  const Seconds tp = forward_ops(s, "tp=8,etp=8,ep=1,dp=1,pp=1,mbs=1,gbs=8", AttentionMode::kTensor)
                         .at(kMemoryBound);
  const Seconds ep =
      forward_ops(s, "tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=8", AttentionMode::kUlysses)
          .at(kMemoryBound);
  // Per token: 20h + 8kh x etp + 6 k g_e bytes (h 4096, k 2, g_e 14336).
  const double h = 4096, k = 2, g = 14336;
  EXPECT_NEAR(tp / ep, (20 * h + 8 * k * h * 8 + 6 * k * g) / (20 * h + 8 * k * h + 6 * k * g),
              1e-9);
  // Those are bytes, BF16 included: 512 tokens per GPU move 512 x that at 70 % of HBM
  // bandwidth (they were once multiplied by 2 bytes per element again).
  const double bytes = 512 * (20 * h + 8 * k * h + 6 * k * g);
  EXPECT_NEAR(ep.value(), bytes / (s.ctx.links.hbm.value() * 0.7), 1e-12);
}

TEST(TimeModel, OverlappedDispatchHoldsItsSmsBesideTheCompute) {
  // DeepEP holds 20 of an H100's 132 SMs while it runs: compute W beside communication C goes
  // at 112/132 for C, so W + (20/132) C, up to W / (1 - 20/132) when C outlasts it. Nothing
  // without overlap, without EP traffic, or where the cluster file gives no SM count.
  Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=1,etp=1,ep=8,dp=8,pp=1,mbs=1,gbs=8"));
  c.dispatcher = megascale::Dispatcher::kDeepEp;
  c.overlap = true;
  const double share = 20.0 / 132.0;
  EXPECT_DOUBLE_EQ(overlap_compute_stretch(s.ctx, c, Seconds(10), Seconds(4)), 1 + share * 0.4);
  EXPECT_DOUBLE_EQ(overlap_compute_stretch(s.ctx, c, Seconds(10), Seconds(100)), 1 / (1 - share));
  c.dispatcher = megascale::Dispatcher::kAllToAll;  // NCCL's 16
  EXPECT_DOUBLE_EQ(overlap_compute_stretch(s.ctx, c, Seconds(10), Seconds(4)),
                   1 + 16.0 / 132.0 * 0.4);
  EXPECT_DOUBLE_EQ(overlap_compute_stretch(s.ctx, c, Seconds(10), Seconds(0)), 1.0);
  c.overlap = false;
  EXPECT_DOUBLE_EQ(overlap_compute_stretch(s.ctx, c, Seconds(10), Seconds(4)), 1.0);
  c.overlap = true;
  s.ctx.gpu.sms = 0;
  EXPECT_DOUBLE_EQ(overlap_compute_stretch(s.ctx, c, Seconds(10), Seconds(4)), 1.0);
}

TEST(TimeModel, LatentAttentionGathersItsLatentsUnderTensorParallelism) {
  // Megatron-Core's MLA runs its down projections on each rank's sequence shard and gathers
  // q's LoRA rank (1,536) and the kv latent with its rope key (512 + 64) over TP, not the 7,168
  // of the hidden state; the output projection reduce-scatters h. Grouped-query attention
  // gathers and reduce-scatters h.
  const Inputs v3("deepseek-v3.json", "h100-sxm-8.json");
  const char* kLayout = "tp=2,etp=1,ep=4,dp=4,pp=1,mbs=1,gbs=8";
  const char* kTp = "attention TP all-gather + reduce-scatter";
  const Bytes hidden(4096.0 * 7168 * 2);
  EXPECT_NEAR(
      forward_ops(v3, kLayout).at(kTp).value(),
      (ring_time(v3.ctx, hidden * (2112.0 / 7168), 2, 2) + ring_time(v3.ctx, hidden, 2, 2)).value(),
      1e-12);
  const Inputs mixtral("mixtral-8x7b.json", "h100-sxm-8.json");
  EXPECT_NEAR(forward_ops(mixtral, kLayout).at(kTp).value(),
              2 * ring_time(mixtral.ctx, Bytes(4096.0 * 4096 * 2), 2, 2).value(), 1e-12);
}

TEST(TimeModel, SparseAttentionIndexerRunsWholeOnEveryTpRank) {
  // DeepSeek-V3.2's indexer runs duplicated over TP on the gathered sequence (Megatron-Core's
  // parallel_mode 'duplicated'): TP 2 halves the core attention's other FLOPs, not its
  // indexer's. At a constant attention efficiency the times follow the FLOPs.
  Inputs v32("hf/deepseek-v3.2.config.json", "h100-1024.json");
  v32.ctx.eff.attention_core = EfficiencyCurve::constant(0.5);
  auto core = [&](const char* layout, AttentionMode mode = AttentionMode::kTensor) {
    PlanChoice c;
    c.parallel = resolve(parse_parallel(layout));
    c.attention = mode;
    return core_attention_time(v32.ctx, c, false);
  };
  const double indexer = v32.ctx.flops.forward_indexer.value();
  const double rest = v32.ctx.flops.forward_attention.value() - indexer;
  ASSERT_GT(indexer, 0.0);
  EXPECT_NEAR(core("tp=2,pp=8,ep=64,etp=1,dp=64,mbs=1,gbs=8192") /
                  core("tp=1,pp=8,ep=64,etp=1,dp=128,mbs=1,gbs=8192"),
              (rest / 2 + indexer) / (rest + indexer), 1e-9);
  // Ulysses SP gives each rank whole sequences of half the heads: the indexer splits too.
  EXPECT_NEAR(core("tp=2,pp=8,ep=64,etp=1,dp=64,mbs=1,gbs=8192", AttentionMode::kUlysses) /
                  core("tp=1,pp=8,ep=64,etp=1,dp=128,mbs=1,gbs=8192"),
              0.5, 1e-9);
  // Its weights stay whole on every rank with MLA's down projections.
  EXPECT_NEAR(latent_duplicated_params(v32.model) - indexer_params(v32.model),
              latent_duplicated_params(io::load_model(root("models/hf/deepseek-v3.config.json"))),
              1e-6);
}

TEST(TimeModel, UnfusedPermutationMovesEveryRoutedRowTwice) {
  // Without Megatron-Core's --moe-permute-fusion the dispatcher's index_select, index_copy,
  // probability scaling and top-k sum move 16kh bytes per token instead of 8kh; nothing else
  // changes, and the Megatron arguments drop the flag.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const char* kLayout = "tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=8";
  const auto fused = forward_ops(s, kLayout, AttentionMode::kUlysses, Precision::kBf16, true);
  const auto unfused = forward_ops(s, kLayout, AttentionMode::kUlysses, Precision::kBf16, false);
  const char* kMemoryBound = "norms, residuals, activations";
  const double h = 4096, k = 2;
  EXPECT_NEAR((unfused.at(kMemoryBound) - fused.at(kMemoryBound)).value(),
              512 * 8 * k * h / (s.ctx.links.hbm.value() * 0.7), 1e-12);
  for (const auto& [name, time] : fused) {
    if (name != kMemoryBound) {
      EXPECT_EQ(unfused.at(name).value(), time.value()) << name;
    }
  }
  Plan p;
  p.choice.parallel = resolve(parse_parallel(kLayout));
  auto has_flag = [&] {
    const auto args = megatron_arguments(p, s.model);
    return std::find(args.begin(), args.end(), "--moe-permute-fusion") != args.end();
  };
  EXPECT_TRUE(has_flag());
  p.choice.permute_fusion = false;
  EXPECT_FALSE(has_flag());
  EXPECT_NE(p.choice.describe().find("unfused-permute"), std::string::npos);
  // The search carries the request's setting into every plan.
  const Inputs small("deepseekmoe-16b.json", "h100-sxm-8.json");
  SearchRequest req = request(8, 64, "ep=8");
  req.permute_fusion = false;
  const SearchResult r = search_plans(small.ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  for (const Plan& plan : r.ranked) EXPECT_FALSE(plan.choice.permute_fusion);
}

TEST(TimeModel, EachFurtherFcdaRoundPaysItsLatenciesAndTheRoundOverhead) {
  // MemFine FCDA in c chunks: dispatch + combine pay two collective latencies and the
  // dispatcher's round overhead (a calibration constant) once per chunk after the first; the
  // experts' GEMMs run c times smaller. Nothing else changes.
  Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=1,ep=8,dp=8,pp=1,mbs=1,gbs=8"));
  auto ops = [&](int64_t chunks) {
    std::map<std::string, Seconds> by_name;
    for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], true, 1.0, chunks))
      by_name[op.name] = op.time;
    return by_name;
  };
  const Seconds latency = s.ctx.links.latency(8);
  for (const Seconds round : {Seconds(300e-6), Seconds(2.2e-3)}) {
    s.ctx.eff.dispatch_round_overhead = round;
    const auto one = ops(1), four = ops(4);
    const Seconds pair =
        four.at("dispatch") + four.at("combine") - one.at("dispatch") - one.at("combine");
    EXPECT_NEAR(pair.value(), 3.0 * (2.0 * latency + round).value(), 1e-12);
    EXPECT_GT(four.at("routed experts").value(), one.at("routed experts").value());
    for (const auto& [name, time] : one) {
      if (name != "dispatch" && name != "combine" && name != "routed experts") {
        EXPECT_EQ(four.at(name).value(), time.value()) << name;
      }
    }
  }
}

TEST(Anchor, OneMeasuredIterationSetsOneScaleForEveryEfficiency) {
  // A run measured at 1.6x the prediction: the fit finds the efficiency scale that predicts it,
  // and the same scale moves other layouts. Scaling compute alone needs a smaller factor, as
  // communication keeps its curves.
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=8,ep=8,etp=1,dp=2,pp=1,mbs=1,gbs=64"));
  c.attention = AttentionMode::kUlysses;
  const Seconds predicted = estimate_time(s.ctx, c).iteration;
  const AnchorFit all = fit_anchor(s.ctx, c, predicted * 1.6, true);
  ASSERT_TRUE(all.converged);
  EXPECT_NEAR(all.after / (predicted * 1.6), 1.0, 1e-3);
  EXPECT_EQ(all.before.value(), predicted.value());
  EXPECT_LT(all.scale, 1.0 / 1.5);  // latencies do not scale, so f < 1 / 1.6 is not exact
  EXPECT_GT(all.scale, 1.0 / 1.7);
  const AnchorFit compute = fit_anchor(s.ctx, c, predicted * 1.6, false);
  ASSERT_TRUE(compute.converged);
  EXPECT_LT(compute.scale, all.scale);
  // The scaled efficiencies: every curve point and scalar times f, capped.
  const Efficiencies e = scale_efficiencies(s.ctx.eff, 0.5, true);
  EXPECT_DOUBLE_EQ(e.gemm.points().back().efficiency,
                   0.5 * s.ctx.eff.gemm.points().back().efficiency);
  EXPECT_DOUBLE_EQ(e.gemm_fp8.at(1e11), 0.5 * s.ctx.eff.gemm_fp8.at(1e11));
  EXPECT_DOUBLE_EQ(e.gemm_fp8_block.at(1e11), 0.5 * s.ctx.eff.gemm_fp8_block.at(1e11));
  EXPECT_DOUBLE_EQ(e.alltoall_inter.at(Bytes(1e9)), 0.5 * s.ctx.eff.alltoall_inter.at(Bytes(1e9)));
  EXPECT_DOUBLE_EQ(e.attention_core.at(1e11), 0.5 * s.ctx.eff.attention_core.at(1e11));
  EXPECT_DOUBLE_EQ(scale_efficiencies(s.ctx.eff, 0.5, false).alltoall_inter.at(Bytes(1e9)),
                   s.ctx.eff.alltoall_inter.at(Bytes(1e9)));
  EXPECT_DOUBLE_EQ(scale_efficiencies(s.ctx.eff, 3.0, true).memory_bound, 1.0);
  // What anchor writes reads back as the scaled efficiencies.
  const Efficiencies back = efficiencies(curves_of(e), constants_of(e));
  EXPECT_DOUBLE_EQ(back.gemm.at(1e10), e.gemm.at(1e10));
  EXPECT_DOUBLE_EQ(back.d2d_copy.at(Bytes(1e8)), e.d2d_copy.at(Bytes(1e8)));
  EXPECT_DOUBLE_EQ(back.allgather_intra.at(Bytes(1e7)), e.allgather_intra.at(Bytes(1e7)));
  EXPECT_DOUBLE_EQ(back.attention_core.at(3e10), e.attention_core.at(3e10));
  EXPECT_DOUBLE_EQ(back.memory_bound, e.memory_bound);
  EXPECT_NEAR(back.dispatch_round_overhead.value(), e.dispatch_round_overhead.value(), 1e-15);
  EXPECT_DOUBLE_EQ(back.pcie_h2d.at(Bytes(1e8)), e.pcie_h2d.at(Bytes(1e8)));
  EXPECT_DOUBLE_EQ(e.pcie_h2d.at(Bytes(1e8)), 0.5 * s.ctx.eff.pcie_h2d.at(Bytes(1e8)));
  EXPECT_DOUBLE_EQ(e.gemm_mxfp8.at(1e11), 0.5 * s.ctx.eff.gemm_mxfp8.at(1e11));
  EXPECT_EQ(curves_of(e).size(), 11u);
  // A faster measurement than the scale's cap allows is reported, not met.
  EXPECT_FALSE(fit_anchor(s.ctx, c, predicted * 0.01, true).converged);
  EXPECT_THROW(fit_anchor(s.ctx, c, Seconds(0), true), ConfigError);
}

TEST(TimeModel, Fp8MovesHalfTheBytesAndRunsLinearLayersAtTheFp8Peak) {
  // MegaScale-MoE Sec. 5: FP8 TP collectives; DeepSeek-V3: FP8 dispatch, BF16 combine.
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  auto ops = [&](const char* layout, Precision precision) {
    return forward_ops(s, layout, AttentionMode::kTensor, precision);
  };
  const char* tp = "tp=8,etp=8,ep=1,dp=1,pp=1,mbs=1,gbs=8";
  const auto bf16 = ops(tp, Precision::kBf16), fp8 = ops(tp, Precision::kFp8);
  const Bytes sequence(4096.0 * 4096 * 2);
  EXPECT_NEAR(fp8.at("attention TP all-gather + reduce-scatter").value(),
              (ring_time(s.ctx, sequence * 0.5, 8, 8) * 2.0).value(), 1e-12);
  EXPECT_NEAR(bf16.at("attention TP all-gather + reduce-scatter").value(),
              (ring_time(s.ctx, sequence, 8, 8) * 2.0).value(), 1e-12);
  EXPECT_LT(fp8.at("dispatch"), bf16.at("dispatch"));
  EXPECT_EQ(fp8.at("dispatch"), fp8.at("combine"));  // TP experts: both ways in FP8
  EXPECT_LT(fp8.at("attention projections"), bf16.at("attention projections"));
  EXPECT_EQ(fp8.at("core attention"), bf16.at("core attention"));  // FlashAttention in BF16
  const auto ep8 = ops("tp=1,etp=1,ep=8,dp=8,pp=1,mbs=1,gbs=8", Precision::kFp8);
  EXPECT_LT(ep8.at("dispatch"), ep8.at("combine"));  // FP8 out, BF16 back
  // FP8 weights: one byte a parameter less than BF16's two in static memory (ZeRO-1).
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=8,etp=8,ep=1,dp=1,pp=1,mbs=1,gbs=8"));
  c.seq_len = 4096;
  const Bytes cap = s.cluster.node.gpu.hbm_capacity;
  const Bytes b = estimate_memory(s.model, s.ctx.params, c.parallel,
                                  memory_request(s.ctx, c, cap, 1.0, std::nullopt))
                      .stages[0]
                      .static_bytes;
  c.precision = Precision::kFp8;
  const Bytes f = estimate_memory(s.model, s.ctx.params, c.parallel,
                                  memory_request(s.ctx, c, cap, 1.0, std::nullopt))
                      .stages[0]
                      .static_bytes;
  EXPECT_NEAR((b - f).value() / b.value(), 1.0 / 18.0, 1e-9);  // 2 + 4 + 12 -> 1 + 4 + 12
}

TEST(TimeModel, MtpModulesRunOnTheLastStageAfterTheHead) {
  // DeepSeek-V3's multi-token-prediction module (Megatron --mtp-num-layers 1): a layer priced as
  // the model's last, the [2h -> h] projection and a second pass through the output head, on the
  // last stage alone, with its weights (and the embedding it reads) and activations there.
  const Inputs with("hf/deepseek-v3.config.json", "h100-1024.json");
  ASSERT_EQ(with.model.mtp_layers, 1);
  ModelSpec plain = with.model;
  plain.mtp_layers = 0;
  const TimeContext without = make_time_context(plain, with.cluster, efficiencies(), {}, 4096);
  PlanChoice c;
  c.parallel =
      resolve(parse_parallel("tp=2,pp=8,ep=64,etp=1,dp=64,mbs=1,gbs=8192,pp_first=8,pp_last=5"));
  const StageTimes mtp = mtp_stage_times(with.ctx, c);
  EXPECT_EQ(mtp_stage_times(without, c).forward.value(), 0.0);
  const StageTimes a = stage_times(with.ctx, c, 7), b = stage_times(without, c, 7);
  EXPECT_NEAR((a.forward - b.forward).value(), mtp.forward.value(), 1e-12);
  EXPECT_NEAR((a.backward - b.backward).value(), mtp.backward.value(), 1e-12);
  // One of the last stage's five MoE layers, plus the projection, the head pass and its loss.
  const Seconds loss = cross_entropy_passes(without, c).forward.time;
  const Seconds layer = layer_pass_times(without, c, plain.num_layers - 1).forward;
  const Seconds head = output_head_time(with.ctx, c);
  EXPECT_NEAR((mtp.forward - mtp_projection_time(with.ctx, c) - head - loss).value(), layer.value(),
              1e-9);
  // The stage's forward holds the five layers, the head and its loss, and what the sends
  // beside its passes slow them by.
  EXPECT_GT(b.send_stretch.value(), 0.0);
  EXPECT_LE(b.forward - output_head_time(without, c) - loss, layer * 5.0 + b.send_stretch);
  EXPECT_GT(mtp_projection_time(with.ctx, c).value(), 0.0);
  EXPECT_EQ(stage_times(with.ctx, c, 3).forward, stage_times(without, c, 3).forward);

  const Bytes cap = with.cluster.node.gpu.hbm_capacity;
  auto memory = [&](const TimeContext& ctx) {
    return estimate_memory(*ctx.model, ctx.params, c.parallel,
                           memory_request(ctx, c, cap, 1.0, std::nullopt));
  };
  const MemoryReport mw = memory(with.ctx), mo = memory(without);
  EXPECT_GT(mw.stages[7].static_bytes, mo.stages[7].static_bytes);
  EXPECT_GT(mw.stages[7].activation_bytes, mo.stages[7].activation_bytes);
  EXPECT_EQ(mw.stages[7].num_moe_layers, 6);
  EXPECT_EQ(mw.stages[3].total_bytes, mo.stages[3].total_bytes);

  auto args = [&](const ModelSpec& m) {
    const std::vector<std::string> a = megatron_arguments(Plan{c, {}}, m);
    return std::find(a.begin(), a.end(), "--mtp-num-layers 1") != a.end();
  };
  EXPECT_TRUE(args(with.model));
  EXPECT_FALSE(args(plain));

  // The search offers a last stage lighter by the module's two layers' worth, and takes it.
  SearchRequest req = request(1024, 8192, "tp=2,pp=8,ep=64,cp=1,mbs=1,vpp=1");
  req.precision = Precision::kFp8;
  req.threads = 1;
  const SearchResult r = search_plans(with.ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_EQ(r.ranked.front().choice.parallel.pp_last.value_or(0), 5);
}

TEST(TimeModel, EachFp8RecipeRunsItsLinearGemmsOnItsOwnCurve) {
  // Measured on the lent H100 and H200 (cuBLASLt, calibrate/data): FP8 with one scale per
  // tensor ran an 8192^3 GEMM 1.84x as fast as BF16, with 128-blocks 1.69x, not the peaks' 2x.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const double big = 2.0 * 8192 * 8192 * 8192;
  auto seconds = [&](Precision p, Fp8Recipe r) {
    return gemm_time(s.ctx, linear_gemm_rate(s.ctx, p, r), 8192, 8192, 8192).value();
  };
  const double bf16 = seconds(Precision::kBf16, Fp8Recipe::kBlockwise);  // no recipe in BF16
  EXPECT_NEAR(bf16 / seconds(Precision::kFp8, Fp8Recipe::kDelayed), 1.84, 0.03);
  EXPECT_NEAR(bf16 / seconds(Precision::kFp8, Fp8Recipe::kBlockwise), 1.69, 0.03);
  EXPECT_EQ(seconds(Precision::kFp8, Fp8Recipe::kTensorwise),
            seconds(Precision::kFp8, Fp8Recipe::kDelayed));
  // MXFP8 on its own curve: the one published Blackwell figure, Megatron-Core's DeepSeek-V3
  // GB200 guide's MXFP8 grouped GEMM, 2,672 TFLOP/s at K 7,168 and N 2,048 (8 local experts of
  // 4,096 tokens under EP 32 at micro-batch 1), on GB200's 5 PFLOP/s.
  EXPECT_GT(seconds(Precision::kFp8, Fp8Recipe::kMxfp8),
            seconds(Precision::kFp8, Fp8Recipe::kDelayed) * 1.3);
  const Inputs gb200("mixtral-8x7b.json", "gb200-nvl72-4x64.json");
  const Seconds grouped =
      gemm_time(gb200.ctx, linear_gemm_rate(gb200.ctx, Precision::kFp8, Fp8Recipe::kMxfp8), 4096,
                7168, 2048, 8, 8);
  EXPECT_NEAR(8 * 2.0 * 4096 * 7168 * 2048 / grouped.value() / 1e12, 2672, 3);
  EXPECT_LT(s.ctx.eff.gemm_fp8_block.at(big), s.ctx.eff.gemm_fp8.at(big));
  EXPECT_LT(s.ctx.eff.gemm_fp8.at(big), s.ctx.eff.gemm.at(big));

  // In a layer: the recipe moves the linear layers alone; core attention stays BF16.
  auto ops = [&](Fp8Recipe r) {
    PlanChoice c;
    c.parallel = resolve(parse_parallel("tp=1,etp=1,ep=8,dp=8,pp=1,mbs=1,gbs=8"));
    c.precision = Precision::kFp8;
    c.fp8_recipe = r;
    std::map<std::string, Seconds> out;
    for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], true, 1.0, 1))
      out[op.name] = op.time;
    return out;
  };
  const auto delayed = ops(Fp8Recipe::kDelayed), block = ops(Fp8Recipe::kBlockwise);
  EXPECT_GT(block.at("attention projections"), delayed.at("attention projections") * 1.05);
  EXPECT_GT(block.at("routed experts"), delayed.at("routed experts") * 1.05);
  EXPECT_EQ(block.at("core attention"), delayed.at("core attention"));

  // Multi-latent attention at attention_latent of the curve; other attention at the curve.
  const Inputs v3("hf/deepseek-v3.config.json", "h100-1024.json");
  PlanChoice d;
  d.parallel = resolve(parse_parallel("tp=2,pp=8,ep=64,etp=1,dp=64,mbs=1,gbs=8192"));
  TimeContext whole = v3.ctx;
  whole.eff.attention_latent = 1.0;
  EXPECT_NEAR(core_attention_time(v3.ctx, d, false) / core_attention_time(whole, d, false),
              1.0 / 0.88, 1e-9);
  TimeContext mixtral = s.ctx;
  mixtral.eff.attention_latent = 0.5;
  PlanChoice q;
  q.parallel = resolve(parse_parallel("tp=1,etp=1,ep=8,dp=8,pp=1,mbs=1,gbs=8"));
  EXPECT_EQ(core_attention_time(mixtral, q, false), core_attention_time(s.ctx, q, false));
  EXPECT_EQ(block.at("dispatch"), delayed.at("dispatch"));
}

TEST(TimeModel, IntraOperatorOverlapFusesCommunicationIntoGemms) {
  // MegaScale-MoE Sec. 4.2 on SP+EP: the all-to-alls ride inside the projections and the
  // grouped GEMM, no communication op is left, and each fused op lies between the slower of its
  // parts and their sum.
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  const char* layout = "tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=8";
  const auto apart = forward_ops(s, layout, AttentionMode::kUlysses);
  PlanChoice c;
  c.parallel = resolve(parse_parallel(layout));
  c.attention = AttentionMode::kUlysses;
  c.intra_overlap = true;
  std::map<std::string, Seconds> together;
  for (const LayerOp& op : layer_forward_ops(s.ctx, c, s.ctx.params.layers[0], true, 1.0, 1)) {
    EXPECT_EQ(op.kind, OpKind::kCompute) << op.name;
    together[op.name] = op.time;
  }
  const Seconds proj = apart.at("attention projections"), a2a = apart.at("Ulysses SP all-to-all");
  const Seconds attn = together.at("attention projections (fused TP/SP communication)");
  EXPECT_GE(attn, std::max(proj, a2a));
  EXPECT_LT(attn, proj + a2a);
  const Seconds experts = apart.at("routed experts"),
                moved = apart.at("dispatch") + apart.at("combine");
  const Seconds fused = together.at("routed experts (fused dispatch and combine)");
  EXPECT_GE(fused, std::max(experts, moved));
  EXPECT_LT(fused, experts + moved);
  // The scatter and gather happen in the fused GEMM's loads and stores.
  EXPECT_LT(together.at("norms, residuals, activations"),
            apart.at("norms, residuals, activations"));
  // The 8 SMs communication holds are a larger share of a GPU with fewer: the grouped GEMM is
  // the slower side here, so the fused pair takes longer on 108 SMs than on 132.
  TimeContext fewer = s.ctx;
  fewer.gpu.sms = 108;
  Seconds fused_fewer;
  for (const LayerOp& op : layer_forward_ops(fewer, c, s.ctx.params.layers[0], true, 1.0, 1))
    if (std::string(op.name) == "routed experts (fused dispatch and combine)")
      fused_fewer = op.time;
  ASSERT_GT(experts, moved);
  EXPECT_GT(fused_fewer, fused);
}

TEST(TimeModel, AFusedPairsBackwardComputesTwiceAndCommunicatesOnce) {
  // DeepSeekMoE-16B's SP attention on one 8 x H800 node: the all-to-alls outlast the
  // projections, so the fused op is communication-bound. Its backward computes the GEMM side
  // twice and moves the same bytes once, as unfused operators' backward does: the layer's
  // backward is less than twice its forward (which it was, the all-to-alls sent twice).
  const Inputs s("deepseekmoe-16b.json", "megascale-h800-240.json");
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=32"));
  c.attention = AttentionMode::kUlysses;
  c.intra_overlap = true;
  c.overlap = false;
  c.cuda_graph = CudaGraph::kFullIteration;
  const LayerParams& lp = s.ctx.params.layers[1];
  Seconds forward, backward;
  bool bound = false;
  for (const LayerOp& op : layer_forward_ops(s.ctx, c, lp, true, 1.0, 1)) {
    ASSERT_EQ(op.kind, OpKind::kCompute) << op.name;
    forward += op.time;
    if (op.fused.kind == OpKind::kCompute) {
      backward += op.time * 2.0;
      continue;
    }
    EXPECT_NEAR(std::max(op.fused.compute, op.fused.time).value(), op.time.value(), 1e-15);
    bound = bound || op.fused.time > op.fused.compute;
    backward += std::max(op.fused.compute * 2.0, op.fused.time);
  }
  ASSERT_TRUE(bound);
  const StageTimes st = one_layer_times(s.ctx, c, lp, true);
  EXPECT_NEAR(st.forward.value(), forward.value(), 1e-9);
  EXPECT_NEAR(st.backward.value(), backward.value(), 1e-9);
  EXPECT_LT(st.backward.value(), st.forward.value() * 1.9);
}

TEST(Search, OutOfMemorySkewCountsTheChunks) {
  // Eq. (8) gives s'_max per FCDA chunk: fixed c chunks take c times as many received tokens,
  // and MACT up to its largest bin (8) before the plan runs out.
  const Inputs s("deepseekmoe-16b.json", "h100-sxm-8.json");
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=1,pp=1,ep=8,dp=8,mbs=1,gbs=64"));
  c.seq_len = 4096;
  const Bytes cap = s.cluster.node.gpu.hbm_capacity;
  const double per_chunk = score_plan(s.ctx, c, cap, 1.0).memory.stages[0].max_received_tokens;
  EXPECT_NEAR(score_plan(s.ctx, c, cap, 1.0).oom_received_tokens, per_chunk, 1e-6 * per_chunk);
  c.fcda_chunks = 4;
  EXPECT_NEAR(score_plan(s.ctx, c, cap, 1.0).oom_received_tokens, 4 * per_chunk, 1e-6 * per_chunk);
  c.mact = true;
  EXPECT_NEAR(score_plan(s.ctx, c, cap, 1.0).oom_received_tokens, 8 * per_chunk, 1e-6 * per_chunk);
}

TEST(TimeModel, UnfusedAttentionMaterializesTheScores) {
  // Megatron's unfused DotProductAttention: two batched GEMMs over the whole s x s score matrix
  // of each local head (no causal skipping), 9 bytes a score of softmax and dropout traffic, and
  // 5 bytes a score kept for backward. GPT-3 1.7B shapes (h 2304, 24 heads of 96) at TP = 2.
  const Inputs s("gpt-1.7b.json", "selene-a100-3072.json", 2048);
  PlanChoice c;
  c.parallel = resolve(parse_parallel("tp=2,pp=1,dp=1,mbs=2,gbs=2"));
  const Seconds fused = core_attention_time(s.ctx, c, false);
  c.attention_kernel = AttentionKernel::kUnfused;
  const Seconds unfused = core_attention_time(s.ctx, c, false);
  const double heads = 2 * 24 / 2, q = 2048, keys = 2048, d = 96;
  const GemmRate peak = {s.cluster.node.gpu.peak.at(Dtype::kBf16), &s.ctx.eff.gemm};
  const Seconds expected = gemm_time(s.ctx, peak, q, d, keys, heads, heads) +
                           gemm_time(s.ctx, peak, q, keys, d, heads, heads) +
                           Bytes(9 * heads * q * keys) / (s.ctx.links.hbm * s.ctx.eff.memory_bound);
  EXPECT_NEAR(unfused.value(), expected.value(), 1e-12);
  // The fused kernel at this size (1.9e10 FLOPs a call) reaches 0.18 of peak (measured cuDNN).
  EXPECT_GT(unfused.value(), 2.5 * fused.value());
  // Memory: 5 bytes a score on top of the fused layer, with or without recompute (the recomputed
  // layer holds them; rematerialization's share leaves them whole); the plan says so and asks
  // Megatron for the unfused backend.
  for (Recompute r : {Recompute::kNone, Recompute::kFull, Recompute::kRematerialize}) {
    c.recompute = r;
    c.attention_kernel = AttentionKernel::kFused;
    const PlanScore a = score_plan(s.ctx, c, s.cluster.node.gpu.hbm_capacity, 1.0);
    c.attention_kernel = AttentionKernel::kUnfused;
    const PlanScore b = score_plan(s.ctx, c, s.cluster.node.gpu.hbm_capacity, 1.0);
    const double layers_held = r == Recompute::kFull ? 1.0 : 24.0;  // m_g = 1 stage, p = 1
    EXPECT_NEAR((b.memory.stages[0].activation_bytes - a.memory.stages[0].activation_bytes).value(),
                5 * heads * q * keys * layers_held, 1.0)
        << recompute_name(r);
    EXPECT_GT(b.time.iteration.value(), a.time.iteration.value());
  }
  Plan p;
  p.choice = c;
  const auto args = megatron_arguments(p, s.model);
  EXPECT_NE(std::find(args.begin(), args.end(), "--attention-backend unfused"), args.end());
  EXPECT_NE(c.describe().find("unfused-attention"), std::string::npos);
  // The search carries the request's kernel into every plan.
  SearchRequest req = request(8, 64, "tp=2");
  req.attention_kernel = AttentionKernel::kUnfused;
  const SearchResult r = search_plans(s.ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  for (const Plan& plan : r.ranked)
    EXPECT_EQ(plan.choice.attention_kernel, AttentionKernel::kUnfused);
}

TEST(PlanFile, RoundTripsTheChoices) {
  const Inputs s("deepseekmoe-16b.json", "h100-sxm-8.json");
  const SearchResult r = search_plans(s.ctx, request(8, 64));
  ASSERT_FALSE(r.ranked.empty());
  const Plan& best = r.ranked.front();
  const nlohmann::json j = io::plan_to_json(best, s.model, s.cluster);
  const PlanChoice back = io::plan_choice_from_json(j, "plan.json");
  EXPECT_EQ(back.describe(), best.choice.describe());
  EXPECT_EQ(j["format"], "moeplan-plan/1");
  // Switches the search leaves at their defaults travel too.
  Plan tuned = best;
  tuned.choice.intra_overlap = true;
  tuned.choice.precision = Precision::kFp8;
  tuned.choice.fp8_recipe = Fp8Recipe::kBlockwise;
  tuned.choice.zero_stage = 0;
  tuned.choice.permute_fusion = false;
  tuned.choice.attention_kernel = AttentionKernel::kUnfused;
  const PlanChoice tuned_back =
      io::plan_choice_from_json(io::plan_to_json(tuned, s.model, s.cluster), "plan.json");
  EXPECT_TRUE(tuned_back.intra_overlap);
  EXPECT_EQ(tuned_back.precision, Precision::kFp8);
  EXPECT_EQ(tuned_back.fp8_recipe, Fp8Recipe::kBlockwise);
  EXPECT_NE(tuned_back.describe().find(" fp8=blockwise"), std::string::npos);
  EXPECT_EQ(tuned_back.zero_stage, 0);
  EXPECT_FALSE(tuned_back.permute_fusion);
  EXPECT_EQ(tuned_back.attention_kernel, AttentionKernel::kUnfused);
  EXPECT_EQ(j["switches"]["attention_kernel"], "fused");
  EXPECT_TRUE(best.choice.permute_fusion);
  EXPECT_DOUBLE_EQ(j["predicted"]["iteration_s"].get<double>(), best.score.time.iteration.value());
}

TEST(PlanFile, UlyssesAttentionRunsAsMegatronsAllToAllContextParallelism) {
  // MegaScale-MoE's SP attention over the 8 "TP" ranks splits nothing by tensor: Megatron-Core
  // runs it as context parallelism over 8 ranks with the all-to-all (Ulysses) exchange, and over
  // 8 x 2 with the all-to-all inside the 8 and the K/V ring across 2.
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  auto args = [&](const char* layout) {
    Plan p;
    p.choice.parallel = resolve(parse_parallel(layout));
    p.choice.attention = AttentionMode::kUlysses;
    return megatron_arguments(p, s.model);
  };
  auto has = [](const std::vector<std::string>& a, const std::string& arg) {
    return std::find(a.begin(), a.end(), arg) != a.end();
  };
  const auto one = args("tp=8,pp=1,ep=8,etp=1,cp=1,mbs=1,gbs=240");
  EXPECT_TRUE(has(one, "--tensor-model-parallel-size 1"));
  EXPECT_TRUE(has(one, "--context-parallel-size 8"));
  EXPECT_TRUE(has(one, "--cp-comm-type a2a"));
  EXPECT_FALSE(has(one, "--sequence-parallel"));
  EXPECT_FALSE(has(one, "--tp-comm-overlap"));
  const auto two = args("tp=8,pp=1,ep=8,etp=1,cp=2,dp=1,mbs=1,gbs=240");
  EXPECT_TRUE(has(two, "--context-parallel-size 16"));
  EXPECT_TRUE(has(two, "--cp-comm-type a2a+p2p"));
  EXPECT_TRUE(has(two, "--hierarchical-context-parallel-sizes 8 2"));
}

TEST(PlanFile, MegatronArgumentsUseRealNames) {
  const Inputs s("deepseek-v3.json", "megascale-h800-240.json");
  Plan p;
  p.choice.parallel = resolve(parse_parallel("tp=2,pp=8,ep=8,etp=1,cp=1,vpp=2,mbs=1,gbs=960"));
  p.choice.recompute = Recompute::kFull;
  const auto args = megatron_arguments(p, s.model);
  auto has = [&](const std::string& a) {
    return std::find(args.begin(), args.end(), a) != args.end();
  };
  EXPECT_TRUE(has("--tensor-model-parallel-size 2"));
  EXPECT_TRUE(has("--pipeline-model-parallel-size 8"));
  EXPECT_TRUE(has("--expert-model-parallel-size 8"));
  EXPECT_TRUE(has("--sequence-parallel"));
  EXPECT_TRUE(has("--recompute-granularity full"));
  EXPECT_TRUE(has("--multi-latent-attention"));
  EXPECT_TRUE(has("--num-layers-per-virtual-pipeline-stage 3"));  // 61 layers / 16 chunks
  EXPECT_TRUE(has("--moe-token-dispatcher-type alltoall"));
  EXPECT_FALSE(has("--window-size 128,0"));
  EXPECT_FALSE(has("--experimental-attention-variant dsa"));
  EXPECT_TRUE(has("--use-distributed-optimizer"));
  EXPECT_FALSE(has("--use-megatron-fsdp"));
  // Dense and MoE layers as the Python pattern Megatron evaluates, quoted for the shell:
  // DeepSeek-V3's three dense layers, and Llama 4 Maverick's alternation as a repeated unit.
  EXPECT_TRUE(has("--moe-layer-freq '([0]*3+[1]*58)'"));
  const auto maverick = megatron_arguments(
      p, io::load_model(root("models/hf/llama-4-maverick-17b-128e.config.json")));
  EXPECT_NE(std::find(maverick.begin(), maverick.end(), "--moe-layer-freq '([0]+[1])*24'"),
            maverick.end());
  // ZeRO-2 and -3 run on Megatron-FSDP with the flags its user guide requires.
  for (int zero : {2, 3}) {
    Plan z = p;
    z.choice.zero_stage = zero;
    const auto fsdp = megatron_arguments(z, s.model);
    for (const std::string& a :
         {std::string("--use-megatron-fsdp"), std::string("--use-distributed-optimizer"),
          std::string("--no-gradient-accumulation-fusion"),
          std::string("--ckpt-format fsdp_dtensor"),
          std::string("--data-parallel-sharding-strategy ") +
              (zero == 2 ? "optim_grads" : "optim_grads_params")}) {
      EXPECT_NE(std::find(fsdp.begin(), fsdp.end(), a), fsdp.end()) << zero << ": " << a;
    }
  }
  // DeepSeek-V3.2's sparse attention, as Megatron-Core's experimental DSA names it.
  const auto v32 =
      megatron_arguments(p, io::load_model(root("models/hf/deepseek-v3.2.config.json")));
  for (const char* a : {"--experimental-attention-variant dsa", "--dsa-indexer-n-heads 64",
                        "--dsa-indexer-head-dim 128", "--dsa-indexer-topk 2048"}) {
    EXPECT_NE(std::find(v32.begin(), v32.end(), a), v32.end()) << a;
  }
  // Qwen3-Next: Megatron-Core's Gated DeltaNet, every fourth layer softmax with an output gate.
  const auto next =
      megatron_arguments(p, io::load_model(root("models/hf/qwen3-next-80b-a3b.config.json")));
  for (const char* a :
       {"--experimental-attention-variant gated_delta_net", "--linear-attention-freq 4",
        "--linear-conv-kernel-dim 4", "--linear-key-head-dim 128", "--linear-value-head-dim 128",
        "--linear-num-key-heads 16", "--linear-num-value-heads 32", "--attention-output-gate"}) {
    EXPECT_NE(std::find(next.begin(), next.end(), a), next.end()) << a;
  }
  // Kimi Linear: Megatron-Core has no Kimi Delta Attention, so no Gated DeltaNet flag stands
  // in for it; the gap names the layers (1-based) instead.
  const ModelSpec kimi = io::load_model(root("models/hf/kimi-linear-48b-a3b.config.json"));
  const auto kl = megatron_arguments(p, kimi);
  for (const std::string& a : kl) EXPECT_EQ(a.find("linear"), std::string::npos) << a;
  EXPECT_NE(std::find(kl.begin(), kl.end(), "--multi-latent-attention"), kl.end());
  const auto gaps = megatron_gaps(p, kimi);
  ASSERT_EQ(gaps.size(), 1u);
  EXPECT_NE(gaps[0].find("no Kimi Delta Attention: layers 1,2,3,5,6,7,9,"), std::string::npos)
      << gaps[0];
  EXPECT_TRUE(
      megatron_gaps(p, io::load_model(root("models/hf/qwen3-next-80b-a3b.config.json"))).empty());
  // A windowed model: gpt-oss alternates from a windowed first layer, Megatron's skip
  // frequency 2; a pattern no frequency gives goes as the list form.
  ModelSpec oss = io::load_model(root("models/hf/gpt-oss-20b.config.json"));
  Plan q;
  q.choice.parallel = resolve(parse_parallel("tp=1,pp=1,ep=8,etp=1,cp=1,vpp=1,mbs=1,gbs=64"));
  auto oss_args = megatron_arguments(q, oss);
  auto has_oss = [&](const std::string& a) {
    return std::find(oss_args.begin(), oss_args.end(), a) != oss_args.end();
  };
  EXPECT_TRUE(has_oss("--window-size 128,0"));
  EXPECT_TRUE(has_oss("--window-attn-skip-freq 2"));
  oss.num_layers = 4;
  oss.moe_layer.resize(4);
  oss.windowed_layer = {true, false, false, true};
  oss_args = megatron_arguments(q, oss);
  EXPECT_TRUE(has_oss("--window-attn-skip-freq '([1]+[0]*2+[1])'"));
  // Chunked attention (Llama 4) has no Megatron-LM argument; none is made up, and the gap says
  // which layers it leaves out.
  EXPECT_TRUE(megatron_gaps(q, oss).empty());
  oss.attention.chunked_window = true;
  oss_args = megatron_arguments(q, oss);
  EXPECT_FALSE(has_oss("--window-size 128,0"));
  const auto chunked = megatron_gaps(q, oss);
  ASSERT_EQ(chunked.size(), 1u);
  EXPECT_NE(chunked[0].find("chunked attention (128 keys, layers 1,4)"), std::string::npos)
      << chunked[0];
  // MegaScale-MoE's rematerialization and intra-operator overlap, which the search may pick,
  // have no Megatron-LM form: each says what the arguments run instead.
  const ModelSpec mixtral = testing_models::mixtral_8x7b();
  Plan sar = q;
  sar.choice.recompute = Recompute::kRematerialize;
  sar.choice.intra_overlap = true;
  const auto megascale = megatron_gaps(sar, mixtral);
  ASSERT_EQ(megascale.size(), 2u);
  EXPECT_NE(megascale[0].find("rematerialization has no Megatron-LM argument"), std::string::npos);
  EXPECT_NE(megascale[1].find("intra-operator overlap"), std::string::npos);
  sar.choice.recompute = Recompute::kSelective;
  sar.choice.intra_overlap = false;
  EXPECT_TRUE(megatron_gaps(sar, mixtral).empty());
}

}  // namespace moe

namespace moe {

TEST(Search, CostObjectiveWeighsClusterSizes) {
  // GPU-seconds per token: with a fixed batch, fewer GPUs waste less to bubbles and
  // communication, so the cheapest plan uses fewer GPUs than the largest count.
  const Inputs s("deepseekmoe-16b.json", "megascale-h800-240.json");
  SearchRequest req = request(240, 256);
  req.objective = Objective::kCost;
  const SearchResult r = search_gpu_counts(s.ctx, req, {8, 16, 32, 240});
  ASSERT_GE(r.ranked.size(), 2u);
  const int64_t tokens = 256 * 4096;
  auto cost = [&](const Plan& p) {
    return p.score.time.iteration.value() * static_cast<double>(p.choice.gpus()) /
           static_cast<double>(tokens);
  };
  for (size_t i = 1; i < r.ranked.size(); ++i) EXPECT_LE(cost(r.ranked[i - 1]), cost(r.ranked[i]));
  EXPECT_LT(r.ranked.front().choice.gpus(), 240);
  // Counts with no valid layout are skipped rather than fatal.
  EXPECT_NO_THROW(search_gpu_counts(s.ctx, req, {11, 8}));
  EXPECT_THROW(search_gpu_counts(s.ctx, req, {11}), ConfigError);  // 256 % 11, 28 layers
}

}  // namespace moe

namespace moe {

TEST(Search, AFixedPipelineThatDoesNotDivideTheGpusIsSkipped) {
  // 64 GPUs with tp x cp = 32 leave 2 per pipeline: pp = 4 cannot be placed. This once divided
  // by a zero data-parallel size; now it is no valid layout.
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  EXPECT_THROW(search_plans(s.ctx, request(64, 256, "tp=8,cp=4,pp=4")), ConfigError);
  EXPECT_FALSE(search_plans(s.ctx, request(64, 256, "pp=4")).ranked.empty());
}

}  // namespace moe

namespace moe {

TEST(Search, AnyFixedLayoutEitherPlansOrSaysWhyNot) {
  // Random partial layouts: the search returns plans or a ConfigError, never anything else (under
  // the sanitizers, no division by zero or overflow either).
  const Inputs s("deepseekmoe-16b.json", "megascale-h800-240.json", 2048);
  const char* keys[] = {"tp", "pp", "ep", "etp", "cp", "vpp", "mbs", "dp", "pp_first", "pp_last"};
  uint64_t state = 42;
  auto next = [&] {
    return (state = state * 6364136223846793005ULL + 1442695040888963407ULL) >> 33;
  };
  int planned = 0, refused = 0;
  for (int trial = 0; trial < 60; ++trial) {
    std::string fixed;
    for (const char* key : keys) {
      if (next() % 3 != 0) continue;
      fixed +=
          (fixed.empty() ? "" : ",") + std::string(key) + "=" + std::to_string(1 + next() % 16);
    }
    SearchRequest req = request(8 * (1 + next() % 8), 64 * (1 + next() % 4), fixed);
    try {
      const SearchResult r = search_plans(s.ctx, req);
      planned += !r.ranked.empty();
    } catch (const ConfigError&) {
      ++refused;
    }
  }
  EXPECT_GT(planned, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace moe

namespace moe {

TEST(Search, OffloadPlansKeepTheFixedStagesAndMicroBatch) {
  // APTMoE's own setting (Sec. IV): as many micro-batches as GPUs, so mbs = 128 / 4.
  Inputs in("aptmoe-moe-s-16.json", "aptmoe-4x-a800-40gb-c1g2.json", 512);
  SearchRequest req = request(4, 128, "pp=8,mbs=32");
  req.precision = Precision::kFp32;
  const std::vector<Plan> plans = offload_plans(in.ctx, in.cluster, req);
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(*plans[0].choice.parallel.pp, 8);
  EXPECT_EQ(*plans[0].choice.parallel.mbs, 32);
  // Unfixed, the search offers APTMoE's micro-batch beside the small ones.
  bool aptmoe_mbs = false;
  req.fixed = parse_parallel("");
  req.top_k = 100;
  for (const Plan& p : offload_plans(in.ctx, in.cluster, req))
    aptmoe_mbs |= *p.choice.parallel.mbs == 32;
  EXPECT_TRUE(aptmoe_mbs);
  // Offload plans are single-GPU stages: a fixed tp = 2 rules them out.
  req.fixed = parse_parallel("tp=2");
  EXPECT_TRUE(offload_plans(in.ctx, in.cluster, req).empty());
}

}  // namespace moe

namespace moe {

TEST(TimeModel, RecomputeModulesTradeMemoryForReplayedWork) {
  // Megatron's --recompute-modules: each module drops its rows of eq. (2) and replays its ops
  // before the backward. DeepSeekMoE-16B over EP 16 on two nodes, DeepEP, no overlap.
  const Inputs s("deepseekmoe-16b.json", "h100-256.json");
  const Bytes cap = s.cluster.node.gpu.hbm_capacity;
  auto run = [&](Recompute rc, uint32_t mods) {
    PlanChoice c;
    c.parallel = resolve(parse_parallel("tp=1,ep=16,etp=1,dp=16,pp=1,cp=1,mbs=2,gbs=64"));
    c.dispatcher = megascale::Dispatcher::kDeepEp;
    c.overlap = false;
    c.recompute = rc;
    c.recompute_modules = mods;
    return score_plan(s.ctx, c, cap, 1.0);
  };
  const PlanScore none = run(Recompute::kNone, 0);
  const PlanScore elementwise = run(Recompute::kSelective, kDefaultRecomputeModules);
  const PlanScore moe = run(Recompute::kSelective, kRecomputeMoe);
  const PlanScore both = run(Recompute::kSelective, kRecomputeMoe | kRecomputeLayernorm);
  const Bytes a_none = none.memory.stages[0].activation_bytes;
  const Bytes a_elem = elementwise.memory.stages[0].activation_bytes;
  const Bytes a_moe = moe.memory.stages[0].activation_bytes;
  EXPECT_LT(a_elem, a_none);
  EXPECT_LT(a_moe, a_elem);  // the routed tokens' rows are the bulk
  EXPECT_LT(both.memory.stages[0].activation_bytes, a_moe);
  // Nothing of the routed-token term is left, so MACT never needs to chunk.
  EXPECT_TRUE(std::isinf(moe.memory.stages[0].max_received_tokens));
  EXPECT_EQ(moe.memory.stages[0].mact_chunks, 1);
  // The element-wise replay is a few percent of the compute; moe replays the block, dispatch
  // and combine included: the EP time grows by half (a third pass of dispatch and combine).
  EXPECT_GT(elementwise.time.recompute.value(), 0.0);
  EXPECT_LT(elementwise.time.recompute.value(), 0.05 * elementwise.time.compute.value());
  EXPECT_GT(moe.time.recompute, elementwise.time.recompute * 5.0);
  EXPECT_NEAR(moe.time.ep_comm / none.time.ep_comm, 1.5, 0.02);
  EXPECT_NEAR(elementwise.time.ep_comm.value(), none.time.ep_comm.value(), 1e-12);
  EXPECT_GT(moe.time.iteration, elementwise.time.iteration);

  // mla_up_proj on DeepSeek-V3: Q, K and V at full width go, the latents stay; the two up
  // projections run again.
  const Inputs v3("deepseek-v3.json", "h800-2048.json");
  PlanChoice c;
  c.parallel = resolve(
      parse_parallel("tp=8,pp=16,ep=16,etp=1,cp=1,mbs=1,pp_first=2,pp_last=3,gbs=15360,dp=16"));
  c.recompute = Recompute::kSelective;
  c.recompute_modules = kDefaultRecomputeModules;
  const PlanScore base = score_plan(v3.ctx, c, v3.cluster.node.gpu.hbm_capacity, 1.0);
  c.recompute_modules |= kRecomputeMlaUpProj;
  const PlanScore mla = score_plan(v3.ctx, c, v3.cluster.node.gpu.hbm_capacity, 1.0);
  // Per token and layer on a TP rank: 128 heads x 192 x 3 wide, less 1,536 + 512 + 64 latent
  // channels, over tp = 8, at 2 bytes.
  const double per_layer = 2.0 * 4096.0 * (128.0 * 192.0 * 3.0 - 2112.0) / 8.0;
  const StageMemory& s1 = base.memory.stages[1];
  EXPECT_NEAR((s1.activation_bytes - mla.memory.stages[1].activation_bytes).value(),
              per_layer * static_cast<double>(s1.num_layers) * s1.m_g, 1.0);
  EXPECT_GT(mla.time.recompute, base.time.recompute);
}

}  // namespace moe

namespace moe {

TEST(Search, MegatronOnlyLeavesOutWhatMegatronCannotRun) {
  // Qwen3-235B on 256 H100 at tp=2, pp=8, ep=16, mbs=4: the open search picks MegaScale-MoE's
  // rematerialization (or MemFine's chunking); --megatron-only plans only what the printed
  // arguments run, so its best plan has no Megatron-LM gap.
  const Inputs s("hf/qwen3-235b-a22b.config.json", "h100-256.json");
  SearchRequest req = request(256, 2048, "tp=2,pp=8,ep=16,cp=1,mbs=4");
  req.threads = 1;
  const SearchResult open = search_plans(s.ctx, req);
  ASSERT_FALSE(open.ranked.empty());
  const PlanChoice& first = open.ranked.front().choice;
  EXPECT_TRUE(first.recompute == Recompute::kRematerialize || first.mact);
  EXPECT_FALSE(megatron_gaps(open.ranked.front(), s.model).empty());
  req.megatron_only = true;
  const SearchResult megatron = search_plans(s.ctx, req);
  ASSERT_FALSE(megatron.ranked.empty());
  for (const Plan& p : megatron.ranked) {
    EXPECT_NE(p.choice.recompute, Recompute::kRematerialize);
    EXPECT_FALSE(p.choice.mact);
    EXPECT_TRUE(megatron_gaps(p, s.model).empty()) << p.choice.describe();
  }
  EXPECT_GE(megatron.ranked.front().score.time.iteration, open.ranked.front().score.time.iteration);
  // BF16 gradient communication, when a plan uses it, is Megatron's --grad-reduce-in-bf16.
  Plan bf16 = megatron.ranked.front();
  bf16.choice.dp_bf16_compression = true;
  const auto args = megatron_arguments(bf16, s.model);
  EXPECT_NE(std::find(args.begin(), args.end(), "--grad-reduce-in-bf16"), args.end());
}

TEST(Search, AFixedGradientPrecisionIsTheOneEveryPlanReduces) {
  // Qwen3-235B on 256 H100 with DP 16 across nodes: searched, BF16 gradients win (half the DP
  // bytes); fixed to FP32 (Megatron's default, no --grad-reduce-in-bf16), every plan keeps it and
  // the best is slower by the stage's extra reduce-scatter bytes. Without host costs: at
  // micro-batch 1 the layers wait for the host, whose slack hides either precision's syncs.
  Inputs s("hf/qwen3-235b-a22b.config.json", "h100-256.json");
  s.ctx.eff = without_host_time(s.ctx.eff);
  SearchRequest req = request(256, 2048, "tp=2,pp=8,ep=16,cp=1,vpp=1,mbs=1");
  req.threads = 1;
  req.recompute = Recompute::kFull;
  req.zero = 1;
  const SearchResult open = search_plans(s.ctx, req);
  ASSERT_FALSE(open.ranked.empty());
  EXPECT_TRUE(open.ranked.front().choice.dp_bf16_compression);
  for (bool bf16 : {false, true}) {
    req.dp_bf16_compression = bf16;
    const SearchResult fixed = search_plans(s.ctx, req);
    ASSERT_FALSE(fixed.ranked.empty());
    for (const Plan& p : fixed.ranked) EXPECT_EQ(p.choice.dp_bf16_compression, bf16);
    const TimeBreakdown& t = fixed.ranked.front().score.time;
    if (bf16) {
      EXPECT_DOUBLE_EQ(t.iteration.value(), open.ranked.front().score.time.iteration.value());
    } else {
      EXPECT_GT(t.iteration, open.ranked.front().score.time.iteration);
      EXPECT_GT(t.dp_reduce_scatter, open.ranked.front().score.time.dp_reduce_scatter * 1.5);
    }
  }
}

}  // namespace moe

namespace moe {

TEST(LayerOps, Fp8PlansCastTheirGemmOperands) {
  // Mixtral-8x7B's MoE layer, EP 8 on one H800 node, FP8: per token, the attention output
  // before o_proj (32 x 128) and the output gradients of QKV (4,096 + 2 x 8 x 128) and o_proj
  // (4,096): 14,336; the routed tokens and the activation into the two grouped GEMMs
  // (2 x (4,096 + 14,336)) and their output gradients (2 x (2 x 14,336 + 4,096)): 102,400.
  // 4 bytes an element (BF16 read, FP8 row- and column-wise written), a third in the forward.
  const Inputs s("mixtral-8x7b.json", "megascale-h800-240.json");
  const char* layout = "tp=1,pp=1,ep=8,etp=1,dp=8,mbs=1,gbs=8";
  const auto fp8 = forward_ops(s, layout, AttentionMode::kTensor, Precision::kFp8);
  const auto bf16 = forward_ops(s, layout);
  EXPECT_EQ(bf16.count("FP8 casts"), 0u);
  ASSERT_EQ(fp8.count("FP8 casts"), 1u);
  const double tokens = 4096;  // a micro-batch of one sequence, no TP or CP
  const Seconds expected =
      Bytes(4.0 * (14336 + 102400) * tokens / 3.0) / (s.ctx.links.hbm * s.ctx.eff.memory_bound);
  EXPECT_NEAR(fp8.at("FP8 casts") / expected, 1.0, 1e-12);
}

}  // namespace moe

namespace moe {

TEST(Search, OffloadPlansHaveTheHostMemoryOfTheirOwnSockets) {
  // A GB200 NVL72 rack is one NVLink domain of 36 Graces, each in its own tray with two GPUs:
  // four GPUs have two Graces' memory (960 GB), not the rack's 17 TB. Qwen3-30B-A3B's weights
  // and Adam states (18 bytes a parameter, 549 GB) fit two Graces but not the one that GPUs 0
  // and 1 share.
  const ClusterSpec gb200 = io::load_cluster(root("topologies/gb200-nvl72-4x72.json"));
  EXPECT_EQ(host_sockets(gb200.node, 4), (std::vector<int>{0, 1}));
  EXPECT_EQ(host_sockets(gb200.node, 1), (std::vector<int>{0}));
  // APTMoE's C1+G4 binding: four GPUs under socket 0.
  const ClusterSpec c1g4 = io::load_cluster(root("topologies/aptmoe-4x-a800-40gb-c1g4.json"));
  EXPECT_EQ(host_sockets(c1g4.node, 4), (std::vector<int>{0}));
  const ModelSpec m = io::load_model(root("models/hf/qwen3-30b-a3b.config.json"));
  const TimeContext ctx = make_time_context(m, gb200, efficiencies(), RoutingSkew{}, 4096);
  auto fits = [&](int64_t gpus) {
    SearchRequest req = request(gpus, 16);
    req.top_k = 1;
    return !offload_plans(ctx, gb200, req).empty();
  };
  EXPECT_FALSE(fits(2));
  EXPECT_TRUE(fits(4));
}

}  // namespace moe

namespace moe {

TEST(Search, TheMemoryObjectiveTakesTheFasterOfNearlyEqualPeaks) {
  // Sixty wide experts over 16 A800s with skewed routing (G = 0.5): three layouts need
  // 28.27-28.35 GB a GPU, the leanest by 0.03 GB taking 33 s an iteration and the third 0.11 s.
  // Within kMemoryTie of the least peak the faster goes first.
  const nlohmann::json file = {
      {"format", "moeplan-model/1"},
      {"name", "wide-experts"},
      {"num_layers", 3},
      {"hidden_size", 4096},
      {"vocab_size", 32000},
      {"attention", {{"type", "gqa"}, {"num_heads", 8}, {"num_kv_heads", 4}, {"head_dim", 64}}},
      {"ffn", {{"gated", false}}},
      {"moe",
       {{"routed_experts", 60}, {"expert_size", 14336}, {"top_k", 3}, {"shared_experts", 2}}}};
  const ModelSpec m = io::model_from_json(file, "wide-experts.json");
  const ClusterSpec cluster = io::load_cluster(root("topologies/aptmoe-4x-a800-40gb-c1g2.json"));
  const TimeContext ctx =
      make_time_context(m, cluster, efficiencies(), parse_skew("G=0.5", m), 2048);
  SearchRequest req = request(16, 1);
  req.recompute = Recompute::kFull;
  req.objective = Objective::kMemory;
  req.top_k = 3;
  const SearchResult r = search_plans(ctx, req);
  ASSERT_EQ(r.ranked.size(), 3u);
  Bytes least = r.ranked.front().score.peak_bytes;
  for (const Plan& p : r.ranked) least = std::min(least, p.score.peak_bytes);
  EXPECT_LT(r.ranked.front().score.peak_bytes, least * (1.0 + kMemoryTie));
  EXPECT_GT(r.ranked.front().score.peak_bytes, least);  // not the leanest: the faster
  EXPECT_LT(r.ranked.front().score.time.iteration.value(), 1.0);
  for (const Plan& p : r.ranked)
    EXPECT_LE(r.ranked.front().score.time.iteration, p.score.time.iteration);
}

}  // namespace moe

namespace moe {

TEST(TimeModel, StageBoundariesBetweenNodesGoThroughTheNics) {
  // APTMoE's A800 nodes under C1+G2 hold 4 GPUs: tp 2 x pp 8 puts two stages on a node, so the
  // boundaries into stages 2, 4 and 6 and the wrap back to stage 0 leave it (through the NICs)
  // while the others stay on its PCIe. A boundary priced as a group of two stages spans (4 GPUs,
  // a whole node) used to take the node's link for all of them.
  const Inputs s("mixtral-8x7b.json", "aptmoe-4x-a800-40gb-c1g2.json");
  PlanChoice c = plan_of("tp=2,pp=8,ep=1,etp=1,dp=1,cp=1,vpp=4,mbs=1,gbs=8");
  c.seq_len = 4096;
  const std::vector<Seconds> hops = boundary_hops(s.ctx, c);
  ASSERT_EQ(hops.size(), 8u);
  const Bytes bytes = boundary_bytes(s.ctx, c);
  const Seconds inside = bytes / s.ctx.links.intra + s.ctx.links.intra_latency;
  const Seconds across = bytes / s.ctx.links.inter + s.ctx.links.inter_latency;
  for (size_t k = 0; k < hops.size(); ++k)
    EXPECT_DOUBLE_EQ(hops[k].value(), (k % 2 == 0 ? across : inside).value()) << k;
  EXPECT_GT(across, inside * 2.0);
  // One node's worth of stages keeps every hop inside it.
  PlanChoice one = plan_of("tp=2,pp=2,ep=1,etp=1,dp=1,cp=1,vpp=1,mbs=1,gbs=8");
  Inputs four("mixtral-8x7b.json", "aptmoe-4x-a800-40gb-c1g2.json");
  four.ctx.links.world = 4;
  for (const Seconds& h : boundary_hops(four.ctx, one)) EXPECT_DOUBLE_EQ(h.value(), inside.value());
}

TEST(TimeModel, AStageBoundaryLeavesTheNodeWhereAnyRankPairStraddlesIt) {
  // Stages of three GPUs on eight-GPU nodes: stage 1 holds GPUs 3-5, stage 2 GPUs 6-8, so rank
  // 2 sends from GPU 5 to GPU 8 on the next node; stages 0 and 1 stay in node 0.
  Inputs s("mixtral-8x7b.json", "h100-256.json");
  ParallelConfig p = resolve(parse_parallel("tp=1,pp=8,ep=1,etp=1,dp=3,cp=1,vpp=1,mbs=1,gbs=24"));
  EXPECT_FALSE(boundary_crosses_nodes(s.ctx, p, 0, 1));
  EXPECT_TRUE(boundary_crosses_nodes(s.ctx, p, 1, 2));
  EXPECT_TRUE(boundary_crosses_nodes(s.ctx, p, 2, 1));
  EXPECT_FALSE(boundary_crosses_nodes(s.ctx, p, 3, 4));  // GPUs 9-11 to 12-14
  EXPECT_TRUE(boundary_crosses_nodes(s.ctx, p, 4, 5));   // GPU 14 to 17
  EXPECT_TRUE(boundary_crosses_nodes(s.ctx, p, 7, 0));   // the wrap
  // Whole nodes a stage: every boundary leaves.
  p = resolve(parse_parallel("tp=8,pp=4,ep=1,etp=1,dp=1,cp=1,vpp=1,mbs=1,gbs=8"));
  for (int64_t k = 0; k < 4; ++k) EXPECT_TRUE(boundary_crosses_nodes(s.ctx, p, k, (k + 1) % 4));
}

}  // namespace moe
