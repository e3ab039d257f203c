#include "planner/io/plan_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/megatron_flops.h"
#include "planner/monta.h"
#include "planner/power_limit.h"

namespace moe::io {

namespace {
constexpr const char* kPlanFormat = "moeplan-plan/1";

nlohmann::json parallel_json(const ParallelConfig& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const ParallelField& f : parallel_fields()) {
    if ((p.*f.member).has_value()) j[f.key] = *(p.*f.member);
  }
  if (!p.layout.empty()) j["layout"] = format_pipeline_layout(p.layout);
  return j;
}
}  // namespace

nlohmann::json stage_memory_json(const StageMemory& s, const std::string& layer_ids) {
  return {{"stage", s.stage},
          {"first_layer", s.first_layer},
          {"layer_ids", layer_ids},
          {"layers", s.num_layers},
          {"moe_layers", s.num_moe_layers},
          {"params_per_gpu", s.params_per_gpu},
          {"expert_params_per_gpu", s.expert_params_per_gpu},
          {"static_bytes", s.static_bytes.value()},
          {"checkpoint_bytes", s.checkpoint_bytes.value()},
          {"activation_bytes", s.activation_bytes.value()},
          {"offloaded_per_layer_bytes", s.offloaded_per_layer.value()},
          {"total_bytes", s.total_bytes.value()},
          {"host_bytes", s.host_bytes.value()},
          {"fits", s.fits},
          {"m_g", s.m_g},
          {"max_received_tokens", s.max_received_tokens},
          {"mact_chunks", s.mact_chunks},
          {"chunks", s.chunks}};
}

nlohmann::json deepspeed_config(const Plan& plan) {
  const ParallelConfig& p = plan.choice.parallel;
  const int64_t accumulation = p.gbs.value_or(*p.mbs * *p.dp) / (*p.mbs * *p.dp);
  nlohmann::json j = {{"train_batch_size", p.gbs.value_or(*p.mbs * *p.dp)},
                      {"train_micro_batch_size_per_gpu", *p.mbs},
                      {"gradient_accumulation_steps", accumulation},
                      {"zero_optimization", {{"stage", plan.choice.zero_stage}}},
                      {"gradient_clipping", 1.0}};
  // FP8 runs its GEMMs through Transformer Engine inside BF16 mixed precision.
  if (plan.choice.precision != Precision::kFp32) j["bf16"] = {{"enabled", true}};
  // Megatron's --grad-reduce-in-bf16 in DeepSpeed's words: gradients reduced and accumulated in
  // BF16 (BF16_Optimizer accumulates in FP32 unless data_types says otherwise).
  if (gradient_bytes(plan.choice) == 2) {
    j["communication_data_type"] = "bf16";
    j["data_types"] = {{"grad_accum_dtype", "bf16"}};
  }
  if (plan.choice.recompute == Recompute::kFull) {
    j["activation_checkpointing"] = {{"partition_activations", *p.tp > 1},
                                     {"contiguous_memory_optimization", false}};
  }
  if (const double f = plan.choice.optimizer_offload; f > 0) {
    // ZeRO-Offload: the optimizer states and step on the CPU (stage 1 at least); `ratio` is the
    // share offloaded, where DeepSpeed splits them.
    nlohmann::json& z = j["zero_optimization"];
    z["stage"] = std::max(plan.choice.zero_stage, 1);
    z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (f < 1) z["offload_optimizer"]["ratio"] = f;
  }
  if (plan.choice.offload) {
    // The runnable neighbour of APTMoE in DeepSpeed: ZeRO-Infinity style CPU offload.
    j["zero_optimization"] = {{"stage", 3},
                              {"offload_param", {{"device", "cpu"}, {"pin_memory", true}}},
                              {"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}}};
  }
  return j;
}

namespace {
// MoNTA's CP/EP placement (Sec. 5, Fig. 12) on the cluster's scale-out switch.
nlohmann::json cp_expansion_json(const Plan& plan, const ClusterSpec& c) {
  const ParallelConfig& p = plan.choice.parallel;
  const monta::CpExpansionChoice e =
      monta::choose_cp_expansion(p.cp.value_or(1), p.ep.value_or(1), c.switch_radix);
  return {{"layout", monta::cp_expansion_name(e.expansion)},
          {"network_scale", e.network_scale},
          {"fits_switch", e.fits_switch},
          {"reason", e.reason}};
}
}  // namespace

nlohmann::json plan_to_json(const Plan& plan, const ModelSpec& m, const ClusterSpec& c) {
  const PlanChoice& ch = plan.choice;
  const PlanScore& s = plan.score;
  const TimeBreakdown& t = s.time;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& st : s.memory.stages)
    stages.push_back(stage_memory_json(st, stage_layer_label(m, ch.parallel, st.stage)));
  nlohmann::json out = {{"format", kPlanFormat},
                        {"model", m.name},
                        {"cluster", c.name},
                        {"gpus", ch.gpus()},
                        {"parallel", parallel_json(ch.parallel)},
                        {"seq_len", ch.seq_len},
                        {"alpha", s.alpha},
                        {"compute_clock", ch.compute_clock},
                        {"schedule", schedule_name(ch.schedule())},
                        {"switches",
                         {{"recompute", recompute_name(ch.recompute)},
                          {"attention", attention_mode_name(ch.attention)},
                          {"dispatcher", megascale::dispatcher_name(ch.dispatcher)},
                          {"alltoall_strategy", monta::strategy_name(ch.alltoall)},
                          {"alltoall_chunks", ch.alltoall_chunks},
                          {"mact", ch.mact},
                          {"fcda_chunks", ch.fcda_chunks},
                          {"dp_bf16_compression", ch.dp_bf16_compression},
                          {"overlap", ch.overlap},
                          {"intra_overlap", ch.intra_overlap},
                          {"permute_fusion", ch.permute_fusion},
                          {"cuda_graph", cuda_graph_name(ch.cuda_graph)},
                          {"attention_kernel", attention_kernel_name(ch.attention_kernel)},
                          {"cross_entropy", cross_entropy_name(ch.cross_entropy)},
                          {"offload", ch.offload},
                          {"predictor_accuracy", ch.predictor_accuracy},
                          {"historical_accuracy", ch.historical_accuracy},
                          {"load_window", ch.load_window},
                          {"gpipe", ch.gpipe},
                          {"zero_stage", ch.zero_stage},
                          {"precision", precision_name(ch.precision)},
                          {"fp8_recipe", fp8_recipe_name(ch.fp8_recipe)}}},
                        {"predicted",
                         {{"iteration_s", t.iteration.value()},
                          {"tokens_per_s", s.tokens_per_second},
                          {"mfu", s.mfu},
                          {"tgs", s.tgs},
                          {"microbatches", t.microbatches},
                          {"breakdown_s",
                           {{"compute", t.compute.value()},
                            {"recompute", t.recompute.value()},
                            {"tp_comm", t.tp_comm.value()},
                            {"ep_comm", t.ep_comm.value()},
                            {"cp_comm", t.cp_comm.value()},
                            {"pp_comm", t.pp_comm.value()},
                            {"dp_comm", t.dp_comm.value()},
                            {"bubble", t.bubble.value()},
                            {"optimizer", t.optimizer.value()},
                            {"pcie_load", t.pcie_load.value()},
                            {"activation_offload", t.activation_offload.value()},
                            {"cpu_experts", t.cpu_experts.value()},
                            {"host", t.host.value()}}},
                          {"ep_comm_held_sms_s", t.ep_held_sms.value()},
                          {"pp_comm_send_stretch_s", t.pp_send_stretch.value()},
                          {"compute_busy_share", compute_busy_share(t)},
                          {"peak_bytes", s.peak_bytes.value()},
                          {"host_bytes", s.host_bytes.value()},
                          {"headroom_bytes", s.headroom.value()},
                          {"oom_received_tokens", s.oom_received_tokens},
                          {"stages", stages}}},
                        {"cp_expansion", cp_expansion_json(plan, c)},
                        {"megatron_args", megatron_arguments(plan, m, c.node.num_gpus)},
                        {"megatron_gaps", megatron_gaps(plan, m)},
                        {"deepspeed",
                         {{"config", deepspeed_config(plan)},
                          {"moe_layer_args", {{"ep_size", *ch.parallel.ep}, {"k", m.top_k}}}}}};
  // Megatron's --recompute-modules, where selective recompute replays them.
  if (ch.recompute == Recompute::kSelective)
    out["switches"]["recompute_modules"] = recompute_module_names(ch.recompute_modules);
  // Megatron's --offload-modules, where activations are offloaded.
  if (ch.offload_modules != 0)
    out["switches"]["offload_modules"] = offload_module_names(ch.offload_modules);
  if (ch.optimizer_offload > 0) out["switches"]["optimizer_offload"] = ch.optimizer_offload;
  // Megatron's precision-aware optimizer, where the plan runs it.
  if (ch.adam.precision_aware) {
    out["switches"]["adam_states"] = {{"main_params", state_dtype_name(ch.adam.main_params)},
                                      {"exp_avg", state_dtype_name(ch.adam.exp_avg)},
                                      {"exp_avg_sq", state_dtype_name(ch.adam.exp_avg_sq)}};
  }
  // The cap the plan sets on its boards, and the command that sets it (as root, on each node).
  if (ch.power_cap_w > 0) {
    out["switches"]["power_cap_W"] = ch.power_cap_w;
    out["nvidia_smi"] = fmt::format("nvidia-smi -pl {:.0f}", ch.power_cap_w);
  }
  // The power limit the clock was derived under (the cluster's, or plan --power-limit's cap),
  // and what the boards draw: the busiest stage's, for every GPU of the plan.
  if (c.node.gpu.power.limit_w > 0 && !ch.offload) {
    out["power_limit_W"] = power_under_cap(c.node.gpu.power, ch).limit_w;
    const BoardEnergy e = board_energy(c.node.gpu.power, plan);
    out["predicted"]["gpu_power_W"] = e.watts;
    out["predicted"]["tokens_per_joule"] = e.tokens_per_joule;
  }
  // Whose once-per-iteration DP sync shows most (absent when none runs).
  if (t.dp_reduce_stage >= 0) {
    out["predicted"]["dp_sync"]["reduce_scatter"] = {{"stage", t.dp_reduce_stage},
                                                     {"seconds", t.dp_reduce_scatter.value()}};
  }
  if (t.dp_gather_stage >= 0) {
    out["predicted"]["dp_sync"]["all_gather"] = {{"stage", t.dp_gather_stage},
                                                 {"seconds", t.dp_all_gather.value()}};
  }
  // What the exposed DP time sums (TimeBreakdown::dp_once ... dp_stream).
  if (t.dp_comm.value() > 0) {
    out["predicted"]["dp_sync"]["exposed_s"] = {
        {"once_per_iteration", t.dp_once.value()},
        {"paced_passes", t.dp_paced.value()},
        {"paced_stage", t.dp_paced_stage},
        {"paced_reduce_scatter", t.dp_paced_reduce_scatter.value()},
        {"paced_all_gather", t.dp_paced_all_gather.value()},
        {"dp_link", t.dp_link.value()},
        {"dp_stream", t.dp_stream.value()}};
  }
  // What Megatron-LM's log line would print (an APTMoE offload plan does not run there).
  if (!ch.offload) {
    out["predicted"]["megatron_log"] = {
        {"elapsed_time_per_iteration_ms", t.iteration.value() * 1e3},
        {"throughput_per_gpu_tflops",
         megatron_logged_tflops(m, ch.seq_len, *ch.parallel.gbs, *ch.parallel.tp, ch.gpus(),
                                t.iteration)}};
  }
  return out;
}

namespace {
// A switch's value by its name, from its name table (planner/plan.h) or a list.
template <typename E>
E enum_of(ObjectReader& r, const std::string& key, std::span<const EnumName<E>> names) {
  const std::string v = r.string(key);
  std::string known;
  for (const EnumName<E>& n : names) {
    if (v == n.name) return n.value;
    known += (known.empty() ? "" : ", ") + std::string(n.name);
  }
  r.fail(key, fmt::format("'{}' is not one of {}", v, known));
}
template <typename E>
E enum_of(ObjectReader& r, const std::string& key, std::initializer_list<EnumName<E>> names) {
  return enum_of(r, key, std::span<const EnumName<E>>(names.begin(), names.size()));
}
}  // namespace

PlanChoice plan_choice_from_json(const nlohmann::json& j, const std::string& source) {
  ObjectReader r(j, source, "");
  const std::string format = r.string("format");
  if (format != kPlanFormat) r.fail("format", fmt::format("'{}' is not {}", format, kPlanFormat));
  PlanChoice c;
  ObjectReader p = r.object("parallel");
  for (const ParallelField& f : parallel_fields()) {
    // Uneven first/last pipeline stages are optional; every other size is required.
    const bool optional = std::string(f.key) == "pp_first" || std::string(f.key) == "pp_last";
    if (optional && !p.has(f.key)) continue;
    c.parallel.*f.member = positive(p, f.key);
  }
  // Megatron's --pipeline-model-parallel-layout, optional.
  if (p.has("layout")) {
    c.parallel.layout = parse_pipeline_layout(p.string("layout"), source, "/parallel/layout");
    try {
      apply_layout(c.parallel);
    } catch (const ConfigError& e) {
      p.fail("layout", e.what());
    }
  }
  p.finish();
  c.seq_len = positive(r, "seq_len");
  ObjectReader s = r.object("switches");
  c.recompute = enum_of<Recompute>(s, "recompute",
                                   {{"none", Recompute::kNone},
                                    {"selective", Recompute::kSelective},
                                    {"full", Recompute::kFull},
                                    {"sar", Recompute::kRematerialize}});
  // A list of Megatron's module names as a mask, `all` naming every known one.
  auto modules = [&](const char* key, auto from_names, auto names_of, uint32_t all) {
    std::string unknown;
    const std::optional<uint32_t> mods = from_names(s.string_array(key), &unknown);
    if (!mods)
      s.fail(key, fmt::format("'{}' is not one of {}", unknown, fmt::join(names_of(all), ", ")));
    return *mods;
  };
  // Megatron's --recompute-modules (files written before it default to moe_act layernorm).
  if (s.has("recompute_modules")) {
    c.recompute_modules = modules("recompute_modules", recompute_modules_from_names,
                                  recompute_module_names, kAllRecomputeModules);
  }
  if (s.has("offload_modules")) {
    c.offload_modules = modules("offload_modules", offload_modules_from_names, offload_module_names,
                                kAllOffloadModules);
    if (!offload_allowed(c.recompute))
      s.fail("offload_modules", fmt::format("activations are not offloaded under recompute {}",
                                            recompute_name(c.recompute)));
  }
  if (s.has("power_cap_W")) {
    c.power_cap_w = s.number("power_cap_W");
    if (!(c.power_cap_w > 0)) s.fail("power_cap_W", "must be a positive number of watts");
  }
  if (s.has("optimizer_offload")) {
    c.optimizer_offload = s.number("optimizer_offload");
    if (!(c.optimizer_offload >= 0 && c.optimizer_offload <= 1))
      s.fail("optimizer_offload", "must be a share between 0 and 1");
  }
  c.attention = enum_of<AttentionMode>(
      s, "attention", {{"tp", AttentionMode::kTensor}, {"ulysses", AttentionMode::kUlysses}});
  c.dispatcher = enum_of<megascale::Dispatcher>(s, "dispatcher",
                                                {{"alltoall", megascale::Dispatcher::kAllToAll},
                                                 {"allgather", megascale::Dispatcher::kAllGather},
                                                 {"deepep", megascale::Dispatcher::kDeepEp}});
  c.alltoall = enum_of<monta::Strategy>(s, "alltoall_strategy",
                                        {{"baseline", monta::Strategy::kBaseline},
                                         {"O1", monta::Strategy::kO1},
                                         {"O2", monta::Strategy::kO2},
                                         {"O3", monta::Strategy::kO3}});
  c.alltoall_chunks = positive(s, "alltoall_chunks");
  c.mact = s.boolean_or("mact", false);
  c.fcda_chunks = positive(s, "fcda_chunks");
  c.dp_bf16_compression = s.boolean_or("dp_bf16_compression", false);
  c.overlap = s.boolean_or("overlap", true);
  c.intra_overlap = s.boolean_or("intra_overlap", false);
  c.permute_fusion = s.boolean_or("permute_fusion", true);
  if (s.has("cuda_graph")) {
    c.cuda_graph = enum_of(s, "cuda_graph", cuda_graph_names());
  }
  if (s.has("attention_kernel")) {
    c.attention_kernel = enum_of(s, "attention_kernel", attention_kernel_names());
  }
  if (s.has("cross_entropy")) c.cross_entropy = enum_of(s, "cross_entropy", cross_entropy_names());
  c.offload = s.boolean_or("offload", false);
  auto share = [&](const char* key) {
    const double v = s.number_or(key, 1.0);
    if (!(v >= 0.0 && v <= 1.0)) s.fail(key, fmt::format("{} is not a share in [0, 1]", v));
    return v;
  };
  c.predictor_accuracy = share("predictor_accuracy");
  c.historical_accuracy = share("historical_accuracy");
  c.load_window = s.integer_or("load_window", 0);
  if (c.load_window < 0) s.fail("load_window", fmt::format("{} is negative", c.load_window));
  c.gpipe = s.boolean_or("gpipe", false);
  c.zero_stage = static_cast<int>(s.integer_or("zero_stage", 1));
  if (c.zero_stage < 0 || c.zero_stage > 3)
    s.fail("zero_stage", fmt::format("{} is not a ZeRO stage 0-3", c.zero_stage));
  c.precision = enum_of(s, "precision", precision_names());
  if (s.has("fp8_recipe")) c.fp8_recipe = enum_of(s, "fp8_recipe", fp8_recipe_names());
  if (s.has("adam_states")) {
    ObjectReader a = s.object("adam_states");
    c.adam.precision_aware = true;
    auto dtype = [&](const char* key) {
      return a.has(key) ? enum_of(a, key, state_dtype_names()) : StateDtype::kFp32;
    };
    c.adam.main_params = dtype("main_params");
    c.adam.exp_avg = dtype("exp_avg");
    c.adam.exp_avg_sq = dtype("exp_avg_sq");
    a.finish();
    if (const std::string problem = adam_states_problem(c); !problem.empty())
      s.fail("adam_states", problem);
  }
  s.finish();
  // Predictions, launch arguments and labels are outputs; a reader recomputes what it needs.
  c.offload_gpus = c.offload ? positive(r, "gpus") : 0;
  // The clock the planner left the GPUs under their power limit (files before it: full).
  c.compute_clock = r.number_or("compute_clock", 1.0);
  if (!(c.compute_clock > 0 && c.compute_clock <= 1))
    r.fail("compute_clock", fmt::format("{} is not a share in (0, 1]", c.compute_clock));
  for (const char* key :
       {"model", "cluster", "gpus", "alpha", "power_limit_W", "schedule", "predicted",
        "cp_expansion", "megatron_args", "megatron_gaps", "deepspeed", "nvidia_smi"})
    r.ignore(key);
  r.finish();
  return c;
}

PlanChoice load_plan_choice(const std::string& path) {
  return plan_choice_from_json(read_json_file(path), path);
}

double planned_alpha(const nlohmann::json& plan, const std::string& source) {
  ObjectReader r(plan, source, "");
  const double alpha = r.number_or("alpha", 1.0);
  if (!(alpha > 0 && alpha <= 1))
    r.fail("alpha", fmt::format("{} is not a share in (0, 1]", alpha));
  r.ignore_rest();
  return alpha;
}

std::optional<double> planned_power_limit(const nlohmann::json& plan, const std::string& source) {
  ObjectReader r(plan, source, "");
  if (!r.has("power_limit_W")) {
    r.ignore_rest();
    return std::nullopt;
  }
  const double watts = positive_number(r, "power_limit_W");
  r.ignore_rest();
  return watts;
}

std::string planned_model(const nlohmann::json& plan) {
  return plan.is_object() && plan.contains("model") && plan["model"].is_string()
             ? plan["model"].get<std::string>()
             : std::string();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(path, "", "cannot write file");
    out << text;
    out.flush();
    if (!out) throw InputError(path, "", "write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(path, "", "cannot replace file");
  }
}

}  // namespace moe::io
