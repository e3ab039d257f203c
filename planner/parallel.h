// A parallel layout, written `tp=1,pp=4,ep=32,etp=1,dp=1,cp=1,vpp=1,mbs=1,gbs=960`.
//
// Megatron-Core's parallel folding: attention runs on TP x CP x DP x PP GPUs and the experts on
// ETP x EP x EDP x PP over the same GPUs, so tp*cp*dp == etp*ep*edp. A layout may be partial
// (the planner searches the rest); `resolve` fills derivable sizes (dp from ep and edp, edp from
// the rest) and `check` rejects what cannot run: heads, KV heads or experts not divisible,
// layers fewer than pipeline chunks, a batch that does not split.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "planner/model_spec.h"

namespace moe {

struct ParallelConfig {
  std::optional<int64_t> tp, pp, ep, etp, edp, dp, cp, vpp, mbs, gbs;
  // Layers on the first and last pipeline stages when they differ from the rest (Megatron's
  // --decoder-first/last-pipeline-num-layers): lighter end stages make room for the embedding
  // and the output head. Written pp_first=N,pp_last=M.
  std::optional<int64_t> pp_first, pp_last;

  int64_t world() const;      // tp*cp*dp*pp; needs them all set
  int64_t expert_dp() const;  // edp; needs tp, cp, dp, etp, ep
  bool complete() const;      // every size but gbs is set
  std::string to_string() const;
};

// Parses the key=value list. Throws InputError(option, key, problem) on an unknown key, a
// repeated key or a non-positive size.
ParallelConfig parse_parallel(const std::string& text, const std::string& option = "--parallel");

// Every size by its name in `--parallel` and in plan files ("tp", ..., "pp_first", "pp_last").
struct ParallelField {
  const char* key;
  std::optional<int64_t> ParallelConfig::*member;
};
std::span<const ParallelField> parallel_fields();

// Fills the sizes a partial layout implies, with 1 for unset tp, pp, cp, etp, vpp, mbs and
// ep = 1 for dense models; derives dp or edp from the folding identity. Throws ConfigError when
// the identity cannot hold.
ParallelConfig resolve(ParallelConfig p);

// Checks a resolved layout against the model. Throws ConfigError naming the size that fails.
void check(const ParallelConfig& p, const ModelSpec& m);

// Layers held by pipeline stage `stage`: pp_first / pp_last where set, the rest split evenly
// over the other stages (check() requires that to divide, as Megatron does), and the index of
// a stage's first layer.
int64_t layers_in_stage(const ModelSpec& m, const ParallelConfig& p, int64_t stage);
int64_t first_layer_of_stage(const ModelSpec& m, const ParallelConfig& p, int64_t stage);

// A communication group of a resolved layout: its n members sit `stride` ranks apart in
// Megatron's rank order (tp, cp, ep/dp, pp from fastest to slowest), so it spans n x stride
// consecutive ranks. TP: tp at 1; CP: cp at tp; EP: ep at etp (without EP, expert TP's etp at
// 1: MegaScale eq. 4's gather and scatter); DP: dp x cp at tp (the dense gradients' group).
enum class GroupKind { kTp, kCp, kEp, kDp };
struct GroupShape {
  int64_t n = 1, stride = 1;
  int64_t span() const { return n * stride; }
};
GroupShape group_shape(const ParallelConfig& p, GroupKind k);

}  // namespace moe
