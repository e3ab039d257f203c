#include "planner/power_limit.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "planner/errors.h"
#include "planner/io/plan_io.h"
#include "planner/planner_inputs.h"
#include "planner/power_budget.h"
#include "planner/search.h"

namespace moe {

namespace {
// The H100 of the cluster files: 700 W, 165 W idle, 893 W busy at full clock.
GpuPower h100() {
  return {700, 165, 893, 0.85};
}

SearchRequest fixed_layout(const std::string& layout, int64_t gpus, int64_t gbs) {
  SearchRequest r;
  r.num_gpus = gpus;
  r.global_batch = gbs;
  r.fixed = parse_parallel(layout);
  r.top_k = 1;
  return r;
}
}  // namespace

TEST(PowerLimit, TheClockHoldsUpToTheLimitAndFallsPastIt) {
  const GpuPower p = h100();
  const double at_limit = (700.0 - 165.0) / (893.0 - 165.0);  // 0.735 busy draws 700 W
  EXPECT_DOUBLE_EQ(busy_at_limit(p), at_limit);
  EXPECT_EQ(clock_under_power_limit(p, 0.0), 1.0);
  EXPECT_EQ(clock_under_power_limit(p, at_limit), 1.0);
  EXPECT_DOUBLE_EQ(clock_under_power_limit(p, 1.0), 0.85);
  // Dynamic power as the rate to k = ln 0.735 / ln 0.85 = 1.895: within 0.01 of a straight line
  // from the knee to 0.85, and below it.
  const double mid = clock_under_power_limit(p, (at_limit + 1.0) / 2);
  EXPECT_NEAR(mid, std::pow(at_limit / ((at_limit + 1.0) / 2), 1 / 1.89537), 1e-4);
  EXPECT_LT(mid, 0.925);
  EXPECT_GT(mid, 0.915);
  // A 500 W cap on the same board: the clock falls from 0.46 busy, to 0.664 busy all the time.
  GpuPower capped = p;
  capped.rated_limit_w = 700;
  capped.limit_w = 500;
  EXPECT_EQ(clock_under_power_limit(capped, 0.46), 1.0);
  EXPECT_LT(clock_under_power_limit(capped, 0.47), 1.0);
  EXPECT_NEAR(clock_under_power_limit(capped, 1.0), 0.664, 1e-3);
  // Busier than all the time (rounding) is all the time.
  EXPECT_DOUBLE_EQ(clock_under_power_limit(p, 1.2), 0.85);
  // No limit given, or a limit the busy board never reaches: the clock never falls.
  EXPECT_EQ(clock_under_power_limit(GpuPower{}, 1.0), 1.0);
  EXPECT_EQ(clock_under_power_limit({900, 165, 893, 0.5}, 1.0), 1.0);
}

TEST(PowerLimit, TheBoardDrawsInProportionToItsBusyShareUpToTheLimit) {
  const GpuPower p = h100();
  EXPECT_DOUBLE_EQ(gpu_power_w(p, 0.5, 1.0), 165 + 728 * 0.5);  // the probe's 529 W
  EXPECT_DOUBLE_EQ(gpu_power_w(p, 0.25, 1.0), 165 + 728 * 0.25);
  // Where the clock fell, the board draws its limit.
  EXPECT_DOUBLE_EQ(gpu_power_w(p, 1.0, 0.85), 700);
  EXPECT_DOUBLE_EQ(gpu_power_w(GpuPower{}, 1.0, 1.0), 0);
  // A plan on 8 such boards, held at the limit, training 88,000 tokens a second: 15.7 a joule.
  Plan plan;
  plan.choice.parallel =
      resolve(parse_parallel("tp=1,pp=1,ep=1,etp=1,cp=1,vpp=1,mbs=1,dp=8,gbs=8"));
  plan.choice.compute_clock = 0.85;
  plan.score.time.compute = plan.score.time.iteration = Seconds(1);
  plan.score.tokens_per_second = 88000;
  const BoardEnergy e = board_energy(p, plan);
  EXPECT_DOUBLE_EQ(e.watts, 700);
  EXPECT_DOUBLE_EQ(e.tokens_per_joule, 88000.0 / (700 * 8));
  EXPECT_DOUBLE_EQ(board_energy(GpuPower{}, plan).tokens_per_joule, 0);
}

TEST(PowerLimit, TheBusyShareIsTheComputeStreamsOverTheIteration) {
  TimeBreakdown t;
  t.compute = Seconds(6);
  t.recompute = Seconds(1);
  t.ep_held_sms = Seconds(1);
  t.bubble = Seconds(2);
  t.iteration = Seconds(10);
  EXPECT_DOUBLE_EQ(compute_busy_share(t), 0.8);
  EXPECT_EQ(compute_busy_share(TimeBreakdown{}), 0.0);
}

TEST(PowerLimit, TheSearchPricesABusyPlanAtTheClockItsShareLeaves) {
  // Llama 3 8B on one H100 node keeps its compute stream busy nearly all the time: the search
  // prices it at the clock its full-clock busy share leaves, and that is what estimate_time
  // gives for the plan at that clock, slower than full clock and no slower than the clock alone
  // could make it.
  const Inputs s("hf/llama-3-8b.config.json", "h100-sxm-8.json");
  ASSERT_GT(s.cluster.node.gpu.power.limit_w, 0);
  const SearchRequest req = fixed_layout("tp=1,pp=1,cp=1,vpp=1,mbs=1", 8, 64);
  const Plan best = search_plans(s.ctx, req).ranked.at(0);
  const double clock = best.choice.compute_clock;
  PlanChoice full = best.choice;
  full.compute_clock = 1;
  const TimeBreakdown at_full = estimate_time(s.ctx, full);
  EXPECT_DOUBLE_EQ(clock, clock_under_power_limit(s.ctx.gpu.power, compute_busy_share(at_full)));
  EXPECT_LT(clock, 0.95);
  EXPECT_EQ(estimate_time(s.ctx, best.choice).iteration, best.score.time.iteration);
  EXPECT_GT(best.score.time.iteration, at_full.iteration);
  EXPECT_LE(best.score.time.iteration, at_full.iteration / clock);
  // The same cluster without a power limit: full clock, and the faster plan.
  Inputs cool = s;
  cool.ctx.gpu.power = GpuPower{};
  const Plan unlimited = search_plans(cool.ctx, req).ranked.at(0);
  EXPECT_EQ(unlimited.choice.compute_clock, 1.0);
  EXPECT_LT(unlimited.score.time.iteration, best.score.time.iteration);
  // A single plan's evaluation derives the same clock from any clock it was given.
  PlanChoice again = best.choice;
  again.compute_clock = 0.5;
  EXPECT_EQ(estimate_time_at_power_limit(s.ctx, again).iteration, best.score.time.iteration);
  EXPECT_EQ(again.compute_clock, clock);
}

TEST(PowerLimit, APlanFileCarriesItsClock) {
  const Inputs s("hf/llama-3-8b.config.json", "h100-sxm-8.json");
  const Plan best =
      search_plans(s.ctx, fixed_layout("tp=1,pp=1,cp=1,vpp=1,mbs=1", 8, 64)).ranked.at(0);
  ASSERT_LT(best.choice.compute_clock, 1.0);
  nlohmann::json j = io::plan_to_json(best, s.model, s.cluster);
  EXPECT_EQ(io::plan_choice_from_json(j, "plan.json").compute_clock, best.choice.compute_clock);
  // Files written before the clock read as full clock; a clock outside (0, 1] is refused.
  j.erase("compute_clock");
  EXPECT_EQ(io::plan_choice_from_json(j, "plan.json").compute_clock, 1.0);
  j["compute_clock"] = 1.5;
  try {
    io::plan_choice_from_json(j, "plan.json");
    FAIL() << "a clock of 1.5 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("compute_clock"), std::string::npos) << e.what();
  }
}

TEST(PowerLimit, ASimulatedStageDrawsByItsBusyShareAtItsClock) {
  // At full clock a stage draws what gpu_power_w gives for its share; under the limit's clock a
  // stage busy all the time draws the limit, and a less busy one less.
  const GpuPower p = h100();
  EXPECT_DOUBLE_EQ(stage_power_w(p, 0.5, 1.0), gpu_power_w(p, 0.5, 1.0));
  const double clock = clock_under_power_limit(p, 1.0);
  EXPECT_NEAR(stage_power_w(p, 1.0, clock), 700, 1e-9);
  EXPECT_NEAR(stage_power_w(p, 0.5, clock), 165 + 0.5 * 535, 1e-9);
  EXPECT_EQ(stage_power_w(GpuPower{}, 1.0, 1.0), 0);
}

TEST(PowerLimit, ACapLowersTheLimitTheCurveKeeps) {
  // The caps the energy objective weighs: 95 % of 700 W down to 50 %, all above idle.
  const std::vector<double> caps = energy_power_caps(h100());
  ASSERT_EQ(caps.size(), 10u);
  EXPECT_EQ(caps.front(), 665);
  EXPECT_EQ(caps.back(), 350);
  EXPECT_TRUE(energy_power_caps(GpuPower{}).empty());
  // A plan's cap lowers the board's limit, never raises it; the curve keeps the rated limit.
  PlanChoice c;
  c.power_cap_w = 500;
  const GpuPower capped = power_under_cap(h100(), c);
  EXPECT_EQ(capped.limit_w, 500);
  EXPECT_EQ(capped.rated_limit_w, 700);
  // As the command line's --power-limit caps the board.
  GpuSpec board;
  board.power = h100();
  cap_power_limit(board, 500);
  EXPECT_EQ(board.power.limit_w, capped.limit_w);
  EXPECT_EQ(board.power.rated_limit_w, capped.rated_limit_w);
  c.power_cap_w = 800;
  EXPECT_EQ(power_under_cap(h100(), c).limit_w, 700);
  // Busy all the time the 500 W board keeps (335 / 728)^(1 / 1.9) of its rate.
  const double k = std::log(535.0 / 728.0) / std::log(0.85);
  EXPECT_NEAR(clock_under_power_limit(capped, 1.0), std::pow(335.0 / 728.0, 1 / k), 1e-12);
}

TEST(PowerLimit, TheEnergyObjectiveTradesClockForJoules) {
  // Llama 3 8B on one H100 node is compute-bound: the fewest joules a token come at a low cap
  // (a FLOP's dynamic energy falls as rate^0.9 while the idle draw runs longer), the plan slower
  // than at the board's limit. A time budget keeps it within the budget, at a higher cap.
  const Inputs s("hf/llama-3-8b.config.json", "h100-sxm-8.json");
  SearchRequest req = fixed_layout("tp=1,pp=1,cp=1,vpp=1,mbs=1", 8, 64);
  const Plan fastest = search_plans(s.ctx, req).ranked.at(0);
  EXPECT_EQ(fastest.choice.power_cap_w, 0);
  req.objective = Objective::kEnergy;
  req.power_caps = energy_power_caps(s.ctx.gpu.power);
  const Plan frugal = search_plans(s.ctx, req).ranked.at(0);
  ASSERT_GT(frugal.choice.power_cap_w, 0);
  EXPECT_LE(frugal.choice.power_cap_w, 420);
  EXPECT_GT(frugal.score.time.iteration, fastest.score.time.iteration * 1.2);
  const BoardEnergy at_limit = board_energy(s.ctx.gpu.power, fastest);
  const BoardEnergy at_cap = board_energy(s.ctx.gpu.power, frugal);
  EXPECT_EQ(at_cap.watts, frugal.choice.power_cap_w);
  EXPECT_GT(at_cap.tokens_per_joule, at_limit.tokens_per_joule * 1.15);
  // The plan as priced is what its cap gives a single evaluation.
  PlanChoice again = frugal.choice;
  EXPECT_EQ(estimate_time_at_power_limit(s.ctx, again).iteration, frugal.score.time.iteration);
  EXPECT_EQ(again.compute_clock, frugal.choice.compute_clock);
  // The table over caps: the board's limit first, then each cap; joules fall, time rises.
  const double tokens = 64.0 * static_cast<double>(s.ctx.seq_len);
  const std::vector<CapPoint> points = energy_by_cap(s.ctx, frugal.choice, tokens, req.power_caps);
  ASSERT_EQ(points.size(), 11u);
  EXPECT_EQ(points[0].cap_w, 700);
  for (size_t i = 1; i < points.size(); ++i) {
    EXPECT_GT(points[i].tokens_per_joule, points[i - 1].tokens_per_joule) << i;
    EXPECT_GT(points[i].iteration, points[i - 1].iteration) << i;
  }
  // Within 10 % of the fastest: the most frugal cap whose time holds.
  req.time_limit = fastest.score.time.iteration * 1.1;
  const Plan budgeted = search_plans(s.ctx, req).ranked.at(0);
  EXPECT_LE(budgeted.score.time.iteration, req.time_limit);
  EXPECT_GT(budgeted.choice.power_cap_w, frugal.choice.power_cap_w);
  for (const CapPoint& p : points) {
    if (p.cap_w < budgeted.choice.power_cap_w) {
      EXPECT_GT(p.iteration, req.time_limit) << p.cap_w;
    }
  }
  // The plan file carries the cap, as power_limit_W and the command that sets it.
  const nlohmann::json j = io::plan_to_json(budgeted, s.model, s.cluster);
  EXPECT_EQ(j["power_limit_W"].get<double>(), budgeted.choice.power_cap_w);
  EXPECT_EQ(j["nvidia_smi"].get<std::string>(),
            fmt::format("nvidia-smi -pl {:.0f}", budgeted.choice.power_cap_w));
  EXPECT_EQ(io::plan_choice_from_json(j, "plan.json").power_cap_w, budgeted.choice.power_cap_w);
}

TEST(PowerLimit, APowerBudgetCapsEachSizesBoardsAtTheirShare) {
  // Llama 3 8B, 8 kW for the boards: 8 H100 at their 700 W limit draw 5.6 kW, so they run
  // uncapped; 16 share it at 500 W each and, their clock falling less than their count doubles,
  // train faster; 64 would have 125 W a board, below its idle 165 W.
  const Inputs s("hf/llama-3-8b.config.json", "h100-256.json");
  SearchRequest req;
  req.global_batch = 128;
  req.top_k = 3;
  const BudgetSearch b = search_power_budget(s.ctx, req, {8, 16, 64}, 8000);
  ASSERT_EQ(b.points.size(), 3u);
  EXPECT_EQ(b.points[0].cap_w, 0);
  EXPECT_EQ(b.points[1].cap_w, 500);
  EXPECT_FALSE(b.points[2].planned);
  EXPECT_NE(b.points[2].why.find("not above its idle"), std::string::npos) << b.points[2].why;
  ASSERT_TRUE(b.points[0].planned && b.points[1].planned);
  EXPECT_GT(b.points[1].tokens_per_second, b.points[0].tokens_per_second * 1.3);
  EXPECT_LE(b.points[1].draw_w, 8000);
  EXPECT_NEAR(b.points[0].draw_w,
              8 * board_energy(s.ctx.gpu.power,
                               [&] {
                                 SearchRequest one = req;
                                 one.num_gpus = 8;
                                 return search_plans(s.ctx, one).ranked.at(0);
                               }())
                      .watts,
              1e-6);
  // The fastest first, each plan carrying its size's cap, priced under it.
  const Plan& best = b.result.ranked.at(0);
  EXPECT_EQ(best.choice.gpus(), 16);
  EXPECT_EQ(best.choice.power_cap_w, 500);
  PlanChoice again = best.choice;
  EXPECT_EQ(estimate_time_at_power_limit(s.ctx, again).iteration, best.score.time.iteration);
  for (size_t i = 1; i < b.result.ranked.size(); ++i)
    EXPECT_GE(b.result.ranked[i].score.time.iteration, b.result.ranked[i - 1].score.time.iteration);
  // A budget no size can run under is an error naming why.
  try {
    search_power_budget(s.ctx, req, {8}, 1000);
    FAIL() << "1 kW for 8 boards was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no cluster size runs within 1.0 kW"), std::string::npos)
        << e.what();
  }
}

}  // namespace moe
