// A Megatron-LM launch read back: the arguments of a pretrain_gpt.py command line (or a script
// that holds one, torchrun's options included) as the layout and switches moeplan prices. It is
// the inverse of megatron_arguments() (planner/plan.h): a plan's printed arguments read back
// give the plan.
//
// A command line describes one run, so a flag it leaves out means Megatron's default, not "any":
// no --tensor-model-parallel-size is TP 1, no --use-distributed-optimizer is plain DDP (ZeRO 0),
// no --bf16 is FP32, no --moe-token-dispatcher-type is allgather, no --moe-permute-fusion is the
// unfused permutation, --expert-tensor-parallel-size defaults to TP, selective recompute without
// --recompute-modules replays core_attn, and the fused loss runs the native kernel. Only the
// micro-batch and global batch stay open when absent (Megatron requires them).
//
// Model flags the arguments state (--num-layers, --hidden-size, --num-experts, ...) are checked
// against the model file, so arguments meant for another model are refused. Flags moeplan does
// not price are listed (`ignored`); those it prices only approximately say how (`notes`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/megascale.h"
#include "planner/memory_model.h"
#include "planner/model_spec.h"
#include "planner/parallel.h"
#include "planner/plan.h"

namespace moe::io {

// A rank's "[Rank N] ... memory (MB) | allocated: a | max allocated: A | reserved: r | max
// reserved: R" report (megatron/training/utils.py, report_memory), in bytes: the largest its
// lines give. rank is unset where the line names none.
struct LoggedMemory {
  std::optional<int64_t> rank;
  double max_allocated_bytes = 0, max_reserved_bytes = 0;
};

struct MegatronRun {
  // The run as a plan: its layout (tp, pp, cp, ep and etp for MoE models, vpp or the layout,
  // pp_first/pp_last, mbs and gbs where given; dp follows from the GPUs) and every switch,
  // Megatron's default where its flag is absent. seq_len is the run's where `seq_len` is set.
  PlanChoice choice;
  std::optional<int64_t> seq_len;  // --seq-length
  std::optional<int64_t> gpus;     // torchrun's --nnodes x --nproc-per-node
  // --moe-expert-capacity-factor: the busiest expert rank receives at most this many times its
  // balanced share (the rest is dropped), priced as routing skew capacity=F.
  std::optional<double> capacity_factor;
  // A log's "elapsed time per iteration (ms)" values in order, where the text is a training
  // log (empty otherwise): the measurement to set the prediction beside.
  std::vector<double> logged_iteration_ms;
  // Its memory reports, a rank each (where the line names it).
  std::vector<LoggedMemory> logged_memory;
  std::vector<std::string> ignored;  // flags read past, unpriced
  std::vector<std::string> notes;    // how an approximately priced flag was taken
};

// The whitespace-separated words of a launch script or argument list: comments (# to the end
// of the line) dropped, and the quotes and line-continuation backslashes around a word taken
// off, so that a flag reads the same in `--x 1 \`, `"--x" '1'` and an args array.
std::vector<std::string> launch_words(const std::string& text);

// The arguments a Megatron-LM log prints at start-up ("------ arguments ------", then
// "  tensor_model_parallel_size ...... 8" a line: every field resolved, the world size among
// them) as the flags they stand for; nullopt when `text` has none. `others` counts the fields
// this reader does not price.
std::optional<std::vector<std::string>> logged_argument_words(const std::string& text,
                                                              int64_t* others);

// The "elapsed time per iteration (ms): T" values of a Megatron-LM training log, in order.
std::vector<double> logged_iteration_times_ms(const std::string& text);
// A training log's memory reports, one entry a rank that printed any (its largest values), in
// the order the ranks first appear; the log prints MiB.
std::vector<LoggedMemory> logged_memory_reports(const std::string& text);
// The iteration a log measured: the median of its logged times past the first (which holds
// the warm-up); nullopt with fewer than two.
std::optional<double> typical_logged_iteration_ms(const std::vector<double>& logged);

// Reads the arguments in `text` for model `m`: a command line, a launch script, or a Megatron
// log's arguments block. Throws InputError(source, flag, problem) for a
// value that is not one, a model flag that contradicts `m`, or sizes Megatron itself refuses.
MegatronRun read_megatron_arguments(const std::string& text, const ModelSpec& m,
                                    const std::string& source);
// The same from a file, or from standard input for "-".
MegatronRun load_megatron_arguments(const std::string& path, const ModelSpec& m);

}  // namespace moe::io
