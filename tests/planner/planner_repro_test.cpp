// The planner against the seed papers' findings (issue 3's reproduction list).
#include <gtest/gtest.h>

#include "planner/anchor.h"
#include "planner/aptmoe.h"
#include "planner/io/loaders.h"
#include "planner/megascale.h"
#include "planner/megatron_flops.h"
#include "planner/model_stats.h"
#include "planner/planner_inputs.h"
#include "planner/search.h"

namespace moe {

namespace {

PlanChoice fixed(const std::string& layout, AttentionMode attention, bool overlap) {
  PlanChoice c;
  c.parallel = resolve(parse_parallel(layout));
  c.attention = attention;
  c.overlap = overlap;
  return c;
}
}  // namespace

TEST(PlannerRepro, MegaScaleFig13SpEpBeatsTpTpOnOneNode) {
  // MegaScale-MoE Fig. 13: on one 8xH800 node, SP attention + EP experts beats TP + TP for all six
  // models of Table 2 (global batch 32; layers cut to fit, which leaves per-layer ratios alone).
  const ClusterSpec cluster = io::load_cluster(root("topologies/megascale-h800-240.json"));
  for (const char* file :
       {"megascale-internal-352b.json", "mixtral-8x7b.json", "mixtral-8x22b.json",
        "hunyuan-large.json", "phi-3.5-moe.json", "deepseekmoe-16b.json"}) {
    const ModelSpec m = io::load_model(root(std::string("models/") + file));
    // MegaScale's system, priced as `reproduce` prices it: without host time (at Megatron-Core's
    // host costs both layouts are host-bound here and tie), attention at its era's share.
    const TimeContext ctx =
        make_time_context(m, cluster, paper_era_efficiencies(), RoutingSkew{}, 4096);
    for (bool overlap : {false, true}) {
      const PlanScore tptp = score_plan(
          ctx, fixed("tp=8,etp=8,ep=1,dp=1,pp=1,mbs=1,gbs=32", AttentionMode::kTensor, overlap),
          cluster.node.gpu.hbm_capacity, 1.0);
      const PlanScore spep = score_plan(
          ctx, fixed("tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=32", AttentionMode::kUlysses, overlap),
          cluster.node.gpu.hbm_capacity, 1.0);
      const double gain = spep.mfu / tptp.mfu - 1.0;
      std::printf("%-30s overlap %d TP+TP MFU %.3f  SP+EP MFU %.3f  gain %+.1f %%\n", file, overlap,
                  tptp.mfu, spep.mfu, 100 * gain);
      EXPECT_GT(gain, 0.0) << file;
      // With overlap on both, the four models with wide experts land in the paper's 10-35 %
      // band (19.1-26.8 %). Phi-3.5-MoE (6400) and DeepSeekMoE (1408) gain more here: TP slices
      // their narrow experts into shallow GEMMs, every TP rank permutes the whole gathered batch,
      // and their small h leaves little compute to hide TP's collectives behind.
      const bool wide = m.expert_ffn_size >= 14336;
      if (overlap && wide) {
        EXPECT_GE(gain, 0.10) << file;
        EXPECT_LE(gain, 0.35) << file;
      }
    }
  }
}

TEST(PlannerRepro, DenseGptMatchesMegatronLm2021) {
  // Issue 3's dense check (tools/validate_dense.sh prints the table): Narayanan et al. 2021
  // (arXiv 2104.04473) Table 1, A100 80 GB on Selene, sequence 2048, full recompute, no TP
  // overlap, and attention unfused (FlashAttention came a year later). The paper counts the
  // recomputed forward too (4 passes), so its TFLOP/s per GPU is our MFU x 4/3 x 312. Ours:
  // -8 % to +15 % (with a fused kernel assumed: +19 % to +43 %).
  const ClusterSpec selene = io::load_cluster(root("topologies/selene-a100-3072.json"));
  struct Row {
    const char* model;
    int64_t gpus, batch;
    const char* layout;
    double paper_tflops;
  };
  for (const Row& row :
       {Row{"gpt-1.7b", 32, 512, "tp=1,pp=1", 137}, Row{"gpt-18b", 256, 1024, "tp=8,pp=1", 135},
        Row{"gpt-39b", 512, 1536, "tp=8,pp=2", 138}, Row{"gpt-145b", 1536, 2304, "tp=8,pp=8", 148},
        Row{"gpt-1t", 3072, 3072, "tp=8,pp=64", 163}}) {
    const ModelSpec m = io::load_model(root(std::string("models/") + row.model + ".json"));
    const TimeContext ctx = make_time_context(m, selene, efficiencies(), RoutingSkew{}, 2048);
    SearchRequest req;
    req.num_gpus = row.gpus;
    req.global_batch = row.batch;
    req.fixed = parse_parallel(std::string(row.layout) + ",cp=1,vpp=1,mbs=1");
    req.recompute = Recompute::kFull;
    req.overlap = false;
    req.attention = AttentionMode::kTensor;
    req.attention_kernel = AttentionKernel::kUnfused;
    req.cross_entropy = CrossEntropy::kNative;  // Megatron's own loss: TE's came later
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    ASSERT_FALSE(r.ranked.empty()) << row.model;
    const double tflops = r.ranked.front().score.mfu * 4.0 / 3.0 * 312.0;
    std::printf("%-9s predicted %.0f TFLOP/s, paper %.0f (%+.1f %%)\n", row.model, tflops,
                row.paper_tflops, 100 * (tflops / row.paper_tflops - 1));
    EXPECT_NEAR(tflops / row.paper_tflops, 1.0, 0.16) << row.model;
  }
}

TEST(PlannerRepro, GptOssOnH100MatchesMegatronBridgeWithItsProvidersDispatcher) {
  // Megatron-Bridge 26.02's GPT-OSS 120B run on 64 H100 (tools/validate_bridge.sh): pp 4, EP 8,
  // micro-batch 1, GBS 1,280, BF16, recompute modules layernorm and moe_act, 5,993 tokens/s a
  // GPU. Its preset names no flex backend, so the GPT-OSS provider's all-to-all dispatcher
  // runs, and at micro-batch 1 without CUDA graphs its layers wait on the host (15 ms a MoE
  // layer, planner/host_time.h): +9.5 %. The search's all-gather dispatcher, which it issues in
  // less host time, came out +66.7 %.
  const ModelSpec m = io::load_model(root("models/hf/gpt-oss-120b.config.json"));
  const ClusterSpec c = io::load_cluster(root("topologies/h100-256.json"));
  const TimeContext ctx = make_time_context(m, c, efficiencies(), RoutingSkew{}, 4096);
  auto tokens_per_gpu = [&](megascale::Dispatcher dispatcher) {
    SearchRequest req;
    req.num_gpus = 64;
    req.global_batch = 1280;
    req.fixed = parse_parallel("tp=1,pp=4,cp=1,ep=8,etp=1,vpp=1,mbs=1");
    req.recompute = Recompute::kSelective;
    req.recompute_modules = kRecomputeLayernorm | kRecomputeMoeAct;
    req.dispatcher = dispatcher;
    req.attention = AttentionMode::kTensor;
    req.megatron_only = true;
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    EXPECT_FALSE(r.ranked.empty());
    return r.ranked.empty() ? 0.0 : r.ranked.front().score.tokens_per_second / 64.0;
  };
  const double alltoall = tokens_per_gpu(megascale::Dispatcher::kAllToAll);
  std::printf("GPT-OSS 120B on 64 H100: %.0f tokens/s a GPU (5993)\n", alltoall);
  EXPECT_NEAR(alltoall / 5993, 1.0, 0.15);
  EXPECT_GT(tokens_per_gpu(megascale::Dispatcher::kAllGather) / 5993, 1.4);
}

TEST(PlannerRepro, MoeMatchesMegatronCoreQwen3Runs) {
  // The MoE counterpart of the dense check (tools/validate_moe.sh prints the table, four more
  // rows and the mapping): Megatron-Core's published Qwen3-235B-A22B runs on 256 H100
  // (Megatron-MoE-ModelZoo, best_practice/Qwen3), sequence 4,096, global batch 2,048, BF16,
  // DeepEP, as step time and the TFLOP/s per GPU its log prints: cross-node EP 32 without
  // overlap at its VPP 4 and FSDP with EP in the node, TP attention as the runs had it.
  // tools/validate_moe.sh: +17.4 % and -11.3 % (this test searches the switches it leaves free).
  const ModelSpec m = io::load_model(root("models/hf/qwen3-235b-a22b.config.json"));
  const ClusterSpec c = io::load_cluster(root("topologies/h100-256.json"));
  const TimeContext ctx = make_time_context(m, c, efficiencies(), RoutingSkew{}, 4096);
  struct Row {
    const char* layout;
    Recompute recompute;
    bool overlap;
    int zero;
    double paper_tflops;
  };
  for (const Row& row : {Row{"tp=2,pp=8,ep=32,mbs=1,vpp=4", Recompute::kNone, false, 1, 245},
                         Row{"tp=2,pp=1,ep=8,mbs=4", Recompute::kFull, true, 3, 276}}) {
    SearchRequest req;
    req.num_gpus = 256;
    req.global_batch = 2048;
    req.fixed = parse_parallel(std::string(row.layout) + ",cp=1");
    req.recompute = row.recompute;
    req.overlap = row.overlap;
    req.zero = row.zero;
    req.dispatcher = megascale::Dispatcher::kDeepEp;
    req.attention = AttentionMode::kTensor;
    req.megatron_only = true;
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    ASSERT_FALSE(r.ranked.empty()) << row.layout;
    const Plan& best = r.ranked.front();
    const double tflops = megatron_logged_tflops(m, 4096, 2048, *best.choice.parallel.tp, 256,
                                                 best.score.time.iteration);
    std::printf("%s overlap %d: predicted %.0f TFLOP/s, published %.0f (%+.1f %%)\n", row.layout,
                row.overlap, tflops, row.paper_tflops, 100 * (tflops / row.paper_tflops - 1));
    EXPECT_NEAR(tflops / row.paper_tflops, 1.0, 0.25) << row.layout << " overlap " << row.overlap;
  }
}

TEST(PlannerRepro, MoeMatchesMegatronCoreLongContextRuns) {
  // The same model's long-context runs (Megatron-MoE-ModelZoo, best_practice/Qwen3, second
  // table): 256 H100, TP 4, EP 8, PP 8 with VPP 4 (its command line), global batch 256, DeepEP,
  // no EP overlap, Megatron's --recompute-modules layernorm moe, forced load balance (what our
  // balanced routing prices), TP attention. Ours at VPP 4 (the search builds the layout 94
  // layers need): +24.0 % at 16K (CP 1) to +12.4 % at 128K (CP 8). Priced at VPP 1, as before
  // session 28, a bubble 16 points too large hid most of that.
  const ModelSpec m = io::load_model(root("models/hf/qwen3-235b-a22b.config.json"));
  const ClusterSpec c = io::load_cluster(root("topologies/h100-256.json"));
  struct Row {
    int64_t seq;
    const char* layout;
    double paper_tflops;
  };
  for (const Row& row : {Row{16384, "tp=4,pp=8,ep=8,cp=1,mbs=1,vpp=4", 295},
                         Row{131072, "tp=4,pp=8,ep=8,cp=8,mbs=1,vpp=4", 389}}) {
    const TimeContext ctx = make_time_context(m, c, efficiencies(), RoutingSkew{}, row.seq);
    SearchRequest req;
    req.num_gpus = 256;
    req.global_batch = 256;
    req.fixed = parse_parallel(row.layout);
    req.recompute = Recompute::kSelective;
    req.recompute_modules = kRecomputeLayernorm | kRecomputeMoe;
    req.overlap = false;
    req.dispatcher = megascale::Dispatcher::kDeepEp;
    req.attention = AttentionMode::kTensor;
    req.megatron_only = true;
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    ASSERT_FALSE(r.ranked.empty()) << row.seq;
    const Plan& best = r.ranked.front();
    const double tflops = megatron_logged_tflops(m, row.seq, 256, *best.choice.parallel.tp, 256,
                                                 best.score.time.iteration);
    std::printf("seq %6lld: predicted %.0f TFLOP/s, published %.0f (%+.1f %%)\n",
                static_cast<long long>(row.seq), tflops, row.paper_tflops,
                100 * (tflops / row.paper_tflops - 1));
    EXPECT_NEAR(tflops / row.paper_tflops, 1.0, 0.3) << row.seq;
    EXPECT_EQ(*best.choice.parallel.vpp, 4);
  }
}

TEST(PlannerRepro, MoeMatchesMegatronCoreLongContextOnGb300) {
  // The model zoo's GB300 NVL72 table (best_practice/qwen3): sequence 128K on 128 GPUs (racks
  // of 64), TP 4, CP 4, EP 32, PP 4 with VPP 12 (its command line), global batch 1,024, MXFP8,
  // HybridEP (as DeepEP), --recompute-modules moe_act layernorm, forced balance: 1,150 TFLOP/s.
  // Ours +1.5 % (1,168). The 4K rows on GB200 and GB300 are +20 % to +40 %
  // (tools/validate_moe.sh): like the 4K rows on H100, short sequences leave costs the model
  // lacks.
  const ModelSpec m = io::load_model(root("models/hf/qwen3-235b-a22b.config.json"));
  const ClusterSpec c = io::load_cluster(root("topologies/gb300-nvl72-4x64.json"));
  const int64_t seq = 131072;
  const TimeContext ctx = make_time_context(m, c, efficiencies(), RoutingSkew{}, seq);
  SearchRequest req;
  req.num_gpus = 128;
  req.global_batch = 1024;
  req.fixed = parse_parallel("tp=4,pp=4,ep=32,cp=4,vpp=12,mbs=1");
  req.precision = Precision::kFp8;
  req.fp8_recipe = Fp8Recipe::kMxfp8;
  req.recompute = Recompute::kSelective;
  req.recompute_modules = kRecomputeMoeAct | kRecomputeLayernorm;
  req.overlap = false;
  req.dispatcher = megascale::Dispatcher::kDeepEp;
  req.megatron_only = true;
  req.threads = 1;
  const SearchResult r = search_plans(ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  const Plan& best = r.ranked.front();
  const double tflops = megatron_logged_tflops(m, seq, 1024, 4, 128, best.score.time.iteration);
  std::printf("GB300 128K: predicted %.0f TFLOP/s, published 1150 (%+.1f %%)\n", tflops,
              100 * (tflops / 1150 - 1));
  EXPECT_NEAR(tflops / 1150, 1.0, 0.2);
}

TEST(PlannerRepro, OneAnchoredBlackwellRunPredictsTheOtherShortSequenceRuns) {
  // The model zoo's Blackwell rows at 4K are 20-40 % optimistic at datasheet peaks (host time
  // included: CUDA graphs capture attention and the router, DeepSeek-V3's run the whole
  // iteration). Anchored on one of them (GB200, BF16, tp1 pp8 ep8: every efficiency x 0.713),
  // the GB300 MXFP8 run (tp1 pp4 ep32 mbs2) comes to -15.1 % of its 974 TFLOP/s, and another
  // model, DeepSeek-V3 on GB200 (Megatron-Bridge's MXFP8 recipe at its pipeline layout
  // Et*4|(t*4|)*14tmL, EP overlap), to -18.2 % of its 1,316: the MXFP8 curve already carries
  // the published MXFP8 GEMM rate (default_efficiency.h), so the BF16 run's factor slows it twice
  // (-4.5 and -6.4 % on the Hopper FP8 curve). The 128K run then turns 28 % pessimistic: what the
  // model misses at 4K scales with the per-token work (GEMMs, element-wise, dispatch), not with
  // attention, which the anchor slows too.
  const ModelSpec m = io::load_model(root("models/hf/qwen3-235b-a22b.config.json"));
  const ModelSpec v3 = io::load_model(root("models/hf/deepseek-v3.config.json"));
  const ClusterSpec gb200 = io::load_cluster(root("topologies/gb200-nvl72-4x64.json"));
  const ClusterSpec gb300 = io::load_cluster(root("topologies/gb300-nvl72-4x64.json"));
  struct Run {
    const ModelSpec* model;
    const ClusterSpec* cluster;
    int64_t seq, gpus, gbs, tp;
    const char* layout;
    Precision precision;
    uint32_t modules;  // selective recompute's modules; 0: none
    bool overlap = false;
    // The Qwen3 runs captured attention and the router in CUDA graphs, DeepSeek-V3's the whole
    // iteration (planner/host_time.h).
    CudaGraph graphs = CudaGraph::kAttention;
  };
  auto best = [&](const Efficiencies& eff, const Run& run) {
    const TimeContext ctx =
        make_time_context(*run.model, *run.cluster, eff, RoutingSkew{}, run.seq);
    SearchRequest req;
    req.num_gpus = run.gpus;
    req.global_batch = run.gbs;
    req.fixed = parse_parallel(run.layout);
    req.precision = run.precision;
    req.fp8_recipe = Fp8Recipe::kMxfp8;  // every FP8 run here is MXFP8 (Blackwell)
    req.recompute = run.modules ? Recompute::kSelective : Recompute::kNone;
    req.recompute_modules = run.modules;
    req.overlap = run.overlap;
    req.dispatcher = megascale::Dispatcher::kDeepEp;
    req.cuda_graph = run.graphs;
    req.megatron_only = true;
    req.threads = 1;
    const SearchResult r = search_plans(ctx, req);
    EXPECT_FALSE(r.ranked.empty()) << run.layout;
    const Plan& p = r.ranked.front();
    return std::pair{p, megatron_logged_tflops(*run.model, run.seq, run.gbs, run.tp, run.gpus,
                                               p.score.time.iteration)};
  };
  const Run anchor_run{
      &m, &gb200, 4096, 256, 8192, 1, "tp=1,pp=8,ep=8,cp=1,vpp=1,mbs=1", Precision::kBf16, 0};
  const auto [anchored, datasheet_tflops] = best(efficiencies(), anchor_run);
  EXPECT_NEAR(datasheet_tflops / 750, 1.45, 0.05);
  const TimeContext ctx = make_time_context(m, gb200, efficiencies(), RoutingSkew{}, 4096);
  const Seconds measured = anchored.score.time.iteration * (datasheet_tflops / 750);
  const AnchorFit fit = fit_anchor(ctx, anchored.choice, measured, true);
  ASSERT_TRUE(fit.converged);
  EXPECT_NEAR(fit.scale, 0.713, 0.01);
  const Efficiencies eff = scale_efficiencies(ctx.eff, fit.scale, true);
  const double short_run = best(eff, {&m, &gb300, 4096, 256, 8192, 1,
                                      "tp=1,pp=4,ep=32,cp=1,vpp=1,mbs=2", Precision::kFp8, 0})
                               .second;
  const double long_run =
      best(eff, {&m, &gb300, 131072, 128, 1024, 4, "tp=4,pp=4,ep=32,cp=4,vpp=1,mbs=1",
                 Precision::kFp8, kRecomputeMoeAct | kRecomputeLayernorm})
          .second;
  std::printf("anchored x%.3f: GB300 4K %.0f TFLOP/s (974), 128K %.0f (1150)\n", fit.scale,
              short_run, long_run);
  const double other_model =
      best(eff,
           {&v3, &gb200, 4096, 256, 4096, 1, "tp=1,pp=4,ep=64,cp=1,mbs=1,layout=Et*4|(t*4|)*14tmL",
            Precision::kFp8, kRecomputeMlaUpProj, true, CudaGraph::kFullIteration})
          .second;
  std::printf("anchored: DeepSeek-V3 on GB200 %.0f TFLOP/s (1316)\n", other_model);
  EXPECT_NEAR(short_run / 974, 1.0, 0.2);
  EXPECT_NEAR(other_model / 1316, 1.0, 0.2);
  EXPECT_LT(short_run / 974, 1.0);
  EXPECT_LT(other_model / 1316, 1.0);
  EXPECT_LT(long_run / 1150, 0.8);
}

TEST(PlannerRepro, MegaScaleFig13BandNeedsLowMfu) {
  // Why Fig. 13's 14.9-32.9 % band is out of reach at our MFU (README, paper decisions): per
  // token and layer forward, TP+TP moves eq. (1) + eq. (4) elements per GPU and SP+EP eq. (2) +
  // eq. (3). For Mixtral-8x7B (h 4096, m = 4, k = 2, n = 8) at the achievable 160 of H800's
  // 200 GB/s per direction, the difference alone takes t_x per token; a gain of at most 32.9 %
  // needs SP+EP's own time per token t >= t_x / 0.329, i.e. an MFU of at most
  // 0.329 F / (n peak t_x), with F its forward FLOPs per token and layer. That is 25-30 %; our
  // cost model gives SP+EP 49 %, the paper's own Table 3 runs 27.9-32.5 % (at 282 GFLOP/token).
  const ModelSpec m = io::load_model(root("models/mixtral-8x7b.json"));
  const double extra_elements = megascale::tp_attention_volume(1, 1, 4096, 8) +
                                megascale::tp_ffn_volume(1, 1, 4096, 8) -
                                megascale::sp_attention_volume(1, 1, 4096, 8, 4.0) -
                                megascale::ep_ffn_volume(1, 1, 4096, 8, 2);
  EXPECT_DOUBLE_EQ(extra_elements, 10304.0);
  const Seconds t_x = Bytes(extra_elements * 2.0) / gigabytes_per_sec(160);
  const double flops_per_layer =
      flops_per_token(m, 4096).forward().value() / static_cast<double>(m.num_layers);
  const double mfu_max =
      0.329 * flops_per_layer / (8.0 * teraflops_per_sec(989).value() * t_x.value());
  std::printf("SP+EP MFU at most %.3f for the band\n", mfu_max);
  EXPECT_GT(mfu_max, 0.25);
  EXPECT_LT(mfu_max, 0.30);
}
}  // namespace moe

namespace moe {

TEST(PlannerRepro, MontaPicksO1AtShortAndPipelinesAtLongSequences) {
  // MoNTA Fig. 14 on 2 x 8 A800 (IB 200 Gb/s), TP = 8, EP = 2 with experts tensor-parallel:
  // O1 at 8K, O2/O3 for long sequences. The 2x70B model is cut to 2 layers to fit the test's
  // memory; the AllToAll choice depends only on its per-layer volume b s h.
  ModelSpec m = io::load_model(root("models/monta-2x70b.json"));
  m.num_layers = 2;
  m.moe_layer = {true, true};
  const ClusterSpec cluster = io::load_cluster(root("topologies/monta-2x8-a800.json"));
  const auto curves = io::load_calibration(root("calibrate/data/monta-table8-curves.json")).curves;
  for (auto [seq, pipelined] : {std::pair{8192, false}, {65536, true}, {262144, true}}) {
    const TimeContext ctx = make_time_context(m, cluster, efficiencies(curves), RoutingSkew{}, seq);
    SearchRequest req;
    req.num_gpus = 16;
    req.global_batch = 2;
    req.fixed = parse_parallel("tp=8,etp=8,ep=2,pp=1,cp=1,vpp=1,mbs=1");
    req.recompute = Recompute::kFull;
    const SearchResult r = search_plans(ctx, req);
    ASSERT_FALSE(r.ranked.empty()) << seq;
    const monta::Strategy s = r.ranked.front().choice.alltoall;
    std::printf("seq %6d: %s\n", seq, r.ranked.front().choice.describe().c_str());
    if (pipelined) {
      EXPECT_TRUE(s == monta::Strategy::kO2 || s == monta::Strategy::kO3) << seq;
    } else {
      EXPECT_EQ(s, monta::Strategy::kO1) << seq;
    }
  }
}

}  // namespace moe

namespace moe {

TEST(PlannerRepro, MemFineModelOneNeedsChunking) {
  // MemFine Sec. 5: Model I with t = 1, p = 4, e = 32 on 64 GB GPUs, full recompute, static 43 GB
  // (Table 4) and 596,797 received tokens (capacity 596797 / (4096 x 8) = 18.2x balanced):
  // unchunked it does not fit, MACT's plan (c = 2) does.
  const ModelSpec m = io::load_model(root("models/memfine-model-1.json"));
  const ClusterSpec cluster = io::load_cluster(root("topologies/memfine-128x64gb.json"));
  RoutingSkew skew;
  skew.kind = RoutingSkew::Kind::kCapacity;
  skew.capacity_factor = 596797.0 / (4096 * 8);
  const TimeContext ctx = make_time_context(m, cluster, efficiencies(), skew, 4096);
  SearchRequest req;
  req.num_gpus = 128;
  req.global_batch = 960;
  req.fixed = parse_parallel("tp=1,pp=4,ep=32,etp=1,cp=1,vpp=1,mbs=1");
  req.recompute = Recompute::kFull;
  req.static_override = gigabytes(43.0);
  const SearchResult r = search_plans(ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  const Plan& best = r.ranked.front();
  EXPECT_TRUE(best.choice.mact);
  EXPECT_EQ(best.choice.fcda_chunks, 2);
  EXPECT_TRUE(best.score.memory.fits);
  PlanChoice unchunked = best.choice;
  unchunked.mact = false;
  unchunked.fcda_chunks = 1;
  const PlanScore one =
      score_plan(ctx, unchunked, cluster.node.gpu.hbm_capacity, 1.0, gigabytes(43.0));
  EXPECT_FALSE(one.memory.fits);
  EXPECT_NEAR(one.peak_bytes.value() / 1e9, 65.9, 0.05);
}

TEST(PlannerRepro, AptMoeGpuOnlyPipelineFitsOnlyTheSmallestModel) {
  // APTMoE Sec. IV: on 4 x A800-40GB, a GPipe pipeline in GPU memory alone (FP32 fine-tuning)
  // fits MoE-S-8 and none of the larger Table I models.
  const ClusterSpec cluster = io::load_cluster(root("topologies/aptmoe-4x-a800-40gb-c1g4.json"));
  for (auto [file, fits] : {std::pair{"aptmoe-moe-s-8.json", true},
                            {"aptmoe-moe-s-16.json", false},
                            {"aptmoe-moe-s-64.json", false},
                            {"aptmoe-moe-m-8.json", false},
                            {"aptmoe-moe-m-16.json", false},
                            {"aptmoe-moe-l-8.json", false}}) {
    const ModelSpec m = io::load_model(root(std::string("models/") + file));
    const TimeContext ctx = make_time_context(m, cluster, efficiencies(), RoutingSkew{}, 512);
    SearchRequest req;
    req.num_gpus = 4;
    req.global_batch = 4;
    req.fixed = parse_parallel("tp=1,pp=4,ep=1,etp=1,cp=1,vpp=1");
    req.precision = Precision::kFp32;
    const SearchResult r = search_plans(ctx, req);
    EXPECT_EQ(!r.ranked.empty(), fits) << file;
  }
}

}  // namespace moe

namespace moe {

TEST(PlannerRepro, AptMoeLargerModelsGetOffloadPlansThatSpeedUpWithSkew) {
  // APTMoE: models that do not fit GPU memory run with weights in host memory; the more skewed
  // the routing (larger G, eq. 2), the fewer experts are worth loading and the faster it runs.
  const ClusterSpec cluster = io::load_cluster(root("topologies/aptmoe-4x-a800-40gb-c1g4.json"));
  const ModelSpec m = io::load_model(root("models/aptmoe-moe-s-16.json"));
  SearchRequest req;
  req.num_gpus = 4;
  req.global_batch = 4;
  req.precision = Precision::kFp32;
  double last = 1e300;
  for (double g : {0.0625, 0.2, 0.4, 0.7}) {
    RoutingSkew skew;
    skew.kind = RoutingSkew::Kind::kPopularity;
    skew.proportions = {aptmoe::proportions_for_g(16, g)};
    const TimeContext ctx = make_time_context(m, cluster, efficiencies(), skew, 512);
    const std::vector<Plan> plans = offload_plans(ctx, cluster, req);
    ASSERT_FALSE(plans.empty()) << "G = " << g;
    const double t = plans.front().score.time.iteration.value();
    std::printf("G %.4f: %s, %.1f ms\n", g, plans.front().choice.describe().c_str(), t * 1e3);
    EXPECT_LT(t, last) << "G = " << g;
    EXPECT_TRUE(plans.front().choice.offload);
    EXPECT_TRUE(megatron_arguments(plans.front(), m).empty());
    last = t;
  }
}

}  // namespace moe

namespace moe {

TEST(PlannerRepro, MegaScaleSpCostsLittleParameterMemory) {
  // MegaScale-MoE Sec. 6.2: on the Fig. 13 node (8 x H800, one replica), SP attention needs
  // 1.7-8.1 % more memory for parameters, gradients and optimizer states than TP attention,
  // because the SP group is data-parallel for the replicated weights and the distributed
  // optimizer shards their states over it. Five of the six models land in that band
  // (1.7-8.2 %). DeepSeekMoE does not (14.3 %): its two shared experts are as large as its
  // attention, and SP keeps them whole on every rank too (layer_ops runs them unsplit, with no
  // TP collectives); the paper does not say where it puts shared experts.
  const ClusterSpec cluster = io::load_cluster(root("topologies/megascale-h800-240.json"));
  for (const char* file : {"megascale-internal-352b.json", "mixtral-8x7b.json",
                           "mixtral-8x22b.json", "hunyuan-large.json", "phi-3.5-moe.json"}) {
    const ModelSpec m = io::load_model(root(std::string("models/") + file));
    const TimeContext ctx = make_time_context(m, cluster, efficiencies(), RoutingSkew{}, 4096);
    auto static_bytes = [&](AttentionMode attention) {
      return score_plan(ctx, fixed("tp=8,etp=1,ep=8,dp=1,pp=1,mbs=1,gbs=32", attention, false),
                        cluster.node.gpu.hbm_capacity, 1.0)
          .memory.stages.front()
          .static_bytes.value();
    };
    const double extra =
        static_bytes(AttentionMode::kUlysses) / static_bytes(AttentionMode::kTensor) - 1.0;
    EXPECT_GE(extra, 0.016) << file;
    EXPECT_LE(extra, 0.083) << file;
  }
}

TEST(PlannerRepro, MegaScaleFig14SpSyncsLikeTp) {
  // MegaScale-MoE Fig. 14: SP and TP attention take about the same parameter-synchronisation
  // time (0.3-3.1 % apart) with 384-1,536 MB of attention parameters per GPU, 10 GB of FFN
  // parameters, SP/TP = 8 and DP = 4 or 8, thanks to the hierarchical sync of App. A.1
  // (reduce-scatter inside the node, then 1/8 of the bytes across nodes). A Mixtral-shaped
  // model is cut to L layers and its experts widened so that the sizes match. Ours: 0.7-3.3 %
  // with the two steps pipelined by DDP bucket (App. A.1, Fig. 5b); one after the other they
  // were 1.2-5.1 % apart. A flat ring over all 8 x DP ranks would send 8 times the attention
  // bytes through the NICs.
  const ClusterSpec cluster = io::load_cluster(root("topologies/megascale-h800-240.json"));
  for (auto [layers, attention_mb] : {std::pair{5, 384.0}, {10, 768.0}, {19, 1536.0}}) {
    ModelSpec m = io::load_model(root("models/mixtral-8x7b.json"));
    m.num_layers = layers;
    m.moe_layer.assign(static_cast<size_t>(layers), true);
    // 10 GB of BF16 expert weights per GPU (one of the 8 experts each): 3 h f per layer.
    m.expert_ffn_size = static_cast<int64_t>(10e9 / 2 / (3.0 * 4096 * layers));
    const TimeContext ctx = make_time_context(m, cluster, efficiencies(), RoutingSkew{}, 4096);
    const double attention_bytes = ctx.params.layers[0].attention * 2.0 * layers;
    EXPECT_NEAR(attention_bytes / 1e6 / attention_mb, 1.1, 0.1) << layers;
    for (int dp : {4, 8}) {
      const std::string layout =
          "tp=8,etp=1,ep=8,pp=1,mbs=1,dp=" + std::to_string(dp) + ",gbs=" + std::to_string(8 * dp);
      auto sync = [&](AttentionMode attention) {
        const DpSync s = dp_sync_times(ctx, fixed(layout, attention, false), 0);
        return (s.reduce_scatter + s.all_gather).value();
      };
      const double apart = sync(AttentionMode::kUlysses) / sync(AttentionMode::kTensor) - 1.0;
      std::printf("attention %4.0f MB, DP %d: SP sync %+.1f %% of TP's\n", attention_mb, dp,
                  100 * apart);
      EXPECT_GT(apart, 0.0);
      EXPECT_LT(apart, 0.035);
    }
  }
}

}  // namespace moe

namespace moe {

TEST(PlannerRepro, HostTimeBringsMicroBatchOneRunsWithinFifteenPercent) {
  // Qwen3-235B-A22B at 4K without CUDA graphs (tools/validate_moe.sh): the Megatron-MoE model
  // zoo's H100 runs and Pai-Megatron-Patch issue 658's H800 runs, step times. At micro-batch 1
  // the layers' GPU work is shorter than the host's (planner/host_time.h); without host time
  // those runs came out 14-61 % fast, with it every run is within 15 %. Three of the runs
  // fitted the defaults (H100 tp2 pp32 and H800 tp2 for the all-to-all dispatcher, H100 tp4
  // for DeepEP); the others test them.
  const ModelSpec m = io::load_model(root("models/hf/qwen3-235b-a22b.config.json"));
  const ClusterSpec h100 = io::load_cluster(root("topologies/h100-256.json"));
  const ClusterSpec h800 = io::load_cluster(root("topologies/h800-2048.json"));
  struct Run {
    const ClusterSpec* cluster;
    int64_t gbs;
    const char* layout;
    Recompute recompute;
    uint32_t modules;
    megascale::Dispatcher dispatcher;
    bool overlap;
    double measured_s;
  };
  using D = megascale::Dispatcher;
  const uint32_t act = kRecomputeMoeAct | kRecomputeLayernorm;
  const uint32_t moe = kRecomputeMoe | kRecomputeLayernorm;
  const Run runs[] = {
      {&h100, 2048, "tp=2,pp=8,ep=32,cp=1,vpp=1,mbs=1", Recompute::kNone, 0, D::kDeepEp, false,
       19.7},
      {&h100, 2048, "tp=2,pp=8,ep=32,cp=1,vpp=1,mbs=1", Recompute::kNone, 0, D::kDeepEp, true,
       17.6},
      {&h100, 2048, "tp=2,pp=32,ep=8,cp=1,vpp=1,mbs=1", Recompute::kNone, 0, D::kAllToAll, false,
       24.2},
      {&h100, 2048, "tp=4,pp=8,ep=8,cp=1,vpp=1,mbs=1", Recompute::kNone, 0, D::kDeepEp, false,
       29.0},
      {&h800, 4096, "tp=1,pp=32,ep=8,cp=1,vpp=1,mbs=4", Recompute::kFull, 0, D::kAllToAll, false,
       42.54},
      {&h800, 4096, "tp=2,pp=32,ep=8,cp=1,vpp=1,mbs=4", Recompute::kFull, 0, D::kAllToAll, false,
       43.50},
      {&h800, 2048, "tp=2,pp=32,ep=8,cp=1,vpp=1,mbs=1", Recompute::kSelective, act, D::kAllToAll,
       false, 22.42},
      {&h800, 2048, "tp=1,pp=32,ep=8,cp=1,vpp=1,mbs=1", Recompute::kSelective, moe, D::kAllToAll,
       false, 22.95},
  };
  double worst_without = 0;
  for (const Run& r : runs) {
    auto predicted = [&](const Efficiencies& eff) {
      const TimeContext ctx = make_time_context(m, *r.cluster, eff, RoutingSkew{}, 4096);
      SearchRequest req;
      req.num_gpus = 256;
      req.global_batch = r.gbs;
      req.fixed = parse_parallel(r.layout);
      req.recompute = r.recompute;
      if (r.modules) req.recompute_modules = r.modules;
      req.dispatcher = r.dispatcher;
      req.overlap = r.overlap;
      req.threads = 1;
      const SearchResult s = search_plans(ctx, req);
      EXPECT_FALSE(s.ranked.empty()) << r.layout;
      return s.ranked.empty() ? NAN : s.ranked.front().score.time.iteration.value();
    };
    const double with = predicted(efficiencies());
    const double without = predicted(without_host_time(efficiencies()));
    std::printf("%-34s measured %6.2f s, predicted %6.2f (%+.1f %%), without host %6.2f\n",
                r.layout, r.measured_s, with, 100 * (with / r.measured_s - 1), without);
    EXPECT_NEAR(with / r.measured_s, 1.0, 0.15) << r.layout;
    worst_without = std::max(worst_without, std::abs(without / r.measured_s - 1));
  }
  EXPECT_GT(worst_without, 0.4);
}

}  // namespace moe
