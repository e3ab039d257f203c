// Helpers the subcommands share: parsing option values that name a mode, and turning a
// --parallel string into a checked layout for a model.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/affinity_run.h"
#include "calibrate/nccl_bench.h"
#include "planner/cluster_spec.h"
#include "planner/efficiencies.h"
#include "planner/errors.h"
#include "planner/memory_model.h"
#include "planner/model_spec.h"
#include "planner/monta.h"
#include "planner/parallel.h"
#include "planner/plan.h"
#include "planner/routing_skew.h"

namespace moe::cli {

// One warning line when the plan file names (io::planned_model) another model than the one
// given (a plan is priced for what it is given; another model is usually the wrong file, where
// another cluster is a question worth asking). Call it once the plan has passed its checks, so
// that an error stays the only line.
void warn_if_planned_for_another(const std::string& plan_file, const std::string& planned_model,
                                 const ModelSpec& m);

// Parses, resolves and checks a layout against the model and the sequence it splits; errors
// name the --parallel option.
ParallelConfig layout_for(const std::string& text, const ModelSpec& m, int64_t seq_len);
// A saved plan's layout against the model and cluster: one InputError naming `plan_file` and
// /parallel when it does not divide the model or needs more GPUs than the cluster has.
void check_plan_layout(const PlanChoice& choice, const ModelSpec& m, const ClusterSpec& c,
                       const std::string& plan_file);
// Prints a warning when a layout spans a different number of GPUs than the cluster has.
void warn_world_size(const ParallelConfig& p, const ClusterSpec& c);
// A --skew spec (balanced | capacity=F | G=x | worst) or a popularity file (.json) of observed
// per-expert counts, checked against the model's expert count.
RoutingSkew skew_for(const std::string& text, const ModelSpec& m);
// A calibration file read once: its efficiency curves over the defaults (the defaults alone for
// ""), and the GPU its provenance says it was measured on (gpu.name, as `calibrate` writes it;
// empty where it names none).
// gemm_sustain_s: the seconds each GEMM shape ran back to back before it was timed
// (provenance gemm_sustain_s, `calibrate --sustain`; 0: timed cool).
struct CalibrationIn {
  std::string file;
  Efficiencies efficiencies;
  std::string measured_on;
  double gemm_sustain_s = 0;
};
CalibrationIn calibration_from(const std::string& calibration_file);
// The cluster with its GPUs' power capped at `watts` (--power-limit), or as it is without.
ClusterSpec capped(ClusterSpec c, std::optional<double> watts);
// A warning line each for a calibration measured on another GPU than the cluster's ("H100"
// against "H800": efficiencies carry over between like GPUs only), and for GEMM curves timed at
// the power limit's clock (--sustain) on a cluster whose GPUs the planner slows by their power
// limit too (node.gpu.power): that clock would count twice. Call it after the checks, as
// warn_if_planned_for_another.
void warn_about_calibration(const CalibrationIn& cal, const ClusterSpec& c);
// The chip in a GPU's name: "H100" in "NVIDIA H100 80GB HBM3", "A800" in "A800-PCIe-40GB",
// "B200" in "B200 (GB200 NVL72)"; empty when none.
std::string gpu_chip(const std::string& name);
Dtype parse_dtype(const std::string& text, const std::string& option);
// The whole of `text` as an integer above zero, or nothing ("2x", "0", "" and overflow alike).
std::optional<int64_t> positive_integer(const std::string& text);
// The whole of `text` as a finite number, or nothing ("2x", "", "nan", "inf" alike).
std::optional<double> finite_number(const std::string& text);

// A switch's named value, from its name table (planner/plan.h) or a list; "search" (where the
// switch allows it) leaves it to the search. Errors name `option` (and `where` in it, a --sweep
// axis).
template <class E>
std::optional<E> named(const std::string& option, const std::string& value,
                       std::span<const EnumName<E>> names, bool search,
                       const std::string& where = "") {
  std::vector<std::string> known;
  for (const EnumName<E>& n : names) {
    if (value == n.name) return n.value;
    known.emplace_back(n.name);
  }
  if (search) {
    if (value == "search") return std::nullopt;
    known.emplace_back("search");
  }
  throw InputError(option, where,
                   fmt::format("'{}' is not one of {}", value, fmt::join(known, ", ")));
}
template <class E>
std::optional<E> named(const std::string& option, const std::string& value,
                       std::initializer_list<EnumName<E>> names, bool search,
                       const std::string& where = "") {
  return named(option, value, std::span<const EnumName<E>>(names.begin(), names.size()), search,
               where);
}

// The switch names every command takes: plan's flags and whatif's axes alike.
Recompute parse_recompute(const std::string& value, const std::string& option = "--recompute",
                          const std::string& where = "");
Precision parse_precision(const std::string& value, const std::string& option,
                          const std::string& where = "");
Fp8Recipe parse_fp8_recipe(const std::string& value, const std::string& option,
                           const std::string& where = "");
CudaGraph parse_cuda_graph(const std::string& value, const std::string& option,
                           const std::string& where = "");
std::optional<AttentionMode> parse_attention(const std::string& value, const std::string& option,
                                             bool search, const std::string& where = "");
std::optional<bool> parse_on_off(const std::string& value, const std::string& option, bool search,
                                 const std::string& where = "");
// The DP gradients' wire precision: bf16 (true: Megatron's --grad-reduce-in-bf16) or fp32.
std::optional<bool> parse_grad_reduce(const std::string& value, const std::string& option,
                                      bool search, const std::string& where = "");
// Megatron-Core's --recompute-modules names, as a mask for `m`: an unknown name, shared_experts
// (eq. 2 holds no shared-expert activations to save) and a module that matches no layer of the
// model (moe in a dense model, mlp without dense layers, mla_up_proj without MLA) are errors.
// A one-line InputError (source, where) unless Megatron offloads activations under `r` (none,
// selective); `whose` names what set it ("--recompute", "this point's").
void require_offloadable(Recompute r, const std::string& source, const std::string& where,
                         const std::string& whose);
// A one-line InputError (source, where) where an FP8 plan's `recipe` is MXFP8 and `gpu` (of the
// cluster file `cluster`) predates Blackwell (GpuSpec::runs_mxfp8).
void require_mxfp8_runs(const GpuSpec& gpu, Fp8Recipe recipe, const std::string& cluster,
                        const std::string& source, const std::string& where);
// Megatron's --offload-modules names as a mask; a one-line InputError for an unknown name or
// an expert module on a model without MoE layers.
uint32_t parse_offload_modules(const std::vector<std::string>& names, const ModelSpec& m,
                               const std::string& option = "--offload-modules");
uint32_t parse_recompute_modules(const std::vector<std::string>& names, const ModelSpec& m,
                                 const std::string& option = "--recompute-modules");
// Megatron-Core's --moe-token-dispatcher-type names: alltoall, allgather, or deepep (the flex
// dispatcher on DeepEP).
std::optional<megascale::Dispatcher> parse_dispatcher(const std::string& value,
                                                      const std::string& option, bool search,
                                                      const std::string& where = "");
AttentionKernel parse_attention_kernel(const std::string& value, const std::string& option,
                                       const std::string& where = "");
CrossEntropy parse_cross_entropy(const std::string& value, const std::string& option,
                                 const std::string& where = "");

// APTMoE's split run on GPU `device` and `threads` CPU threads (0: hardware threads - 1) beside
// loading every expert, predicted and measured as JSON (affinity --execute, and execute on an
// offload plan); and its table.
nlohmann::json execute_affinity(const calibrate::AffinityCase& c, int device, int threads,
                                int repeats);
void print_affinity_execution(const nlohmann::json& execution, int device);

// The world a launcher (mpirun, srun, torchrun or MOEPLAN_RANK/WORLD_SIZE) started this process
// in; a world of one without one. Several ranks need `nccl_id_file` to meet through: without it
// require_nccl_id_file throws InputError naming --nccl-id-file.
calibrate::NcclWorld launcher_world();
void require_nccl_id_file(const calibrate::NcclWorld& world, const std::string& nccl_id_file);

// MoNTA's strategies run on NCCL over the ranks a launcher started, which must be tp x ep of
// the problem (a2a --execute, and execute launched as several ranks): baseline, O1, and O2/O3
// at the given chunkings. Every rank runs them in the same order; only rank 0 gets the rows.
// `layout_source` names where tp and ep came from in the error when the world does not match.
struct MontaExecution {
  const char* name;
  int64_t chunks;
  double predicted_s, measured_s;
};
std::optional<std::vector<MontaExecution>> execute_monta(
    const monta::Problem& p, const monta::ChunkChoice& o2, const monta::ChunkChoice& o3,
    const std::string& nccl_id_file, int repeats, const std::string& layout_source);
void print_monta_execution(const std::vector<MontaExecution>& rows, monta::Strategy choice);
// The rows as JSON: strategy, chunks, predicted_s, measured_s.
nlohmann::json monta_execution_json(const std::vector<MontaExecution>& rows);

// A Megatron-LM training log's iterations (--measured-log): the typical one, the median past
// the first (planner/io/megatron_args.h), and how many it logged. An empty path gives none; a
// log with fewer than two is an InputError naming it.
struct LoggedIterations {
  std::optional<double> typical_ms;
  size_t count = 0;
};
LoggedIterations logged_iterations(const std::string& path);

}  // namespace moe::cli
