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
#include <vector>

#include "planner/model_spec.h"

namespace moe {

// Megatron's flexible pipeline layout (--pipeline-model-parallel-layout): the decoder layers of
// each virtual stage in Megatron's order (chunk k of stage s is entry k * pp + s) and the
// virtual stage holding the MTP modules. Empty when not given.
struct PipelineLayout {
  std::vector<int64_t> decoder_layers;  // per virtual stage
  int64_t mtp = 0;                      // MTP modules (m)
  int64_t mtp_stage = -1;               // the virtual stage they sit in; -1 without them
  bool empty() const { return decoder_layers.empty(); }
  bool operator==(const PipelineLayout&) const = default;
};

struct ParallelConfig {
  std::optional<int64_t> tp, pp, ep, etp, edp, dp, cp, vpp, mbs, gbs;
  // Layers on the first and last pipeline stages when they differ from the rest (Megatron's
  // --decoder-first/last-pipeline-num-layers): lighter end stages make room for the embedding
  // and the output head. Written pp_first=N,pp_last=M.
  std::optional<int64_t> pp_first, pp_last;
  // Written layout=Et*3|(tt|)*29,m|L, Megatron's syntax (its cosmetic commas allowed).
  PipelineLayout layout;

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

// With a pipeline layout: checks pp divides its virtual stages and sets vpp to their ratio.
// Throws ConfigError when pp is missing or the sizes disagree.
void apply_layout(ParallelConfig& p);

// Fills the sizes a partial layout implies, with 1 for unset tp, pp, cp, etp, vpp, mbs and
// ep = 1 for dense models; derives dp or edp from the folding identity. Throws ConfigError when
// the identity cannot hold.
ParallelConfig resolve(ParallelConfig p);

// Checks a resolved layout against the model. Throws ConfigError naming the size that fails.
void check(const ParallelConfig& p, const ModelSpec& m);
// Checks that a layout splits `seq_len` tokens as Megatron does: context parallelism into
// 2 x cp load-balanced chunks, and sequence parallelism (on whenever tp > 1) each CP rank's
// tokens over TP. Throws ConfigError naming the size that fails.
void check_sequence(const ParallelConfig& p, int64_t seq_len);
// Why no layout of `world` GPUs can keep the sizes `fixed` holds, when they rule it out on their
// own: a product of them that does not divide the GPUs, one that check() or check_sequence()
// rejects with the unset sizes at 1, or a micro-batch or dp the global batch does not split
// into. Empty when only their combination with the searched sizes fails.
std::optional<std::string> fixed_sizes_problem(const ParallelConfig& fixed, const ModelSpec& m,
                                               int64_t world, int64_t seq_len, int64_t gbs);

// Megatron's layout string parsed: "(..)*N" and "x*N" unrolled, virtual stages split at '|',
// each a run of E (embedding), t (decoder layer), m (MTP module) and L (loss). The embedding
// opens the first stage and the loss closes the last; the MTP modules share one virtual stage,
// after its decoder layers and after every decoder layer of the model, as Megatron requires.
// Throws InputError(source, where, problem).
PipelineLayout parse_pipeline_layout(const std::string& text, const std::string& source,
                                     const std::string& where = "layout");
// The layout in Megatron's syntax, runs of equal stages folded: decoder layers {1, 2, 2, 2, 1}
// with one MTP module in the last stage give "Et|(t*2|)*3tmL".
std::string format_pipeline_layout(const PipelineLayout& layout);
// Whether a layout has the shape the search builds: every virtual stage but the first and last
// holds the same k layers, and those two hold at most k.
bool has_end_light_shape(const PipelineLayout& layout);
// The pipeline stage that runs the MTP modules, in its last model chunk: the last stage unless a
// layout puts them elsewhere.
int64_t mtp_stage(const ParallelConfig& p);

// The layers of model chunk `chunk` of pipeline stage `stage`, [begin, end). Without a layout a
// stage holds consecutive layers (pp_first / pp_last where set, the rest split evenly, as
// check() requires) and chunk k of its n layers holds [n k / v, n (k + 1) / v) of them; with
// one, chunk k of stage s is virtual stage k * pp + s, after every virtual stage before it.
struct LayerRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
LayerRange chunk_layers(const ModelSpec& m, const ParallelConfig& p, int64_t stage, int64_t chunk);
int64_t layers_in_stage(const ModelSpec& m, const ParallelConfig& p, int64_t stage);
// Calls f(layer) for each layer stage `stage` holds, chunk by chunk.
template <class F>
void for_each_stage_layer(const ModelSpec& m, const ParallelConfig& p, int64_t stage, F f) {
  for (int64_t k = 0; k < p.vpp.value_or(1); ++k) {
    const LayerRange r = chunk_layers(m, p, stage, k);
    for (int64_t l = r.begin; l < r.end; ++l) f(l);
  }
}
// The layers a stage holds as Megatron logs them ("8-15", or "0-3, 32-35" interleaved by a
// layout), for tables.
std::string stage_layer_label(const ModelSpec& m, const ParallelConfig& p, int64_t stage);

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
