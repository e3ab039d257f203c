#include "tools/moeplan/plan_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>

#include "planner/io/plan_io.h"
#include "planner/layer_ops.h"
#include "planner/megatron_flops.h"
#include "planner/monta.h"
#include "planner/one_change.h"
#include "planner/power_limit.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/explain_layers.h"
#include "tools/moeplan/plan_difference.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

// A group whose ranks do not tile the NVLink domain (EP 32 in a 72-GPU rack) straddles two
// somewhere, and its collectives run at the worst-placed member's NIC share: say so, and what
// keeps them inside.
void print_straddling_groups(const LinkRates& links, const ParallelConfig& p) {
  for (const auto& [name, kind] :
       {std::pair{"TP", GroupKind::kTp}, std::pair{"CP", GroupKind::kCp},
        std::pair{"EP", GroupKind::kEp}, std::pair{"DP", GroupKind::kDp}}) {
    const GroupShape g = group_shape(p, kind);
    if (g.n < 2 || !links.straddles(g.span())) continue;
    fmt::print(
        "\nnote: {} groups span {} ranks, which do not tile the {}-GPU NVLink domain: one "
        "straddles two with {} of its {} ranks on one side, and every {} collective is priced "
        "at that rank's NIC share. Spans that divide {}, or {} GPUs of each domain, keep the "
        "groups whole.\n",
        name, g.span(), links.gpus_per_node, links.local_peers(g.n, g.stride), g.n, name,
        links.gpus_per_node, std::bit_floor(static_cast<uint64_t>(links.gpus_per_node)));
  }
}

// A best plan whose GPUs wait for the host (planner/host_time.h) a tenth of the iteration or
// more: what would take it away.
void print_host_bound(const Plan& best) {
  const TimeBreakdown& b = best.score.time;
  const double share = b.host / b.iteration;
  if (share < 0.1) return;
  fmt::print(
      "\nnote: the GPUs wait {:.0f} % of the iteration for the host to issue kernels (micro-batch "
      "{}, {}): larger micro-batches give each kernel more work, and CUDA graphs replay them "
      "without the host ({}).\n",
      100 * share, *best.choice.parallel.mbs,
      best.choice.cuda_graph == CudaGraph::kNone ? "no CUDA graphs" : "experts issued eagerly",
      best.choice.cuda_graph == CudaGraph::kNone ? "--cuda-graph attn or full"
                                                 : "--cuda-graph full");
}

// Where the power limit slows the best plan's compute (planner/power_limit.h).
void print_power_limit(const GpuPower& board, const Plan& best) {
  if (!(board.limit_w > 0)) return;
  const BoardEnergy e = board_energy(board, best);
  const GpuPower power = power_under_cap(board, best.choice);
  fmt::print("\nGPU boards: {:.0f} W each, {:.2f} tokens per joule ({} GPUs, boards only)\n",
             e.watts, e.tokens_per_joule, best.choice.gpus());
  if (!(best.choice.compute_clock < 1)) return;
  fmt::print(
      "note: at {:.0f} W the power limit holds the GPUs at {:.2f} of their full-clock compute "
      "rate: the compute stream runs {:.0f} % of the iteration (the clock falls past {:.0f} % "
      "busy at full clock, to {:.2f} busy all the time; planner/power_limit.h).\n",
      power.limit_w, best.choice.compute_clock, 100 * compute_busy_share(best.score.time),
      100 * busy_at_limit(power), clock_under_power_limit(power, 1.0));
}

// Under --power-budget-kW: what each cluster size's share of the budget leaves its boards, and
// the fastest plan it runs.
void print_power_budget(const PlanReport& report) {
  if (report.budget.empty()) return;
  fmt::print("Under {:g} kW for the GPU boards (each size's boards capped at their share):\n",
             *report.options.power_budget_kw);
  Table t({"GPUs", "cap a board", "iteration", "tokens/s", "boards draw"});
  for (const BudgetPoint& p : report.budget) {
    const std::string cap =
        p.cap_w > 0 ? fmt::format("{:.0f} W", p.cap_w)
                    : fmt::format("none ({:.0f} W)", report.cluster.node.gpu.power.limit_w);
    if (!p.planned) {
      t.add({std::to_string(p.gpus), cap, "-", "-", p.why});
      continue;
    }
    t.add({std::to_string(p.gpus), cap, as_ms(p.iteration, 1),
           fmt::format("{:.0f}", p.tokens_per_second), fmt::format("{:.1f} kW", p.draw_w / 1e3)});
  }
  fmt::print("{}\n", t.render());
}

// The energy objective's trade for its best plan: the board's limit and each cap it weighed.
// The energy objective's trade for its best plan: its time and joules under the board's limit
// and under each cap the search weighed (none where --power-limit fixed the cap, or for an
// offload plan). The text's table and the JSON's energy_by_cap.
std::vector<CapPoint> best_plan_by_cap(const PlanReport& report) {
  const SearchRequest& req = report.request;
  const Plan& best = report.outcome.result.ranked.front();
  if (req.objective != Objective::kEnergy || req.power_caps.empty() || best.choice.offload)
    return {};
  TimeContext own = report.ctx;  // the best plan's GPUs decide which groups straddle nodes
  own.links.world = best.choice.parallel.world();
  const double tokens = static_cast<double>(*best.choice.parallel.gbs * own.seq_len);
  return energy_by_cap(own, best.choice, tokens, req.power_caps);
}

void print_energy_by_cap(const PlanReport& report) {
  const PlanOptions& o = report.options;
  const SearchRequest& req = report.request;
  const Plan& best = report.outcome.result.ranked.front();
  const GpuPower& board = report.ctx.gpu.power;
  const std::vector<CapPoint> points = best_plan_by_cap(report);
  if (points.empty()) return;
  fmt::print("\nThe best layout's joules against its boards' power cap (nvidia-smi -pl):\n");
  Table t({"cap", "clock", "iteration", "tokens/s", "W a GPU", "tokens/J", "vs limit"});
  for (const CapPoint& p : points) {
    const bool chosen = p.cap_w == power_under_cap(board, best.choice).limit_w;
    t.add({fmt::format("{}{:.0f} W", chosen ? "* " : "", p.cap_w),
           fmt::format("{:.3f}", p.compute_clock), as_ms(p.iteration, 1),
           fmt::format("{:.0f}", p.tokens_per_second), fmt::format("{:.0f}", p.watts),
           fmt::format("{:.2f}", p.tokens_per_joule),
           fmt::format(
               "{:+.1f} % time, {:+.1f} % J{}", 100 * (p.iteration / points[0].iteration - 1),
               100 * (points[0].tokens_per_joule / p.tokens_per_joule - 1),
               req.time_limit.value() > 0 && p.iteration > req.time_limit ? ", over the time budget"
                                                                          : "")});
  }
  fmt::print("{}", t.render());
  if (o.max_slowdown_percent)
    fmt::print("time budget: {} an iteration, {:g} % over the fastest plan's {}\n",
               as_ms(req.time_limit, 1), *o.max_slowdown_percent,
               as_ms(req.time_limit / (1 + *o.max_slowdown_percent / 100), 1));
  fmt::print(
      "(* the search's cap; the clock curve is measured at the board's limit and extrapolated "
      "below it: planner/power_limit.h)\n");
}

void explain_difference(const Plan& a, const Plan& b, bool simulated_order) {
  const TimeBreakdown& x = a.score.time;
  const TimeBreakdown& y = b.score.time;
  if (simulated_order) {
    fmt::print(
        "\nWhere #1 and #2 differ in the planner's terms ({} vs {}; the simulator ordered "
        "them):\n",
        as_ms(x.iteration, 1), as_ms(y.iteration, 1));
  } else {
    fmt::print("\nWhy #1 beats #2 ({} vs {} per iteration):\n", as_ms(x.iteration, 1),
               as_ms(y.iteration, 1));
  }
  fmt::print("  #1 {}\n  #2 {}\n", a.choice.describe(), b.choice.describe());
  print_plan_difference(a, b, "#1", "#2");
}

void explain_free_layout(const Plan& yours, const Plan& free, const ParallelConfig& fixed,
                         Objective objective, const GpuPower& power) {
  const Seconds x = yours.score.time.iteration, y = free.score.time.iteration;
  fmt::print("\nYour sizes ({}) against the search's best with them free and the same switches:\n",
             fixed.to_string());
  fmt::print("  yours   {}\n  search  {}\n", yours.choice.describe(), free.choice.describe());
  if (yours.choice.describe() == free.choice.describe()) {
    fmt::print("  the same plan: the search keeps your layout\n");
    return;
  }
  if (objective == Objective::kEnergy) {
    const double x_j = board_energy(power, yours).tokens_per_joule;
    const double y_j = board_energy(power, free).tokens_per_joule;
    fmt::print("  {:.2f} vs {:.2f} tokens per joule: {}\n", x_j, y_j,
               y_j > x_j ? fmt::format("the search's plan draws {:.1f} % fewer joules a token",
                                       100 * (1 - x_j / y_j))
                         : std::string("yours draws as few or fewer"));
  } else if (objective == Objective::kMemory) {
    fmt::print("  peak memory {} vs {} ({:+.1f} %)\n", as_gb(yours.score.peak_bytes.value()),
               as_gb(free.score.peak_bytes.value()),
               100 * (free.score.peak_bytes / yours.score.peak_bytes - 1));
  } else {
    fmt::print("  {} vs {} per iteration: {}\n", as_ms(x, 1), as_ms(y, 1),
               y < x ? fmt::format("the search's plan runs {:.2f}x as fast", x / y)
                     : std::string("yours is as fast or faster"));
  }
  print_plan_difference(yours, free, "yours", "search");
}

// The ranked plans, how they fit, and what the simulator made of them (--verify).
// A training log's memory reports beside the plan's predicted peaks: the busiest rank against
// the fullest stage, then (pipelines whose reports name their ranks) stage by stage, a rank's
// stage being rank / (GPUs / pp) in Megatron's rank order. PyTorch's allocated bytes are what the
// memory model counts; reserved adds the caching allocator's slack.
void print_logged_memory(const MegatronReading& read, const SearchResult& r) {
  if (read.memory.empty() || r.ranked.empty()) return;
  const Plan& best = r.ranked.front();
  const io::LoggedMemory busiest = *std::max_element(
      read.memory.begin(), read.memory.end(),
      [](const auto& a, const auto& b) { return a.max_allocated_bytes < b.max_allocated_bytes; });
  const double predicted = best.score.peak_bytes.value();
  fmt::print(
      "  the log's busiest rank peaked at {} allocated ({} reserved); #1 below predicts {} at "
      "its fullest stage, {:+.1f} %\n",
      as_gb(busiest.max_allocated_bytes), as_gb(busiest.max_reserved_bytes), as_gb(predicted),
      100 * (predicted / busiest.max_allocated_bytes - 1));
  const ParallelConfig& p = best.choice.parallel;
  const std::vector<StageMemory>& stages = best.score.memory.stages;
  if (best.choice.offload || *p.pp < 2 || stages.size() != static_cast<size_t>(*p.pp)) return;
  const int64_t per_stage = p.world() / *p.pp;
  std::vector<double> logged(stages.size(), 0);
  for (const io::LoggedMemory& m : read.memory) {
    if (!m.rank || *m.rank >= p.world()) return;  // ranks the layout cannot place
    double& stage = logged[static_cast<size_t>(*m.rank / per_stage)];
    stage = std::max(stage, m.max_allocated_bytes);
  }
  Table t({"stage", "predicted", "the log's max allocated", "error"});
  for (size_t s = 0; s < stages.size(); ++s) {
    const double want = stages[s].total_bytes.value();
    t.add({std::to_string(s), as_gb(want), logged[s] > 0 ? as_gb(logged[s]) : "-",
           logged[s] > 0 ? fmt::format("{:+.1f} %", 100 * (want / logged[s] - 1)) : "-"});
  }
  std::string table = t.render();
  for (size_t at = 0; at < table.size(); at = table.find('\n', at) + 1) table.insert(at, "    ");
  fmt::print("{}", table);
}

void print_ranked_plans(const PlanReport& report) {
  const PlanOptions& o = report.options;
  const ModelSpec& m = report.model;
  const ClusterSpec& c = report.cluster;
  const SearchRequest& req = report.request;
  const SearchResult& r = report.outcome.result;
  const std::vector<Verified>& verified = report.verified;
  const std::optional<Plan>& aptmoe_alternative = report.outcome.aptmoe_alternative;
  const bool activations_offloaded = report.outcome.activations_offloaded;
  const bool optimizer_offloaded = report.outcome.optimizer_offloaded;
  const bool offloaded = report.outcome.aptmoe_offloaded;
  const std::string& free_fits = report.free_fits;
  fmt::print("{} on {}: {} GPUs, global batch {}, seq {}, skew {}, objective {}\n", m.name, c.name,
             report.gpu_counts == 1 ? fmt::format("{}", req.num_gpus)
                                    : fmt::format("up to {}", req.num_gpus),
             o.global_batch, o.seq_len, report.skew.describe(), objective_name(req.objective));
  auto counted = [](int64_t n, const char* noun) {
    return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
  };
  if (o.megatron) {
    // What the launch fixed, and how the flags priced otherwise were taken.
    fmt::print("Megatron-LM launch read from {}: {}\n", o.megatron->source, o.megatron->fixed);
    for (const std::string& note : o.megatron->notes) fmt::print("  {}\n", note);
    if (!o.megatron->ignored.empty())
      fmt::print("  not priced: {}\n", fmt::join(o.megatron->ignored, " "));
    // The log's own measurement beside the prediction of the plan it ran.
    if (o.megatron->measured_iteration_ms && !r.ranked.empty()) {
      const double predicted = r.ranked.front().score.time.iteration.value() * 1e3;
      fmt::print(
          "  the log measured {:.1f} ms an iteration (the median of {} logged past the first); "
          "#1 below predicts {:.1f} ms, {:+.1f} %\n",
          *o.megatron->measured_iteration_ms, o.megatron->logged_iterations - 1, predicted,
          100 * (predicted / *o.megatron->measured_iteration_ms - 1));
    }
    print_logged_memory(*o.megatron, r);
  }
  fmt::print(
      "searched {} ({} cut by the memory bound), weighed {} ({} cut by the time bound before "
      "their DP syncs were priced) in {:.2f} s\n\n",
      counted(r.stats.layouts, "layout"), r.stats.pruned_by_memory,
      counted(r.stats.evaluated, "candidate"), r.stats.bounded, r.stats.seconds);
  if (activations_offloaded) {
    fmt::print(
        "No layout fits in GPU memory as it is. These plans offload activations to host memory "
        "(Megatron's\n--fine-grained-activation-offloading --offload-modules):\n\n");
  }
  if (optimizer_offloaded) {
    fmt::print(
        "No layout fits in GPU memory as it is. These plans keep the optimizer states in host "
        "memory and\nstep them on the CPU (Megatron's --optimizer-cpu-offload "
        "--optimizer-offload-fraction 1):\n\n");
  }
  if (offloaded) {
    fmt::print(
        "No layout fits in GPU memory. APTMoE offload plans: weights in host memory, hot experts "
        "loaded\n"
        "over PCIe, cold experts on the CPU (planner/offload.h):\n\n");
  }
  std::vector<std::string> columns = {"#",        "GPUs", "layout", "switches", "iteration",
                                      "tokens/s", "MFU",  "TGS",    "peak mem", "headroom"};
  if (!verified.empty()) columns.insert(columns.end(), {"simulated", "sim vs plan", "planner #"});
  Table t(columns);
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const Plan& p = r.ranked[i];
    std::string sw = fmt::format("{} attn={}", recompute_name(p.choice.recompute),
                                 attention_mode_name(p.choice.attention));
    const std::string full = p.choice.describe();
    const size_t space = full.find(' ');
    if (space != std::string::npos) sw = full.substr(space + 1);
    if (p.choice.offload) sw = "recompute=full, experts split by APTMoE eq. (1)";
    std::vector<std::string> cells = {std::to_string(i + 1),
                                      std::to_string(p.choice.gpus()),
                                      p.choice.offload ? full : p.choice.parallel.to_string(),
                                      sw,
                                      as_ms(p.score.time.iteration, 1),
                                      fmt::format("{:.0f}", p.score.tokens_per_second),
                                      fmt::format("{:.1f} %", 100 * p.score.mfu),
                                      fmt::format("{:.0f}", p.score.tgs),
                                      as_gb(p.score.peak_bytes.value()),
                                      as_gb(p.score.headroom.value())};
    if (i < verified.size()) {
      const Verified& v = verified[i];
      cells.push_back(v.oom_events > 0 ? "out of memory" : as_ms(v.iteration, 1));
      cells.push_back(fmt::format("{:+.1f} %", 100 * (v.iteration / p.score.time.iteration - 1)));
      cells.push_back(std::to_string(v.planner_rank + 1));
    } else if (!verified.empty()) {
      cells.insert(cells.end(), {"-", "-", std::to_string(i + 1)});
    }
    t.add(cells);
  }
  fmt::print("{}\n", t.render());
  if (!free_fits.empty()) fmt::print("note: {}\n\n", free_fits);
  if (aptmoe_alternative) {
    const Plan& a = *aptmoe_alternative;
    fmt::print(
        "APTMoE's offload plans (weights in host memory, cold experts on the CPU; not Megatron-LM) "
        "are slower here: {} at best, {} an iteration ({:.0f} tokens/s)\n\n",
        a.choice.describe(), as_ms(a.score.time.iteration, 1), a.score.tokens_per_second);
  }
  if (!verified.empty()) {
    size_t was_first = 0;  // where the planner's #1 went
    while (verified[was_first].planner_rank != 0) ++was_first;
    const bool energy = report.request.objective == Objective::kEnergy;
    fmt::print("Simulated the first {} plans, one iteration each (moeplan simulate); {}\n\n",
               verified.size(),
               verified[0].planner_rank == 0 ? std::string("the simulator agrees on the best.")
               : energy
                   ? fmt::format("its most frugal is the planner's #{} ({:.2f} tokens per joule), "
                                 "shown first and saved; the planner's #1 simulates at {:.2f}.",
                                 verified[0].planner_rank + 1, verified[0].tokens_per_joule,
                                 verified[was_first].tokens_per_joule)
                   : fmt::format("its fastest is the planner's #{} ({}), shown first and saved; "
                                 "the planner's #1 simulates at {} (shared links, sampled "
                                 "routing and the real schedule, which its closed form prices "
                                 "lower).",
                                 verified[0].planner_rank + 1, as_ms(verified[0].iteration, 1),
                                 as_ms(verified[was_first].iteration, 1)));
  }
}

// The best plan's iteration by term, where its DP and EP time comes from, and Megatron-LM's log
// line.
void print_best_plan_time(const PlanReport& report) {
  const ModelSpec& m = report.model;
  const ClusterSpec& c = report.cluster;
  const TimeContext& ctx = report.ctx;
  const SearchResult& r = report.outcome.result;
  const Plan& best = r.ranked.front();
  const TimeBreakdown& b = best.score.time;
  fmt::print("Best plan, per iteration ({} micro-batch{}, {}):\n", b.microbatches,
             b.microbatches == 1 ? "" : "es", schedule_name(best.choice.schedule()));
  Table bt({"term", "time", "share"});
  auto row = [&](const char* name, Seconds s) {
    bt.add({name, as_ms(s, 1), fmt::format("{:.1f} %", 100 * s.value() / b.iteration.value())});
  };
  row("compute", b.compute);
  row("recompute", b.recompute);
  row("TP/SP comm (exposed)", b.tp_comm);
  row("EP comm (exposed)", b.ep_comm);
  row("CP comm (exposed)", b.cp_comm);
  row("PP comm", b.pp_comm);
  row("DP comm (exposed)", b.dp_comm);
  row("pipeline bubble", b.bubble);
  row("optimizer step", b.optimizer);
  if (b.host.value() > 0) row("host launch-bound", b.host);
  if (best.choice.offload_modules != 0) row("activation offload (exposed)", b.activation_offload);
  if (best.choice.offload) {
    row("PCIe loading (exposed)", b.pcie_load);
    row("CPU experts (exposed)", b.cpu_experts);
  }
  fmt::print("{}\n", bt.render());
  // Where the exposed DP time comes from: the stage with the least slack behind its sync (the
  // first, with the embedding, in 1F1B; the slowest when interleaved).
  if (b.dp_comm.value() > 0 && (b.dp_reduce_stage >= 0 || b.dp_gather_stage >= 0)) {
    std::vector<std::string> parts;
    if (b.dp_reduce_stage >= 0)
      parts.push_back(
          fmt::format("stage {}'s gradient reduce-scatter ({}) behind its last backward",
                      b.dp_reduce_stage, as_ms(b.dp_reduce_scatter, 1)));
    if (b.dp_gather_stage >= 0)
      parts.push_back(fmt::format("stage {}'s parameter all-gather ({}) before its first forward",
                                  b.dp_gather_stage, as_ms(b.dp_all_gather, 1)));
    fmt::print(
        "DP comm: {} show most; link sharing and ZeRO-2/3's per-micro-batch syncs add the "
        "rest\n",
        fmt::join(parts, " and "));
  }
  // What the exposed DP time sums (TimeBreakdown::dp_once ... dp_stream).
  if (b.dp_comm.value() > 0) {
    std::vector<std::string> parts;
    auto part = [&](Seconds t, std::string what) {
      if (t.value() > 0) parts.push_back(fmt::format("{} {}", as_ms(t, 1), what));
    };
    part(b.dp_once, "once-per-iteration syncs beyond their windows");
    std::string own;
    if (b.dp_paced_all_gather.value() > 0)
      own =
          fmt::format(", ZeRO-3's {} of gathers and {} of reduce-scatter a micro-batch among them",
                      as_ms(b.dp_paced_all_gather, 1), as_ms(b.dp_paced_reduce_scatter, 1));
    else if (b.dp_paced_reduce_scatter.value() > 0)
      own = fmt::format(", ZeRO-2's {} of reduce-scatter a micro-batch among them",
                        as_ms(b.dp_paced_reduce_scatter, 1));
    part(b.dp_paced,
         fmt::format("stage {}'s passes (which pace the pipeline) stretched by the syncs on their "
                     "links{}",
                     b.dp_paced_stage, own));
    part(b.dp_link, "the DP link's load beyond the rest of the iteration");
    part(b.dp_stream, "the reduce-scatters queued on the DP stream running past the passes");
    fmt::print("DP comm {} = {}\n\n", as_ms(b.dp_comm, 1), fmt::join(parts, " + "));
  }
  if (b.ep_held_sms.value() > 0)
    fmt::print(
        "EP comm: {} of it is compute slowed beside the overlapped dispatch and combine, whose "
        "kernels hold {:g} of the GPU's {} SMs\n\n",
        as_ms(b.ep_held_sms, 1), ep_comm_sms(ctx, best.choice), ctx.gpu.sms);
  if (b.pp_send_stretch.value() > 0)
    fmt::print(
        "PP comm: {} of it is passes slowed beside the pipeline's sends, which share a link with "
        "their TP/EP/CP traffic\n\n",
        as_ms(b.pp_send_stretch, 1));
  const ParallelConfig& bp = best.choice.parallel;
  // The two numbers users compare with first: Megatron-LM's per-iteration log line (an APTMoE
  // offload plan does not run on Megatron-LM).
  if (!best.choice.offload)
    fmt::print(
        "Megatron-LM would log: elapsed time per iteration (ms): {:.1f} | throughput per GPU "
        "(TFLOP/s/GPU): {:.1f}\n\n",
        b.iteration.value() * 1e3,
        megatron_logged_tflops(m, best.choice.seq_len, *bp.gbs, *bp.tp, best.choice.gpus(),
                               b.iteration));
  if (!best.choice.offload && *bp.cp > 1 && *bp.ep > 1) {
    const monta::CpExpansionChoice e = monta::choose_cp_expansion(*bp.cp, *bp.ep, c.switch_radix);
    fmt::print("CP and EP groups (MoNTA Sec. 5): {} expansion, network scale {}{}; {}\n\n",
               monta::cp_expansion_name(e.expansion), e.network_scale,
               e.fits_switch ? "" : " (beyond one switch)", e.reason);
  }
  if (best.choice.offload) {
    fmt::print(
        "Memory: {} per GPU (one stage's loaded weights and gradients, checkpoints of every "
        "micro-batch); "
        "{} of host memory per node for weights and optimizer states\n\n",
        as_gb(best.score.peak_bytes.value()), as_gb(best.score.host_bytes.value()));
  }
}

// The best plan's memory per GPU by stage, and the routing skew that runs it out.
void print_memory_by_stage(const PlanReport& report) {
  const PlanOptions& o = report.options;
  const ModelSpec& m = report.model;
  const SearchResult& r = report.outcome.result;
  const Plan& best = r.ranked.front();
  // Received tokens and MemFine's chunks belong to MoE layers; a dense model has neither.
  std::vector<std::string> memory_columns = {"stage", "static", "checkpoints", "activation",
                                             "total"};
  if (m.is_moe()) memory_columns.push_back("MACT c");
  Table mt(memory_columns);
  for (const StageMemory& s : best.score.memory.stages) {
    std::vector<std::string> row = {
        std::to_string(s.stage), as_gb(s.static_bytes.value()), as_gb(s.checkpoint_bytes.value()),
        as_gb(s.activation_bytes.value()), as_gb(s.total_bytes.value())};
    if (m.is_moe()) row.push_back(std::to_string(s.mact_chunks));
    mt.add(row);
  }
  if (!best.choice.offload) {
    const std::string received =
        m.is_moe()
            ? fmt::format("; runs out at s'' = {:.0f} received tokens, {:.1f}x balanced{}",
                          best.score.oom_received_tokens,
                          best.score.oom_received_tokens / balanced_received_tokens(m, o.seq_len),
                          best.choice.mact ? fmt::format(", MACT chunking up to {}",
                                                         best.score.memory.largest_chunk_bin)
                                           : "")
            : "";
    fmt::print("Memory per GPU by stage (headroom {}{}):\n{}\n", as_gb(best.score.headroom.value()),
               received, mt.render());
  }
}

// Megatron-LM's arguments and a DeepSpeed config for the best plan.
void print_launch_arguments(const PlanReport& report) {
  const PlanOptions& o = report.options;
  const ModelSpec& m = report.model;
  const ClusterSpec& c = report.cluster;
  const SearchResult& r = report.outcome.result;
  const std::optional<Plan>& megatron_alternative = report.outcome.megatron_alternative;
  const Plan& best = r.ranked.front();
  const std::vector<std::string> args = megatron_arguments(best, m, c.node.num_gpus);
  // Before the arguments, so that they stay one paste-able command.
  for (const std::string& gap : megatron_gaps(best, m)) fmt::print("Megatron-LM gap: {}\n", gap);
  if (best.choice.power_cap_w > 0) {
    fmt::print(
        "Power cap (as root on every node before the launch; the boards' limit is {:.0f} W):\n"
        "  nvidia-smi -pl {:.0f}\n\n",
        c.node.gpu.power.limit_w, best.choice.power_cap_w);
  }
  if (args.empty()) {
    fmt::print(
        "Megatron-LM arguments: none (Megatron-LM cannot run experts on the CPU; APTMoE or the "
        "DeepSpeed offload below)\n");
    if (megatron_alternative) {
      const Plan& a = *megatron_alternative;
      fmt::print(
          "With the optimizer's states on the CPU instead (Megatron's --optimizer-cpu-offload, "
          "--optimizer-offload 1) it runs more slowly: {} at {} an iteration ({:.0f} tokens/s, {} "
          "a GPU)\n",
          a.choice.describe(), as_ms(a.score.time.iteration, 1), a.score.tokens_per_second,
          as_gb(a.score.peak_bytes.value()));
    }
  } else {
    fmt::print("Megatron-LM arguments:\n");
  }
  // Shell continuation lines, pasted after the launcher: the last one ends the command.
  for (size_t i = 0; i < args.size(); ++i)
    fmt::print("  {}{}\n", args[i], i + 1 < args.size() ? " \\" : "");
  fmt::print(
      "\nDeepSpeed config{}:\n{}\n",
      m.is_moe() ? fmt::format(" (MoE layers take ep_size={})", *best.choice.parallel.ep) : "",
      io::deepspeed_config(best).dump(2));
  if (!o.save.empty()) fmt::print("\nsaved the best plan to {}\n", o.save);
}

// --explain's comparisons and the notes on the best plan's groups, host and dispatcher.
// With --explain on a run whose layout the user fixed (one layout searched, as --megatron-args
// and a full --parallel give): each single change to it, priced (planner/one_change.h).
std::vector<OneChange> changes_to_the_run(const PlanReport& report) {
  const SearchResult& r = report.outcome.result;
  if (!report.options.explain || r.stats.layouts != 1 || r.ranked.empty()) return {};
  TimeContext own = report.ctx;
  own.links.world = r.ranked.front().choice.parallel.world();
  return one_change_at_a_time(own, r.ranked.front().choice, report.cluster.node.gpu.hbm_capacity,
                              report.request.alpha, report.request.static_override);
}

void print_changes_to_the_run(const PlanReport& report) {
  const std::vector<OneChange> changes = changes_to_the_run(report);
  if (changes.empty()) return;
  const PlanScore& run = report.outcome.result.ranked.front().score;
  Table t({"change", "iteration", "vs the run", "peak mem", "fits"});
  for (const OneChange& k : changes) {
    t.add({k.change, as_ms(k.score.time.iteration, 1),
           fmt::format("{:+.1f} %", 100 * (k.score.time.iteration / run.time.iteration - 1)),
           as_gb(k.score.peak_bytes.value()), k.score.memory.fits ? "yes" : "no"});
  }
  fmt::print(
      "\nOne change at a time to this run ({}), each priced with the rest as it is, fitting "
      "ones first:\n{}",
      as_ms(run.time.iteration, 1), t.render());
}

void print_explanations(const PlanReport& report) {
  const PlanOptions& o = report.options;
  const TimeContext& ctx = report.ctx;
  const SearchRequest& req = report.request;
  const SearchResult& r = report.outcome.result;
  const std::vector<Verified>& verified = report.verified;
  const std::optional<Plan>& free_best = report.free_best;
  const Plan& best = r.ranked.front();
  const bool fits_as_is = report.outcome.fits_as_is();
  const ParallelConfig& bp = best.choice.parallel;
  if (o.explain && r.ranked.size() > 1)
    explain_difference(r.ranked[0], r.ranked[1], verified.size() > 1);
  if (o.explain && free_best && fits_as_is)
    explain_free_layout(best, *free_best, req.fixed, req.objective, ctx.gpu.power);
  if (best.choice.offload) return;
  TimeContext own = ctx;  // the best plan's GPUs decide which groups straddle nodes
  own.links.world = bp.world();
  if (o.explain) print_layer_explanation(own, best);
  print_changes_to_the_run(report);
  print_straddling_groups(own.links, bp);
  print_host_bound(best);
  print_power_limit(ctx.gpu.power, best);
  print_energy_by_cap(report);
  // The search leaves DeepEP out (it needs its own library); where the best plan's experts
  // span nodes, say what it would save.
  if (o.explain && *bp.ep > 1 && *bp.etp == 1 &&
      best.choice.dispatcher != megascale::Dispatcher::kDeepEp &&
      crosses_nodes(own, bp, OpKind::kEp)) {
    PlanChoice deepep = best.choice;
    deepep.dispatcher = megascale::Dispatcher::kDeepEp;
    const TimeBreakdown t = estimate_time_at_power_limit(own, deepep);
    fmt::print(
        "\nWith DeepEP (--dispatcher deepep: Megatron-Core's flex dispatcher, a token once per "
        "destination node): {} instead of {}, EP comm exposed {} instead of {}\n",
        as_ms(t.iteration, 1), as_ms(best.score.time.iteration, 1), as_ms(t.ep_comm, 1),
        as_ms(best.score.time.ep_comm, 1));
  }
}

}  // namespace

void print_plan_json(const PlanReport& report) {
  const ModelSpec& m = report.model;
  const ClusterSpec& c = report.cluster;
  const SearchResult& r = report.outcome.result;
  const Plan& best = r.ranked.front();
  // A plan as the plan file writes it; null where there is none.
  auto plan_json = [&](const std::optional<Plan>& p) {
    return p ? io::plan_to_json(*p, m, c) : nlohmann::json();
  };
  nlohmann::json plans = nlohmann::json::array();
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    nlohmann::json j = io::plan_to_json(r.ranked[i], m, c);
    if (i == 0 && report.options.explain && !best.choice.offload) {
      TimeContext own = report.ctx;
      own.links.world = best.choice.parallel.world();
      j["explain"] = layer_explanation_json(own, best);
    }
    if (i < report.verified.size()) {
      const Verified& v = report.verified[i];
      j["simulated"] = {{"iteration_s", v.iteration.value()},
                        {"oom_events", v.oom_events},
                        {"planner_rank", v.planner_rank + 1}};
      if (v.tokens_per_joule > 0) j["simulated"]["tokens_per_joule"] = v.tokens_per_joule;
    }
    plans.push_back(std::move(j));
  }
  nlohmann::json by_cap = nlohmann::json::array();
  for (const CapPoint& p : best_plan_by_cap(report))
    by_cap.push_back({{"power_limit_W", p.cap_w},
                      {"compute_clock", p.compute_clock},
                      {"iteration_s", p.iteration.value()},
                      {"tokens_per_s", p.tokens_per_second},
                      {"gpu_power_W", p.watts},
                      {"tokens_per_joule", p.tokens_per_joule}});
  nlohmann::json budget;
  if (!report.budget.empty()) {
    budget["kW"] = *report.options.power_budget_kw;
    budget["sizes"] = nlohmann::json::array();
    for (const BudgetPoint& p : report.budget) {
      nlohmann::json size = {{"gpus", p.gpus}, {"power_cap_W", p.cap_w}};
      if (p.planned) {
        size["iteration_s"] = p.iteration.value();
        size["tokens_per_s"] = p.tokens_per_second;
        size["gpu_power_W"] = p.draw_w;
      } else {
        size["why"] = p.why;
      }
      budget["sizes"].push_back(size);
    }
  }
  nlohmann::json launch;
  if (const std::optional<MegatronReading>& read = report.options.megatron) {
    launch = {{"source", read->source},
              {"fixed", read->fixed},
              {"notes", read->notes},
              {"not_priced", read->ignored}};
    if (read->measured_iteration_ms) {
      launch["measured_iteration_s"] = *read->measured_iteration_ms / 1e3;
      launch["logged_iterations"] = read->logged_iterations;
    }
    nlohmann::json memory = nlohmann::json::array();
    for (const io::LoggedMemory& m : read->memory) {
      nlohmann::json j = {{"max_allocated_bytes", m.max_allocated_bytes},
                          {"max_reserved_bytes", m.max_reserved_bytes}};
      if (m.rank) j["rank"] = *m.rank;
      memory.push_back(j);
    }
    launch["measured_memory"] = memory;
  }
  nlohmann::json one_change = nlohmann::json::array();
  for (const OneChange& k : changes_to_the_run(report))
    one_change.push_back({{"change", k.change},
                          {"iteration_s", k.score.time.iteration.value()},
                          {"peak_memory_GB", k.score.peak_bytes.value() / 1e9},
                          {"fits", k.score.memory.fits}});
  print_json({{"model", m.name},
              {"megatron_args", launch},
              {"one_change", one_change},
              {"power_budget", budget},
              {"cluster", c.name},
              {"gpus", report.request.num_gpus},
              {"global_batch", report.options.global_batch},
              {"seq_len", report.options.seq_len},
              {"skew", report.skew.describe()},
              {"objective", objective_name(report.request.objective)},
              {"search",
               {{"layouts", r.stats.layouts},
                {"pruned_by_memory", r.stats.pruned_by_memory},
                {"evaluated", r.stats.evaluated},
                {"cut_by_time_bound", r.stats.bounded},
                {"seconds", r.stats.seconds}}},
              {"verified", report.verified.size()},
              {"plans", plans},
              {"megatron_alternative", plan_json(report.outcome.megatron_alternative)},
              {"aptmoe_alternative", plan_json(report.outcome.aptmoe_alternative)},
              {"free_layout_best", plan_json(report.free_best)},
              {"time_budget_s", report.request.time_limit.value()},
              {"energy_by_cap", by_cap}});
}

void print_plan_text(const PlanReport& report) {
  print_ranked_plans(report);
  print_power_budget(report);
  print_best_plan_time(report);
  print_memory_by_stage(report);
  print_launch_arguments(report);
  print_explanations(report);
}

}  // namespace moe::cli
