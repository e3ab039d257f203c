// moeplan plan: search the parallelism space for a model on a cluster and print the best plans
// with the launch arguments a user can run.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/power_budget.h"
#include "planner/search.h"
#include "simulator/board_power.h"
#include "simulator/training_sim.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/plan_fallbacks.h"
#include "tools/moeplan/plan_options.h"
#include "tools/moeplan/plan_report.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

// True when --parallel fixed any size (or a pipeline layout).
bool fixes_sizes(const ParallelConfig& p) {
  if (!p.layout.empty()) return true;
  for (const ParallelField& f : parallel_fields())
    if (f.member != &ParallelConfig::gbs && (p.*f.member).has_value()) return true;
  return false;
}

// Simulates the first `count` plans for one iteration each and, for the throughput and energy
// objectives, reorders them by simulated time or simulated joules a token (a plan that runs out
// of memory in simulation goes last): contention, the pipeline's real order and sampled routing
// can swap plans the closed form put within a few percent. Returns the results aligned with the
// new order.
std::vector<Verified> verify_plans(const TimeContext& ctx, const ClusterSpec& c,
                                   const SearchRequest& req, std::vector<Plan>& ranked,
                                   size_t count, bool tty) {
  sim::TrainingOptions opt;
  opt.alpha = req.alpha;
  opt.static_override = req.static_override;
  std::vector<std::pair<Plan, Verified>> runs;
  for (size_t i = 0; i < count; ++i) {
    if (tty) fmt::print(stderr, "\rsimulating plan {} of {}", i + 1, count);
    const sim::TrainingReport r = sim::simulate_training(ctx, c, ranked[i].choice, opt);
    const sim::BoardDraw draw = sim::simulated_board_draw(ctx.gpu.power, ranked[i].choice, r);
    runs.push_back({ranked[i], {r.mean_iteration, draw.tokens_per_joule, r.oom_count, i}});
  }
  if (tty) fmt::print(stderr, "\r                          \r");
  const bool energy = req.objective == Objective::kEnergy;
  if (req.objective == Objective::kThroughput || energy) {
    std::stable_sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) {
      if ((a.second.oom_events > 0) != (b.second.oom_events > 0)) return b.second.oom_events > 0;
      if (energy) return a.second.tokens_per_joule > b.second.tokens_per_joule;
      return a.second.iteration < b.second.iteration;
    });
  }
  std::vector<Verified> out;
  for (size_t i = 0; i < count; ++i) {
    ranked[i] = std::move(runs[i].first);
    out.push_back(runs[i].second);
  }
  return out;
}

void plan_with(const PlanOptions& o, const ModelSpec& m) {
  if (o.global_batch <= 0)
    throw InputError("--global-batch", "",
                     "required (or --global-batch-size in the --megatron-args launch)");
  const ClusterSpec c = capped(io::load_cluster(o.cluster), o.power_limit_w);
  const RoutingSkew skew = skew_for(o.skew, m);
  const CalibrationIn cal = calibration_from(o.calibration);
  const TimeContext ctx = make_time_context(m, c, cal.efficiencies, skew, o.seq_len);

  SearchRequest req = search_request(o, m, c);
  const bool tty = isatty(fileno(stderr)) != 0;
  if (tty && !o.json) {
    req.progress = [](double share) {
      fmt::print(stderr, "\rsearching: {:3.0f} %", 100.0 * share);
    };
  }

  // The cost objective without --gpus weighs cluster sizes too: whole nodes in powers of two,
  // and the whole cluster.
  std::vector<int64_t> counts = {req.num_gpus};
  if ((req.objective == Objective::kCost || o.power_budget_kw) && !o.gpus) {
    counts.clear();
    for (int64_t n = c.node.num_gpus; n < c.num_gpus(); n *= 2) counts.push_back(n);
    counts.push_back(c.num_gpus());
  }
  // Under a power budget, each size's boards capped at their share (the first search's sizes
  // are reported).
  std::vector<BudgetPoint> budget_points;
  auto search = [&](const SearchRequest& q) {
    if (o.power_budget_kw) {
      BudgetSearch b = search_power_budget(ctx, q, counts, *o.power_budget_kw * 1e3);
      if (budget_points.empty()) budget_points = std::move(b.points);
      return std::move(b.result);
    }
    return counts.size() == 1 ? search_plans(ctx, q) : search_gpu_counts(ctx, q, counts);
  };
  // The energy objective's time budget, from the fastest plan of the same space.
  if (o.max_slowdown_percent) {
    SearchRequest quick = req;
    quick.objective = Objective::kThroughput;
    quick.power_caps.clear();
    quick.top_k = 1;
    quick.progress = nullptr;
    const SearchResult f = search(quick);
    if (!f.ranked.empty())
      req.time_limit = f.ranked.front().score.time.iteration * (1 + *o.max_slowdown_percent / 100);
  }
  SearchResult first = search(req);
  if (tty && !o.json) fmt::print(stderr, "\r                 \r");
  PlanOutcome outcome = search_with_fallbacks(ctx, c, req, search, std::move(first));
  SearchResult& r = outcome.result;
  const bool fits_as_is = outcome.fits_as_is();
  // With sizes fixed by --parallel: the best the search finds with them free (and every switch
  // as given), for --explain's comparison and wherever the fixed sizes fit only with offloading
  // or not at all.
  const bool sizes_fixed = fixes_sizes(req.fixed);
  std::optional<Plan> free_best;
  if (sizes_fixed && (o.explain || !fits_as_is)) {
    SearchRequest free = req;
    free.fixed = ParallelConfig{};
    free.even_split = false;
    free.top_k = 1;
    free.progress = nullptr;
    SearchResult f = search(free);
    if (!f.ranked.empty()) free_best = std::move(f.ranked.front());
  }
  const std::string free_fits =
      free_best && !fits_as_is
          ? fmt::format(
                "with --parallel's sizes free and the same switches, {} fits in GPU "
                "memory ({} an iteration)",
                free_best->choice.describe(), as_ms(free_best->score.time.iteration, 1))
          : std::string();
  if (r.ranked.empty()) throw_no_fit(ctx, c, req, outcome, free_fits);
  warn_about_calibration(cal, c);
  // --verify: the shortlist through the simulator, ranked by what it measures.
  const size_t verified_count =
      outcome.aptmoe_offloaded
          ? 0
          : std::min(r.ranked.size(), static_cast<size_t>(std::max(o.verify, 0)));
  const std::vector<Verified> verified =
      verified_count == 0 ? std::vector<Verified>{}
                          : verify_plans(ctx, c, req, r.ranked, verified_count, tty && !o.json);
  const Plan& best = r.ranked.front();
  if (!o.save.empty())
    io::write_file_atomically(o.save, io::plan_to_json(best, m, c).dump(2) + "\n");

  const PlanReport report{o,       m,        c,         ctx,       skew,          req,
                          outcome, verified, free_best, free_fits, counts.size(), budget_points};
  if (o.json)
    print_plan_json(report);
  else
    print_plan_text(report);
}

void run_plan(PlanOptions o) {
  const ModelSpec m = io::load_model(o.model);
  if (o.megatron_args.empty()) return plan_with(o, m);
  apply_megatron_arguments(o, m);
  try {
    plan_with(o, m);
  } catch (const ConfigError& e) {
    // Sizes the launch fixed that cannot run here, or do not fit: say where they came from.
    throw ConfigError(
        fmt::format("{} (the Megatron-LM launch in {})", e.what(), o.megatron->source));
  } catch (const NoFitError& e) {
    throw NoFitError(
        fmt::format("{} (the Megatron-LM launch in {})", e.what(), o.megatron->source));
  }
}

}  // namespace

void add_plan(CommandLine& cli) {
  auto o = std::make_shared<PlanOptions>();
  Subcommand cmd = cli.subcommand(
      "plan", "Search the parallelism space; print ranked plans and launch arguments");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--global-batch", o->global_batch,
             "global batch size in sequences (required unless --megatron-args gives it)")
      .positive();
  cmd.option("--seq-len", o->seq_len, "sequence length").positive();
  cmd.option("--gpus", o->gpus, "GPUs to use (default: the whole cluster)").positive();
  cmd.option("--parallel", o->parallel,
             "fix any subset of the layout, e.g. tp=8,ep=8 (a full layout evaluates just it); "
             "layout=Et|(tt|)*30mL gives Megatron's --pipeline-model-parallel-layout");
  cmd.option("--megatron-args", o->megatron_args,
             "a Megatron-LM launch (a script, an argument list or a training log; - for "
             "standard input) whose layout and switches to evaluate, Megatron's defaults where "
             "a flag is absent; --parallel's sizes and the options given override it");
  cmd.option("--calibration", o->calibration, "calibration file with efficiency curves");
  cmd.option("--power-limit", o->power_limit_w,
             "cap the GPUs' power at W watts (a GPU with a node.gpu.power entry): the clock "
             "falls from a lower compute share")
      .positive();
  cmd.option("--skew", o->skew,
             "routing skew: balanced | capacity=F | G=x | worst | a popularity file (.json)");
  cmd.option("--objective", o->objective,
             "throughput | memory (the least peak memory a GPU; plans within 0.5 % of it by "
             "time) | cost | energy (the fewest joules a token on the GPU boards, with a "
             "power cap searched below their limit unless --power-limit fixes it)");
  cmd.option("--power-budget-kW", o->power_budget_kw,
             "what all the job's GPU boards may draw: each cluster size (whole nodes in powers "
             "of two, and the whole cluster, unless --gpus fixes it) runs with its boards capped "
             "at their share, and the fastest wins")
      .positive();
  cmd.option("--max-slowdown", o->max_slowdown_percent,
             "with --objective energy: keep to plans at most PCT % slower than the fastest")
      .range(0.0, 1000.0);
  cmd.option("--recompute", o->recompute,
             "fix recompute: none | selective | full | sar (MegaScale rematerialization)");
  cmd.option("--recompute-modules", o->recompute_modules,
             "Megatron's --recompute-modules for selective recompute (implies it): any of "
             "core_attn moe_act layernorm mla_up_proj mlp moe (default moe_act layernorm)")
      .expected(1, 6);
  cmd.option("--offload-modules", o->offload_modules,
             "Megatron's fine-grained activation offloading (--fine-grained-activation-"
             "offloading --offload-modules): any of attn_norm core_attn attn_proj mlp_norm "
             "expert_fc1 moe_act, whose saved inputs go to host memory in forward and come back "
             "for backward (recompute none or selective); search: offload only where a "
             "candidate fits no other way")
      .expected(1, 6);
  cmd.option("--optimizer-offload", o->optimizer_offload,
             "Megatron's optimizer CPU offload (--optimizer-cpu-offload "
             "--optimizer-offload-fraction): this share of each GPU's optimizer states lives in "
             "host memory and steps on the CPU");
  cmd.option("--precision", o->precision,
             "bf16 (mixed) | fp8 (FP8 GEMMs and collectives, Transformer Engine) | fp32");
  cmd.option("--fp8-recipe", o->fp8_recipe,
             "Megatron --fp8-recipe of an fp8 plan: delayed (default) | tensorwise | "
             "blockwise (DeepSeek-V3's 128-blocks, Hopper) | mxfp8 (Blackwell)");
  cmd.option("--zero", o->zero,
             "fix the ZeRO stage: 0 (plain DDP), 1 (distributed optimizer), 2, 3 (default: "
             "the lowest of 1-3 that fits)")
      .range(0, 3);
  cmd.option("--grad-reduce", o->grad_reduce,
             "DP gradient reduction: bf16 (Megatron --grad-reduce-in-bf16, MegaScale-MoE's "
             "compression; Megatron's gradient buffer is then BF16, 2 bytes a parameter) | "
             "fp32 (Megatron's default) | search (default)");
  cmd.option("--adam-moments", o->adam_moments,
             "the Adam moments' type: fp32 (default: Megatron's Adam, 12 bytes a parameter with "
             "the master weights) | bf16 | fp16 | fp8 (Megatron --use-precision-aware-optimizer "
             "--exp-avg-dtype --exp-avg-sq-dtype; its FP32 master weights keep only the 16 bits "
             "BF16 weights lack: 6 bytes a parameter at bf16, 8 beside FP8 weights)");
  cmd.option("--schedule", o->schedule,
             "pipeline schedule: 1f1b (interleaved when vpp > 1) | gpipe");
  cmd.option("--overlap", o->overlap, "communication overlap: on | off | search");
  cmd.option("--intra-overlap", o->intra_overlap,
             "MegaScale-MoE intra-operator overlap (communication fused into GEMMs; not in "
             "Megatron-LM): off (default) | on | search");
  cmd.option("--permute-fusion", o->permute_fusion,
             "Megatron-Core --moe-permute-fusion: on (default) | off (a Megatron that "
             "predates it: the permutation moves twice the bytes)");
  cmd.option("--attention", o->attention, "attention parallelism: tp | ulysses | search");
  cmd.option("--cuda-graph", o->cuda_graph,
             "CUDA graphs (Megatron --cuda-graph-impl/--cuda-graph-scope): none (default: "
             "every op issued by the host) | attn (attention and router captured) | full "
             "(the whole iteration)");
  cmd.option("--dispatcher", o->dispatcher,
             "MoE token dispatcher (Megatron-Core --moe-token-dispatcher-type): alltoall | "
             "allgather (MegaScale-MoE's, with etp = 1 or ep = 1) | deepep (flex on DeepEP "
             "or HybridEP: one copy per destination rank and node, etp = 1) | search "
             "(alltoall or allgather)");
  cmd.option("--attention-kernel", o->attention_kernel,
             "core attention: fused (FlashAttention or cuDNN, default) | unfused (Megatron "
             "--attention-backend unfused, and Megatron-LM before FlashAttention: the s x s "
             "scores in HBM)");
  cmd.option("--cross-entropy", o->cross_entropy,
             "the loss kernel (Megatron --cross-entropy-fusion-impl): te (Transformer Engine's, "
             "default: the BF16 logits hold the gradient) | native (Megatron's: FP32 softmax "
             "kept for backward, more HBM passes)");
  cmd.option("--alpha", o->alpha, "usable fraction of GPU memory").range(0.01, 1.0);
  cmd.option("--static-override", o->static_override_gb,
             "measured static memory per GPU in GB (MemFine Table 4)")
      .positive();
  cmd.option("--top", o->top, "plans to show").range(1, 100);
  cmd.option("--threads", o->threads, "search threads").range(1, 256);
  cmd.option("--verify", o->verify,
             "simulate the first K plans shown (one iteration each) and rank them by "
             "simulated time; the best of those is the one saved and launched")
      .range(1, 100);
  cmd.option("--save", o->save, "write the best plan (moeplan-plan/1) to this file");
  cmd.flag("--json", o->json, "print the ranked plans as one JSON document");
  cmd.flag("--explain", o->explain, "say why the best plan beats the runner-up");
  cmd.flag("--megatron-only", o->megatron_only,
           "search only what Megatron-Core runs (no MegaScale-MoE rematerialization or "
           "intra-operator overlap, no MemFine chunking), so the printed arguments run the "
           "plan as priced");
  cmd.on_run([o, cmd] {
    o->given = cmd.given();
    run_plan(*o);
  });
}

}  // namespace moe::cli
