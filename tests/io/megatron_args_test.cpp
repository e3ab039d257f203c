#include "planner/io/megatron_args.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "test_models.h"
#include "test_paths.h"

namespace moe::io {

namespace {

std::string error_of(const std::string& text, const ModelSpec& m) {
  try {
    read_megatron_arguments(text, m, "train.sh");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A plan's printed arguments as a launch script holds them: one flag a line, continued.
std::string script_of(const PlanChoice& c, const ModelSpec& m, int nvlink_domain = 8) {
  Plan plan;
  plan.choice = c;
  std::string text = "torchrun --nproc_per_node 8 --nnodes 4 pretrain_gpt.py \\\n";
  for (const std::string& a : megatron_arguments(plan, m, nvlink_domain)) text += a + " \\\n";
  return text;
}

PlanChoice choice(const std::string& layout) {
  PlanChoice c;
  c.parallel = parse_parallel(layout);
  return c;
}

// The switches and sizes a launch carries, as the plan has them.
void expect_same_run(const PlanChoice& c, const MegatronRun& r) {
  const ParallelConfig& p = c.parallel;
  EXPECT_EQ(r.choice.parallel.tp, p.tp);
  EXPECT_EQ(r.choice.parallel.pp, p.pp);
  EXPECT_EQ(r.choice.parallel.cp, p.cp);
  EXPECT_EQ(r.choice.parallel.ep, p.ep);
  EXPECT_EQ(r.choice.parallel.etp, p.etp);
  EXPECT_EQ(r.choice.parallel.mbs, p.mbs);
  EXPECT_EQ(r.choice.parallel.gbs, p.gbs);
  EXPECT_EQ(r.choice.parallel.vpp.value_or(1), p.vpp.value_or(1));
  EXPECT_EQ(r.choice.parallel.pp_first, p.pp_first);
  EXPECT_EQ(r.choice.parallel.pp_last, p.pp_last);
  EXPECT_EQ(r.choice.parallel.layout, p.layout);
  EXPECT_EQ(r.seq_len, c.seq_len);
  EXPECT_EQ(r.gpus, 32);
  EXPECT_EQ(r.choice.attention, c.attention);
  EXPECT_EQ(r.choice.recompute, c.recompute);
  if (c.recompute == Recompute::kSelective) {
    EXPECT_EQ(r.choice.recompute_modules, c.recompute_modules);
  }
  EXPECT_EQ(r.choice.offload_modules, c.offload_modules);
  EXPECT_DOUBLE_EQ(r.choice.optimizer_offload, c.optimizer_offload);
  EXPECT_EQ(r.choice.precision, c.precision);
  if (c.precision == Precision::kFp8) {
    EXPECT_EQ(r.choice.fp8_recipe, c.fp8_recipe);
  }
  EXPECT_EQ(r.choice.zero_stage, c.zero_stage);
  EXPECT_EQ(r.choice.dp_bf16_compression, c.dp_bf16_compression);
  EXPECT_EQ(r.choice.adam, c.adam);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(r.choice), optimizer_state_bytes(c));
  EXPECT_EQ(r.choice.dispatcher, c.dispatcher);
  EXPECT_EQ(r.choice.overlap, c.overlap);
  EXPECT_EQ(r.choice.permute_fusion, c.permute_fusion);
  EXPECT_EQ(r.choice.attention_kernel, c.attention_kernel);
  EXPECT_EQ(r.choice.cross_entropy, c.cross_entropy);
  EXPECT_EQ(r.choice.cuda_graph, c.cuda_graph);
  EXPECT_TRUE(r.ignored.empty()) << fmt::format("{}", fmt::join(r.ignored, " "));
}

}  // namespace

TEST(MegatronArgs, APlansPrintedArgumentsReadBackAsThePlan) {
  const ModelSpec mixtral = testing_models::mixtral_8x7b();
  const ModelSpec v3 =
      io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/hf/deepseek-v3.config.json");
  struct Case {
    const ModelSpec* model;
    std::string layout;
    void (*tweak)(PlanChoice&);
  };
  const std::vector<Case> cases = {
      // TP with sequence parallelism, the all-to-all dispatcher overlapped, selective recompute.
      {&mixtral, "tp=2,pp=4,ep=8,etp=1,cp=1,vpp=1,mbs=1,gbs=256",
       [](PlanChoice& c) {
         c.recompute = Recompute::kSelective;
         c.recompute_modules = kRecomputeMoeAct | kRecomputeLayernorm | kRecomputeCoreAttn;
         c.dp_bf16_compression = true;
       }},
      // Uneven stages, full recompute, FP8, ZeRO-3 on Megatron-FSDP, no overlap, the native loss.
      {&mixtral, "tp=1,pp=4,ep=4,etp=1,cp=2,vpp=1,mbs=2,gbs=512,pp_first=7,pp_last=7",
       [](PlanChoice& c) {
         c.recompute = Recompute::kFull;
         c.precision = Precision::kFp8;
         c.fp8_recipe = Fp8Recipe::kTensorwise;
         c.zero_stage = 3;
         c.overlap = false;
         c.cross_entropy = CrossEntropy::kNative;
         c.permute_fusion = false;
       }},
      // SP attention (Megatron's all-to-all context parallelism), the all-gather dispatcher, the
      // optimizer's and activations' offload, CUDA graphs, expert TP.
      {&mixtral, "tp=4,pp=1,ep=2,etp=4,cp=1,vpp=1,mbs=1,gbs=64",
       [](PlanChoice& c) {
         c.attention = AttentionMode::kUlysses;
         c.dispatcher = megascale::Dispatcher::kAllToAll;
         c.optimizer_offload = 0.5;
         c.offload_modules = kOffloadExpertFc1 | kOffloadMoeAct;
         c.cuda_graph = CudaGraph::kAttention;
         c.attention_kernel = AttentionKernel::kUnfused;
       }},
      // Plain DDP.
      {&mixtral, "tp=2,pp=1,ep=4,etp=1,cp=1,vpp=1,mbs=1,gbs=64",
       [](PlanChoice& c) { c.zero_stage = 0; }},
      // Ulysses nested in a ring (a2a+p2p), interleaved by layers a virtual stage.
      {&mixtral, "tp=2,pp=2,ep=8,etp=1,cp=2,vpp=4,mbs=1,gbs=128",
       [](PlanChoice& c) {
         c.attention = AttentionMode::kUlysses;
         c.dispatcher = megascale::Dispatcher::kAllGather;
       }},
      // DeepSeek-V3 as its recipe runs it: the layout, blockwise FP8, DeepEP, the full graph,
      // BF16 Adam moments.
      {&v3, "tp=2,pp=8,ep=64,etp=1,cp=1,mbs=1,gbs=8192,layout=Et|(tt|)*30mL",
       [](PlanChoice& c) {
         c.precision = Precision::kFp8;
         c.fp8_recipe = Fp8Recipe::kBlockwise;
         c.dispatcher = megascale::Dispatcher::kDeepEp;
         c.recompute = Recompute::kSelective;
         c.recompute_modules = kRecomputeMlaUpProj | kRecomputeMlp;
         c.cuda_graph = CudaGraph::kFullIteration;
         c.adam = {true, StateDtype::kFp32, StateDtype::kBf16, StateDtype::kBf16};
       }},
      // FP16 master weights and FP8 moments of either kind, over BF16 weights.
      {&mixtral, "tp=1,pp=2,ep=8,etp=1,cp=1,vpp=1,mbs=1,gbs=256",
       [](PlanChoice& c) {
         c.adam = {true, StateDtype::kFp16, StateDtype::kFp8, StateDtype::kBf16};
         c.dp_bf16_compression = true;
       }},
  };
  for (const Case& k : cases) {
    PlanChoice c = choice(k.layout);
    c.seq_len = 4096;
    k.tweak(c);
    if (!c.parallel.layout.empty()) apply_layout(c.parallel);
    const std::string text = script_of(c, *k.model);
    SCOPED_TRACE(text);
    const MegatronRun r = read_megatron_arguments(text, *k.model, "train.sh");
    expect_same_run(c, r);
  }
}

TEST(MegatronArgs, AFlagLeftOutIsMegatronsDefault) {
  const ModelSpec m = testing_models::mixtral_8x7b();
  const MegatronRun r = read_megatron_arguments(
      "--tensor-model-parallel-size 2 --expert-model-parallel-size 4 --recompute-granularity "
      "selective --cross-entropy-loss-fusion --fp16",
      m, "train.sh");
  EXPECT_EQ(r.choice.parallel.tp, 2);
  EXPECT_EQ(r.choice.parallel.pp, 1);
  EXPECT_EQ(r.choice.parallel.cp, 1);
  EXPECT_EQ(r.choice.parallel.etp, 2);  // expert TP follows TP
  EXPECT_EQ(r.choice.parallel.vpp, 1);
  EXPECT_FALSE(r.choice.parallel.mbs);  // Megatron requires it: left to the search
  EXPECT_FALSE(r.choice.parallel.gbs);
  EXPECT_EQ(r.choice.zero_stage, 0);
  EXPECT_FALSE(r.choice.dp_bf16_compression);
  EXPECT_EQ(r.choice.precision, Precision::kBf16);  // FP16, priced as BF16
  EXPECT_EQ(r.choice.dispatcher, megascale::Dispatcher::kAllGather);
  EXPECT_FALSE(r.choice.permute_fusion);
  EXPECT_FALSE(r.choice.overlap);
  EXPECT_EQ(r.choice.recompute, Recompute::kSelective);
  EXPECT_EQ(r.choice.recompute_modules, kRecomputeCoreAttn);  // Megatron's default modules
  EXPECT_EQ(r.choice.cross_entropy, CrossEntropy::kNative);
  EXPECT_EQ(r.choice.cuda_graph, CudaGraph::kNone);
  EXPECT_FALSE(r.gpus);
  auto noted = [&](const std::string& what) {
    return std::any_of(r.notes.begin(), r.notes.end(),
                       [&](const std::string& n) { return n.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(noted("--fp16"));
  EXPECT_TRUE(noted("--sequence-parallel"));
  EXPECT_TRUE(noted("--moe-grouped-gemm"));
  EXPECT_TRUE(noted("--overlap-grad-reduce"));
  // No flag at all: FP32, as Megatron trains without --bf16.
  EXPECT_EQ(read_megatron_arguments("--micro-batch-size 1", m, "x").choice.precision,
            Precision::kFp32);
}

TEST(MegatronArgs, AScriptReadsAsItsShellWouldPassIt) {
  const ModelSpec m = testing_models::mixtral_8x7b();
  const std::string script = R"(#!/bin/bash
GPUS_PER_NODE=8
DISTRIBUTED_ARGS=(--nproc-per-node=8 --nnodes 2 --master_addr $MASTER_ADDR)
MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32
    --group-query-attention --num-query-groups 8   # GQA
    --seq-length 8192 --lr 1e-4 --swiglu
)
PARALLEL="--tensor-model-parallel-size 4 \
  --pipeline-model-parallel-size=2 \
  --expert-model-parallel-size '8' --expert-tensor-parallel-size 1 \
  --num-layers-per-virtual-pipeline-stage 4 --sequence-parallel \
  --moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity \
  --no-position-embedding --some-new-flag 3"
# --pipeline-model-parallel-size 8   (an old setting, commented out)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} $PARALLEL --bf16
)";
  const MegatronRun r = read_megatron_arguments(script, m, "train.sh");
  EXPECT_EQ(r.choice.parallel.tp, 4);
  EXPECT_EQ(r.choice.parallel.pp, 2);
  EXPECT_EQ(r.choice.parallel.ep, 8);
  EXPECT_EQ(r.choice.parallel.etp, 1);
  EXPECT_EQ(r.choice.parallel.vpp, 4);  // 32 layers, 4 a virtual stage, over 2 stages
  EXPECT_EQ(r.seq_len, 8192);
  EXPECT_EQ(r.gpus, 16);
  EXPECT_EQ(r.capacity_factor, 1.25);
  EXPECT_EQ(r.choice.precision, Precision::kBf16);
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"--no-position-embedding", "--some-new-flag"}));
}

TEST(MegatronArgs, ArgumentsThatCannotRunHereAreRefusedWithTheirFlag) {
  const ModelSpec m = testing_models::mixtral_8x7b();
  auto refuses = [&](const std::string& text, const std::string& expected) {
    const std::string e = error_of(text, m);
    EXPECT_NE(e.find(expected), std::string::npos) << text << " -> '" << e << "'";
  };
  refuses("--tensor-model-parallel-size $TP",
          "train.sh: --tensor-model-parallel-size: '$TP' is a shell variable");
  refuses("--micro-batch-size two", "--micro-batch-size: 'two' is not a positive integer");
  refuses("--micro-batch-size --bf16", "--micro-batch-size: has no value");
  refuses("--bf16=yes", "--bf16: takes no value");
  refuses("--num-layers 40", "--num-layers: says 40, model Mixtral-8x7B has 32 layers");
  refuses("--num-experts 16", "--num-experts: says 16, model Mixtral-8x7B has 8 routed experts");
  refuses("--group-query-attention --num-query-groups 4", "--num-query-groups: says 4");
  refuses("--num-attention-heads 32", "--group-query-attention: absent");
  refuses("--multi-latent-attention", "has no multi-latent attention");
  refuses("--fp8-format e4m3 --fp8-recipe custom", "--fp8-recipe: 'custom' is not one of");
  refuses("--moe-token-dispatcher-type ring", "--moe-token-dispatcher-type: 'ring'");
  refuses("--tensor-model-parallel-size 2 --context-parallel-size 2 --cp-comm-type a2a",
          "--cp-comm-type: a2a beside --tensor-model-parallel-size 2");
  refuses(
      "--context-parallel-size 8 --cp-comm-type a2a+p2p "
      "--hierarchical-context-parallel-sizes 2 2",
      "2 x 2 is not --context-parallel-size 8");
  refuses("--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 5",
          "do not divide model Mixtral-8x7B's 32 layers");
  refuses("--recompute-granularity selective --recompute-modules attention",
          "--recompute-modules: 'attention' is not a module");
  refuses("--optimizer-cpu-offload --optimizer-offload-fraction 1.5",
          "--optimizer-offload-fraction: '1.5' is not a number in (0, 1]");
  refuses("--fine-grained-activation-offloading", "names no modules");
  refuses("# nothing but a comment\n", "train.sh: no Megatron-LM argument");
  EXPECT_NE(
      error_of("--expert-model-parallel-size 8", testing_models::dense_mixtral()).find("is dense"),
      std::string::npos);
}

TEST(MegatronArgs, ThePrecisionAwareOptimizerReadsItsTypes) {
  // Megatron-Core's DeepSeek-V3 GB200 guide keeps BF16 moments beside FP32 master weights and
  // MXFP8 weights: 4 + 2 + 2 bytes a parameter (FP8 weights leave no BF16 bits to complete).
  const ModelSpec m = testing_models::mixtral_8x7b();
  const std::string base = "--use-distributed-optimizer --bf16 --use-precision-aware-optimizer ";
  MegatronRun r = read_megatron_arguments(
      base +
          "--fp8-format e4m3 --fp8-recipe mxfp8 --fp8-param-gather --main-grads-dtype fp32 "
          "--main-params-dtype fp32 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16",
      m, "train.sh");
  EXPECT_TRUE(r.choice.adam.precision_aware);
  EXPECT_EQ(r.choice.adam.exp_avg, StateDtype::kBf16);
  EXPECT_EQ(r.choice.adam.exp_avg_sq, StateDtype::kBf16);
  EXPECT_FALSE(r.choice.dp_bf16_compression);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(r.choice), 8.0);
  // BF16 weights: the master weight is their 16-bit remainder (6 bytes); the flag alone, with
  // FP32 moments, still stores remainders (10); BF16 main gradients are a BF16 gradient buffer.
  r = read_megatron_arguments(base + "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", m, "t.sh");
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(r.choice), 6.0);
  r = read_megatron_arguments(base + "--main-grads-dtype bf16", m, "t.sh");
  EXPECT_TRUE(r.choice.adam.precision_aware);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(r.choice), 10.0);
  EXPECT_TRUE(r.choice.dp_bf16_compression);
  EXPECT_DOUBLE_EQ(gradient_bytes(r.choice), 2.0);
  // Beside the CPU offload (whose guide asks for the flag) FP32 states stay Megatron's Adam.
  r = read_megatron_arguments(base + "--optimizer-cpu-offload", m, "t.sh");
  EXPECT_FALSE(r.choice.adam.precision_aware);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(r.choice), 12.0);
  // What Megatron refuses.
  EXPECT_NE(error_of("--use-distributed-optimizer --bf16 --exp-avg-dtype bf16", m)
                .find("--use-precision-aware-optimizer: absent"),
            std::string::npos);
  EXPECT_NE(error_of("--bf16 --use-precision-aware-optimizer", m)
                .find("needs the distributed optimizer (--use-distributed-optimizer)"),
            std::string::npos);
  EXPECT_NE(error_of(base + "--main-params-dtype bf16", m)
                .find("--main-params-dtype: 'bf16' is not one of fp32, fp16"),
            std::string::npos);
}

TEST(MegatronArgs, MegatronCoresDeepSeekV3Gb200LaunchReadsAsItRan) {
  // The flags of Megatron-LM's DeepSeek-V3 GB200 guide (970 TFLOP/s a GPU), as a launch holds
  // them (tests/data): the flexible layout over 8 stages, MXFP8 with FP8 weights, BF16 Adam
  // moments, HybridEP, CUDA graphs of attention and the router, no EP overlap, no MTP module.
  ModelSpec v3 =
      io::load_model(std::string(MOEPLAN_SOURCE_DIR) + "/models/hf/deepseek-v3.config.json");
  v3.mtp_layers = 0;
  const MegatronRun r = load_megatron_arguments(
      std::string(MOEPLAN_TEST_DATA) + "/megatron-deepseek-v3-gb200-launch.sh", v3);
  const ParallelConfig& p = r.choice.parallel;
  EXPECT_EQ(p.tp, 1);
  EXPECT_EQ(p.pp, 8);
  EXPECT_EQ(p.ep, 32);
  EXPECT_EQ(p.vpp, 4);
  EXPECT_EQ(p.mbs, 1);
  EXPECT_EQ(p.gbs, 2048);
  EXPECT_EQ(r.seq_len, 4096);
  EXPECT_EQ(r.choice.precision, Precision::kFp8);
  EXPECT_EQ(r.choice.fp8_recipe, Fp8Recipe::kMxfp8);
  EXPECT_EQ(r.choice.adam,
            (AdamStates{true, StateDtype::kFp32, StateDtype::kBf16, StateDtype::kBf16}));
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(r.choice), 8.0);  // FP8 weights keep the whole master
  EXPECT_EQ(r.choice.recompute, Recompute::kSelective);
  EXPECT_EQ(r.choice.recompute_modules, kRecomputeMoeAct | kRecomputeMlp);
  EXPECT_EQ(r.choice.dispatcher, megascale::Dispatcher::kDeepEp);
  EXPECT_FALSE(r.choice.overlap);
  EXPECT_EQ(r.choice.cuda_graph, CudaGraph::kAttention);
  EXPECT_EQ(r.choice.zero_stage, 1);
  EXPECT_EQ(r.ignored,
            (std::vector<std::string>{"--reuse-grad-buf-for-mxfp8-param-ag", "--te-rng-tracker",
                                      "--moe-hybridep-num-sms", "--moe-router-fusion"}));
}

TEST(MegatronArgs, ALogsArgumentsBlockReadsAsTheRunItLogged) {
  // The block Megatron-LM prints at start-up (megatron/training/arguments.py, _print_args):
  // every field resolved, behind the launcher's rank prefix. The derived splits (vpp beside the
  // layers a virtual stage) and the world size come with it; the fields not priced are counted.
  const ModelSpec m = testing_models::mixtral_8x7b();
  const std::string log = std::string(MOEPLAN_TEST_DATA) + "/megatron-mixtral-arguments.log";
  const MegatronRun r = load_megatron_arguments(log, m);
  EXPECT_EQ(r.choice.parallel.tp, 2);
  EXPECT_EQ(r.choice.parallel.pp, 4);
  EXPECT_EQ(r.choice.parallel.vpp, 4);
  EXPECT_EQ(r.choice.parallel.cp, 1);
  EXPECT_EQ(r.choice.parallel.ep, 8);
  EXPECT_EQ(r.choice.parallel.etp, 1);
  EXPECT_EQ(r.choice.parallel.mbs, 1);
  EXPECT_EQ(r.choice.parallel.gbs, 256);
  EXPECT_EQ(r.seq_len, 4096);
  EXPECT_EQ(r.gpus, 64);
  EXPECT_EQ(r.choice.precision, Precision::kBf16);
  EXPECT_EQ(r.choice.zero_stage, 1);
  EXPECT_EQ(r.choice.recompute, Recompute::kSelective);
  EXPECT_EQ(r.choice.recompute_modules, kRecomputeMoeAct | kRecomputeLayernorm);
  EXPECT_EQ(r.choice.dispatcher, megascale::Dispatcher::kAllToAll);
  EXPECT_TRUE(r.choice.permute_fusion);
  EXPECT_FALSE(r.choice.overlap);  // neither the EP nor the TP overlap flag
  EXPECT_EQ(r.choice.cross_entropy, CrossEntropy::kNative);
  EXPECT_EQ(r.choice.attention_kernel, AttentionKernel::kFused);
  EXPECT_TRUE(r.ignored.empty());
  // Its training lines: ten iterations, the median past the first (a warm-up of 5,230 ms).
  ASSERT_EQ(r.logged_iteration_ms.size(), 10u);
  EXPECT_DOUBLE_EQ(r.logged_iteration_ms.front(), 5230.4);
  EXPECT_DOUBLE_EQ(*typical_logged_iteration_ms(r.logged_iteration_ms), 4105.0);
  EXPECT_DOUBLE_EQ(*typical_logged_iteration_ms({9.0, 1.0, 3.0}), 2.0);
  EXPECT_FALSE(typical_logged_iteration_ms({1.0}));
  // Its memory reports (MiB): the busiest rank's max allocated and max reserved.
  ASSERT_EQ(r.logged_memory.size(), 2u);
  EXPECT_EQ(r.logged_memory[1].rank, 56);
  EXPECT_DOUBLE_EQ(r.logged_memory[1].max_allocated_bytes, 27104.2 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(r.logged_memory[1].max_reserved_bytes, 30410.0 * 1024 * 1024);
  // A rank's later report raises its peak; a report without a rank is one entry of its own.
  const std::vector<LoggedMemory> reports = logged_memory_reports(
      "[Rank 3] memory (MB) | allocated: 1 | max allocated: 10 | reserved: 2 | max reserved: 20\n"
      "[Rank 3] memory (MB) | allocated: 1 | max allocated: 12 | reserved: 2 | max reserved: 15\n"
      "(after 1 iterations) memory (MB) | allocated: 1 | max allocated: 5 | reserved: 2\n");
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_DOUBLE_EQ(reports[0].max_allocated_bytes, 12.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(reports[0].max_reserved_bytes, 20.0 * 1024 * 1024);
  EXPECT_FALSE(reports[1].rank);
  EXPECT_TRUE(logged_memory_reports("no reports here").empty());
  EXPECT_NE(std::find_if(r.notes.begin(), r.notes.end(),
                         [](const std::string& n) {
                           return n.starts_with("6 other arguments of the log read past");
                         }),
            r.notes.end())
      << fmt::format("{}", fmt::join(r.notes, "\n"));
  // A field of 48 characters or more prints without dots and still reads.
  int64_t others = 0;
  const auto words = logged_argument_words(
      "------ arguments ------\n  tensor_model_parallel_size_of_some_future_field_x  7\n"
      "  micro_batch_size ...... 3\n  seq_length ........ 2048.........default\n"
      "------ end of arguments ------\n",
      &others);
  ASSERT_TRUE(words);
  // (Megatron-DeepSpeed's "default" column taken off the value.)
  EXPECT_EQ(*words, (std::vector<std::string>{"--micro-batch-size", "3", "--seq-length", "2048"}));
  EXPECT_EQ(others, 1);
  // A script is not a log.
  EXPECT_FALSE(
      logged_argument_words("torchrun  pretrain_gpt.py --tensor-model-parallel-size 2\n", &others));
}

}  // namespace moe::io
