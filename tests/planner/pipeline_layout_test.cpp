// Megatron's flexible pipeline layout (--pipeline-model-parallel-layout) priced by the time
// and memory models and emitted as a launch argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/layer_ops.h"
#include "planner/memory_model.h"
#include "planner/planner_inputs.h"
#include "planner/search.h"

namespace moe {

TEST(PipelineLayout, TheEvenSplitWrittenAsALayoutPricesTheSame) {
  // Mixtral's 32 identical layers over pp 4 x vpp 2: four a chunk either way. Only which layers
  // sit where differs, and they are all alike.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const PlanChoice even = plan_of("tp=2,pp=4,ep=1,dp=1,vpp=2,mbs=1,gbs=64");
  const PlanChoice layout = plan_of("tp=2,pp=4,ep=1,dp=1,mbs=1,gbs=64,layout=Et*4|(t*4|)*6t*4L");
  ASSERT_EQ(*layout.parallel.vpp, 2);
  ASSERT_NO_THROW(check(layout.parallel, s.model));
  const TimeBreakdown a = estimate_time(s.ctx, even), b = estimate_time(s.ctx, layout);
  EXPECT_NEAR(b.iteration.value(), a.iteration.value(), 1e-9 * a.iteration.value());
  for (int64_t stage = 0; stage < 4; ++stage)
    EXPECT_NEAR(stage_times(s.ctx, layout, stage).forward.value(),
                stage_times(s.ctx, even, stage).forward.value(), 1e-12);
}

TEST(PipelineLayout, AnUnevenLayoutLoadsItsHeavyStage) {
  // Two more layers on the last stage's chunks: it runs 10 layers and the head, the others 7,
  // and the pipeline runs at its pace.
  const Inputs s("mixtral-8x7b.json", "h100-sxm-8.json");
  const PlanChoice even = plan_of("tp=2,pp=4,ep=1,dp=1,vpp=2,mbs=1,gbs=64");
  const PlanChoice heavy =
      plan_of("tp=2,pp=4,ep=1,dp=1,mbs=1,gbs=64,layout=Et*4|t*4|t*4|t*5|t*3|t*3|t*4|t*5L");
  ASSERT_NO_THROW(check(heavy.parallel, s.model));
  EXPECT_EQ(layers_in_stage(s.model, heavy.parallel, 3), 10);
  EXPECT_EQ(layers_in_stage(s.model, heavy.parallel, 1), 7);
  const Seconds last = stage_times(s.ctx, heavy, 3).forward;
  const Seconds middle = stage_times(s.ctx, heavy, 1).forward;
  const Seconds head =
      output_head_time(s.ctx, heavy) + cross_entropy_passes(s.ctx, heavy).forward.time;
  EXPECT_NEAR(((last - head) / (middle)), 10.0 / 7.0, 1e-9);
  EXPECT_GT(estimate_time(s.ctx, heavy).iteration, estimate_time(s.ctx, even).iteration * 1.1);
}

TEST(PipelineLayout, MtpModulesRunWhereTheLayoutPutsThem) {
  // Megatron's DeepSeek-V3 example shape at pp 8 x vpp 4: the MTP module alone in stage 6's last
  // chunk ("...|m|L"), the loss alone in stage 7's.
  const Inputs s("hf/deepseek-v3.config.json", "h100-1024.json");
  ASSERT_EQ(s.model.mtp_layers, 1);
  const PlanChoice c =
      plan_of("tp=2,pp=8,ep=64,etp=1,dp=64,mbs=1,gbs=8192,layout=Et*3|(tt|)*29,m|L");
  ASSERT_NO_THROW(check(c.parallel, s.model));
  ASSERT_EQ(mtp_stage(c.parallel), 6);
  const StageTimes mtp = mtp_stage_times(s.ctx, c);
  ASSERT_GT(mtp.forward.value(), 0.0);
  // Stages 1 and 6 hold eight and six MoE layers: stage 6 is six of stage 1's layers plus MTP.
  const StageTimes one = stage_times(s.ctx, c, 1), six = stage_times(s.ctx, c, 6);
  EXPECT_NEAR((six.forward - mtp.forward).value(), (one.forward * (6.0 / 8.0)).value(), 1e-9);
  // Stage 7: six layers and the head, no MTP.
  const StageTimes seven = stage_times(s.ctx, c, 7);
  EXPECT_NEAR(
      (seven.forward - output_head_time(s.ctx, c) - cross_entropy_passes(s.ctx, c).forward.time)
          .value(),
      (one.forward * (6.0 / 8.0)).value(), 1e-9);

  // Memory: the module's weights and the embedding it reads on stage 6, not 7.
  const MemoryReport r =
      estimate_memory(s.model, s.ctx.params, c.parallel,
                      memory_request(s.ctx, c, s.cluster.node.gpu.hbm_capacity, 1.0, std::nullopt));
  EXPECT_EQ(r.stages[6].num_moe_layers, 7);
  EXPECT_EQ(r.stages[7].num_moe_layers, 6);
  EXPECT_EQ(stage_layer_label(s.model, c.parallel, 6), "13-14, 29-30, 45-46");
  EXPECT_GT(r.stages[6].params_per_gpu, r.stages[1].params_per_gpu);

  // The launch argument replaces the split flags, quoted for the shell.
  const std::vector<std::string> args = megatron_arguments(Plan{c, {}}, s.model);
  EXPECT_NE(
      std::find(args.begin(), args.end(), "--pipeline-model-parallel-layout 'Et*3|(t*2|)*29m|L'"),
      args.end());
  for (const std::string& a : args) {
    EXPECT_EQ(a.find("--num-layers-per-virtual-pipeline-stage"), std::string::npos);
    EXPECT_EQ(a.find("--decoder-first-pipeline-num-layers"), std::string::npos);
  }
}

TEST(PipelineLayout, PlanFilesKeepTheLayout) {
  const Inputs s("hf/deepseek-v3.config.json", "h100-1024.json");
  PlanChoice c = plan_of("tp=2,pp=8,ep=64,etp=1,dp=64,mbs=1,gbs=8192,layout=Et*3|(tt|)*29,m|L");
  c.seq_len = 4096;
  const nlohmann::json j = io::plan_to_json(Plan{c, {}}, s.model, s.cluster);
  EXPECT_EQ(j["parallel"]["layout"], "Et*3|(t*2|)*29m|L");
  const PlanChoice back = io::plan_choice_from_json(j, "plan.json");
  EXPECT_EQ(back.parallel.layout, c.parallel.layout);
  EXPECT_EQ(*back.parallel.vpp, 4);
  nlohmann::json bad = j;
  bad["parallel"]["layout"] = "Et*3|(tt|)*29,mx|L";
  try {
    io::plan_choice_from_json(bad, "plan.json");
    ADD_FAILURE() << "a bad layout was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("plan.json: /parallel/layout"), std::string::npos)
        << e.what();
  }
}

TEST(PipelineLayout, TheSearchEvaluatesAFixedLayoutAndSaysWhyOneCannotRun) {
  const Inputs s("hf/deepseek-v3.config.json", "h100-1024.json");
  SearchRequest req;
  req.num_gpus = 1024;
  req.global_batch = 8192;
  req.threads = 1;
  req.fixed = parse_parallel("tp=2,pp=8,ep=64,cp=1,mbs=1,layout=Et*3|(tt|)*29,m|L");
  const SearchResult r = search_plans(s.ctx, req);
  ASSERT_FALSE(r.ranked.empty());
  for (const Plan& p : r.ranked) EXPECT_EQ(p.choice.parallel.layout, req.fixed.layout);
  // 60 decoder layers where the model has 61: the error names the count.
  req.fixed = parse_parallel("tp=2,pp=8,ep=64,cp=1,mbs=1,layout=Et*2|(tt|)*29,m|L");
  try {
    search_plans(s.ctx, req);
    ADD_FAILURE() << "a layout of 60 layers was searched";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("60 decoder layers (t), but the model has 61"),
              std::string::npos)
        << e.what();
  }
}

TEST(PipelineLayout, AFixedVppBuildsMegatronsRecipeLayouts) {
  // DeepSeek-V3's 61 layers divide over no pp x vpp. With vpp fixed the search lays them out as
  // Megatron-Bridge's recipes do: Et|(tt|)*30mL at pp 8 (H100), Et*4|(t*4|)*14tmL at pp 4
  // (GB200); with vpp free it keeps to vpp = 1 (its speed target).
  const Inputs s("hf/deepseek-v3.config.json", "h100-1024.json");
  auto layouts = [&](const std::string& fixed, int64_t gpus, int64_t gbs) {
    SearchRequest req;
    req.num_gpus = gpus;
    req.global_batch = gbs;
    req.threads = 1;
    req.top_k = 100;
    req.fixed = parse_parallel(fixed);
    std::set<std::string> out;
    for (const Plan& p : search_plans(s.ctx, req).ranked)
      out.insert(
          p.choice.parallel.layout.empty() ? "" : format_pipeline_layout(p.choice.parallel.layout));
    return out;
  };
  EXPECT_EQ(layouts("tp=2,pp=8,ep=64,cp=1,mbs=1,vpp=4", 1024, 8192),
            std::set<std::string>{"Et|(t*2|)*30mL"});
  EXPECT_EQ(layouts("tp=1,pp=4,ep=64,cp=1,mbs=1,vpp=4", 256, 4096),
            std::set<std::string>{"Et*4|(t*4|)*14tmL"});
  // With vpp free the search builds them for every vpp, so Megatron-Bridge's H100 layout is
  // among what a search at pp 8 weighs.
  EXPECT_EQ(layouts("tp=2,pp=8,ep=64,cp=1,mbs=1", 1024, 8192).count("Et|(t*2|)*30mL"), 1u);
}

}  // namespace moe
