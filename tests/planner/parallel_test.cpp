#include "planner/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "planner/errors.h"
#include "test_models.h"

namespace moe {

TEST(Parallel, ParsesEveryKey) {
  const ParallelConfig p = parse_parallel("tp=1,pp=4,ep=32,etp=1,dp=32,cp=1,vpp=1,mbs=1,gbs=960");
  EXPECT_EQ(*p.tp, 1);
  EXPECT_EQ(*p.pp, 4);
  EXPECT_EQ(*p.ep, 32);
  EXPECT_EQ(*p.gbs, 960);
  EXPECT_FALSE(p.edp.has_value());
}

TEST(Parallel, EmptyTextIsAnEmptyLayout) {
  EXPECT_FALSE(parse_parallel("").tp.has_value());
}

TEST(Parallel, RejectsBadItems) {
  EXPECT_THROW(parse_parallel("tp=0"), InputError);
  EXPECT_THROW(parse_parallel("tp=-2"), InputError);
  EXPECT_THROW(parse_parallel("tp=two"), InputError);
  EXPECT_THROW(parse_parallel("xp=2"), InputError);
  EXPECT_THROW(parse_parallel("tp=2,tp=4"), InputError);
  EXPECT_THROW(parse_parallel("tp"), InputError);
  EXPECT_THROW(parse_parallel("tp=2,,pp=2"), InputError);
  // A size past int64 is named as too large, not as something other than an integer.
  try {
    parse_parallel("tp=99999999999999999999");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
  }
}

TEST(Parallel, DerivesDpFromTheExpertSide) {
  // Folding: tp*cp*dp = etp*ep*edp, so ep=32 with tp=cp=1 needs dp=32.
  const ParallelConfig p = resolve(parse_parallel("tp=1,pp=4,ep=32"));
  EXPECT_EQ(*p.dp, 32);
  EXPECT_EQ(*p.edp, 1);
  EXPECT_EQ(p.world(), 128);
}

TEST(Parallel, DerivesExpertDp) {
  const ParallelConfig p = resolve(parse_parallel("tp=2,dp=8,ep=4"));
  EXPECT_EQ(*p.edp, 4);  // 2*8 / 4
}

TEST(Parallel, RejectsAFoldingThatCannotHold) {
  EXPECT_THROW(resolve(parse_parallel("tp=1,pp=4,ep=32,dp=1")), ConfigError);
  EXPECT_THROW(resolve(parse_parallel("tp=2,dp=2,ep=4,edp=2")), ConfigError);
}

TEST(Parallel, ChecksDivisibilityAgainstTheModel) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 heads, 8 KV heads, 8 experts, 32 layers
  EXPECT_NO_THROW(check(resolve(parse_parallel("tp=8,ep=8,dp=1")), m));
  EXPECT_THROW(check(resolve(parse_parallel("tp=16")), m), ConfigError);           // 8 KV heads
  EXPECT_THROW(check(resolve(parse_parallel("tp=1,ep=3,dp=3")), m), ConfigError);  // 8 experts
  EXPECT_THROW(check(resolve(parse_parallel("pp=64")), m), ConfigError);           // 32 layers
  EXPECT_THROW(check(resolve(parse_parallel("pp=2,vpp=32")), m), ConfigError);
  EXPECT_THROW(check(resolve(parse_parallel("dp=4,mbs=1,gbs=10")), m), ConfigError);
}

TEST(Parallel, FixedSizesNameTheOneThatRulesEveryLayoutOut) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 heads, 8 KV heads, 8 experts, 32 layers
  auto why = [&](const char* fixed, int64_t world, int64_t seq = 4096, int64_t gbs = 64) {
    return fixed_sizes_problem(parse_parallel(fixed), m, world, seq, gbs).value_or("");
  };
  EXPECT_EQ(why("tp=8,pp=2", 8), "tp=8 x pp=2 = 16 GPUs does not divide 8");
  EXPECT_EQ(why("ep=16", 8), "ep=16 does not divide 8 GPUs");
  EXPECT_EQ(why("etp=2,ep=8,pp=4", 32), "etp=2 x ep=8 x pp=4 = 64 GPUs does not divide 32");
  EXPECT_EQ(why("tp=3", 24), "tp=3: 32 attention heads are not divisible by tp");
  EXPECT_EQ(why("ep=3", 24), "ep=3: 8 experts are not divisible by ep");
  EXPECT_EQ(why("pp=64", 64).substr(0, 6), "pp=64,");  // 32 layers
  EXPECT_EQ(why("cp=4", 8, 4100).substr(0, 5), "cp=4:");
  EXPECT_EQ(why("mbs=3", 8), "mbs=3: global batch 64 is not divisible by 3");
  EXPECT_EQ(why("dp=2,mbs=3", 8, 4096, 12), "");  // 12 = 2 x 3 x 2 micro-batches
  EXPECT_EQ(why("dp=4,mbs=2", 8, 4096, 12), "mbs=2 x dp=4: global batch 12 is not divisible by 8");
  // vpp alone leaves pp to the search; only their combination could fail.
  EXPECT_EQ(why("vpp=2", 8), "");
  EXPECT_EQ(why("tp=8,ep=8", 8), "");
}

TEST(Parallel, StagesTileTheLayersInOrderForEverySplit) {
  // chunk_layers finds a stage's first layer in closed form; it must agree with adding the
  // stages before it, for even splits, uneven ones (the remainder on the first middle stages)
  // and lighter ends, interleaved or not.
  ModelSpec m = testing_models::mixtral_8x7b();
  for (int64_t layers : {7, 32, 61, 94}) {
    m.num_layers = layers;
    for (int64_t pp = 1; pp <= 9; ++pp) {
      for (int64_t first : {0, 1, 3}) {
        for (int64_t last : {0, 2}) {
          for (int64_t vpp : {1, 2}) {
            ParallelConfig p;
            p.pp = pp;
            p.vpp = vpp;
            if (first > 0) p.pp_first = first;
            if (last > 0) p.pp_last = last;
            int64_t next = 0;
            for (int64_t s = 0; s < pp; ++s) {
              EXPECT_EQ(chunk_layers(m, p, s, 0).begin, next)
                  << "layers " << layers << " pp " << pp << " first " << first << " last " << last
                  << " stage " << s;
              EXPECT_EQ(chunk_layers(m, p, s, vpp - 1).end, next + layers_in_stage(m, p, s));
              next += layers_in_stage(m, p, s);
            }
          }
        }
      }
    }
  }
}

TEST(Parallel, EndStagesTakeTheirOwnLayerCounts) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 layers
  // pp = 5 cannot split 32 layers evenly; with 5 on the first and 3 on the last stage the
  // other 24 split 8 / 8 / 8.
  EXPECT_THROW(check(resolve(parse_parallel("pp=5")), m), ConfigError);
  const ParallelConfig p = resolve(parse_parallel("pp=5,pp_first=5,pp_last=3"));
  EXPECT_NO_THROW(check(p, m));
  EXPECT_EQ(layers_in_stage(m, p, 0), 5);
  EXPECT_EQ(layers_in_stage(m, p, 1), 8);
  EXPECT_EQ(layers_in_stage(m, p, 3), 8);
  EXPECT_EQ(layers_in_stage(m, p, 4), 3);
  EXPECT_EQ(chunk_layers(m, p, 2, 0).begin, 13);
  EXPECT_EQ(stage_layer_label(m, p, 2), "13-20");
  int64_t total = 0;
  for (int64_t s = 0; s < 5; ++s) total += layers_in_stage(m, p, s);
  EXPECT_EQ(total, 32);
  EXPECT_THROW(check(resolve(parse_parallel("pp=5,pp_first=4,pp_last=3")), m),
               ConfigError);  // 25 over 3
  EXPECT_THROW(check(resolve(parse_parallel("pp=4,vpp=2,pp_first=2")), m), ConfigError);
}

TEST(Parallel, MegatronLayoutStringsUnrollAsMegatronDoes) {
  // Megatron's docs example for DeepSeek-V3 at pp 16, vpp 2, its cosmetic comma included.
  const PipelineLayout dsv3 = parse_pipeline_layout("Et*3|(tt|)*29,m|L", "--parallel");
  ASSERT_EQ(dsv3.decoder_layers.size(), 32u);
  EXPECT_EQ(dsv3.decoder_layers.front(), 3);
  EXPECT_EQ(dsv3.decoder_layers[1], 2);
  EXPECT_EQ(dsv3.decoder_layers[30], 0);
  EXPECT_EQ(dsv3.decoder_layers[31], 0);
  EXPECT_EQ(dsv3.mtp, 1);
  EXPECT_EQ(dsv3.mtp_stage, 30);
  // Formatting folds equal neighbours and parses back to the same stages.
  const PipelineLayout l{{1, 2, 2, 2, 0, 0, 1}, 2, 6};
  const std::string text = format_pipeline_layout(l);
  EXPECT_EQ(text, "Et|(t*2|)*3(|)*2tm*2L");
  EXPECT_EQ(parse_pipeline_layout(text, "--parallel"), l);
  EXPECT_EQ(format_pipeline_layout(dsv3), "Et*3|(t*2|)*29m|L");
  EXPECT_EQ(parse_pipeline_layout(format_pipeline_layout(dsv3), "--parallel"), dsv3);
  EXPECT_EQ(format_pipeline_layout({{4}, 0, -1}), "Et*4L");
  // Megatron's DeepSeek-V3 example at pp 16: the MTP module on stage 14's last chunk.
  const ParallelConfig p = parse_parallel("pp=16,layout=Et*3|(tt|)*29m|L");
  EXPECT_EQ(*p.vpp, 2);
  EXPECT_EQ(mtp_stage(p), 14);
  EXPECT_EQ(mtp_stage(resolve(parse_parallel("pp=4"))), 3);
}

TEST(Parallel, LayoutErrorsNameTheField) {
  auto message = [](const std::string& text) {
    try {
      parse_parallel(text);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("pp=2,layout=tt|ttL").find("first virtual stage must start with E"),
            std::string::npos);
  EXPECT_NE(message("pp=2,layout=Ett|tt").find("must end with L"), std::string::npos);
  EXPECT_NE(message("pp=2,layout=Etx|ttL").find("'x' is not a layer"), std::string::npos);
  EXPECT_NE(message("pp=2,layout=Emt|ttL").find("virtual stage 0"), std::string::npos);
  EXPECT_NE(message("pp=2,layout=Etm|ttL").find("before the MTP"), std::string::npos);
  EXPECT_NE(message("pp=2,layout=Etm|mL").find("share one virtual stage"), std::string::npos);
  EXPECT_NE(message("pp=2,vpp=2,layout=Et|tm||L").find("last chunk"), std::string::npos);
  EXPECT_NE(message("layout=Et|tL").find("needs pp"), std::string::npos);
  EXPECT_NE(message("pp=3,layout=Et|tL").find("not a multiple of pp=3"), std::string::npos);
  EXPECT_NE(message("pp=2,vpp=2,layout=Et|tL").find("make vpp=1"), std::string::npos);
  // Megatron's cosmetic commas run up to the next size.
  EXPECT_EQ(parse_parallel("pp=3,layout=Et|(tt|)*2,t|t|L,mbs=2").layout.decoder_layers,
            (std::vector<int64_t>{1, 2, 2, 1, 1, 0}));
  EXPECT_EQ(*parse_parallel("pp=3,layout=Et|(tt|)*2,t|t|L,mbs=2").mbs, 2);
  EXPECT_NE(message("pp=2,pp_first=1,layout=Et|tL").find("give one"), std::string::npos);
  EXPECT_NE(message("pp=2,layout=Et|tL,layout=Et|tL").find("given twice"), std::string::npos);
}

TEST(Parallel, LayoutChunksInterleaveOverTheStages) {
  const ModelSpec m = testing_models::mixtral_8x7b();  // 32 layers
  // pp 2, vpp 3: virtual stages 0..5 hold 3, 6, 6, 6, 6, 5 layers; stage s runs virtual
  // stages s, s + 2 and s + 4, Megatron's order.
  const ParallelConfig p = resolve(parse_parallel("pp=2,layout=Et*3|(t*6|)*4t*5L"));
  EXPECT_EQ(*p.vpp, 3);
  EXPECT_NO_THROW(check(p, m));
  EXPECT_EQ(chunk_layers(m, p, 0, 0).begin, 0);
  EXPECT_EQ(chunk_layers(m, p, 0, 0).end, 3);
  EXPECT_EQ(chunk_layers(m, p, 1, 0).begin, 3);
  EXPECT_EQ(chunk_layers(m, p, 0, 1).begin, 9);
  EXPECT_EQ(chunk_layers(m, p, 1, 2).end, 32);
  EXPECT_EQ(layers_in_stage(m, p, 0), 3 + 6 + 6);
  EXPECT_EQ(layers_in_stage(m, p, 1), 6 + 6 + 5);
  EXPECT_EQ(stage_layer_label(m, p, 0), "0-2, 9-14, 21-26");
  std::vector<int64_t> seen;
  for (int64_t s = 0; s < 2; ++s)
    for_each_stage_layer(m, p, s, [&](int64_t l) { seen.push_back(l); });
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), 32u);
  for (int64_t l = 0; l < 32; ++l) EXPECT_EQ(seen[static_cast<size_t>(l)], l);
  // The layout round-trips through the --parallel text.
  EXPECT_EQ(resolve(parse_parallel(p.to_string())).layout, p.layout);
  // Counts that miss the model, or MTP modules it does not train, are refused.
  EXPECT_THROW(check(resolve(parse_parallel("pp=2,layout=Et*3|(t*6|)*4t*4L")), m), ConfigError);
  EXPECT_THROW(check(resolve(parse_parallel("pp=2,layout=Et*3|(t*6|)*4t*5mL")), m), ConfigError);
}

}  // namespace moe
