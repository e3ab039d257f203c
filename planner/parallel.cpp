#include "planner/parallel.h"

#include <fmt/format.h>

#include <charconv>
#include <vector>

#include "planner/errors.h"

namespace moe {

namespace {

using Field = ParallelField;

constexpr Field kFields[] = {
    {"tp", &ParallelConfig::tp},
    {"pp", &ParallelConfig::pp},
    {"ep", &ParallelConfig::ep},
    {"etp", &ParallelConfig::etp},
    {"edp", &ParallelConfig::edp},
    {"dp", &ParallelConfig::dp},
    {"cp", &ParallelConfig::cp},
    {"vpp", &ParallelConfig::vpp},
    {"mbs", &ParallelConfig::mbs},
    {"gbs", &ParallelConfig::gbs},
    {"pp_first", &ParallelConfig::pp_first},
    {"pp_last", &ParallelConfig::pp_last},
};

}  // namespace

std::span<const ParallelField> parallel_fields() {
  return kFields;
}

namespace {

int64_t get(const std::optional<int64_t>& v, const char* key) {
  if (!v) throw ConfigError(fmt::format("parallel size {} is not set", key));
  return *v;
}

}  // namespace

int64_t ParallelConfig::world() const {
  return get(tp, "tp") * get(cp, "cp") * get(dp, "dp") * get(pp, "pp");
}

int64_t ParallelConfig::expert_dp() const {
  return get(edp, "edp");
}

bool ParallelConfig::complete() const {
  return tp && pp && ep && etp && edp && dp && cp && vpp && mbs;
}

std::string ParallelConfig::to_string() const {
  std::string out;
  for (const Field& f : kFields) {
    const auto& v = this->*f.member;
    if (!v) continue;
    if (!out.empty()) out += ',';
    out += fmt::format("{}={}", f.key, *v);
  }
  return out;
}

namespace {
// Layers left for the stages without an explicit count, and how many such stages there are.
std::pair<int64_t, int64_t> middle(const ModelSpec& m, const ParallelConfig& p) {
  const int64_t pp = *p.pp;
  int64_t layers = m.num_layers, stages = pp;
  if (p.pp_first) layers -= *p.pp_first, --stages;
  if (p.pp_last && pp > 1) layers -= *p.pp_last, --stages;
  return {layers, stages};
}
}  // namespace

ParallelConfig parse_parallel(const std::string& text, const std::string& option) {
  ParallelConfig p;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) {
      if (text.empty()) break;
      throw InputError(option, "", fmt::format("empty item in '{}'", text));
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      throw InputError(option, item, "expected key=value");
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    const Field* field = nullptr;
    for (const Field& f : kFields) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) {
      throw InputError(option, key,
                       "unknown size (known: tp pp ep etp edp dp cp vpp mbs gbs pp_first pp_last)");
    }
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size()) {
      throw InputError(option, key, fmt::format("'{}' is not an integer", value));
    }
    if (n <= 0) throw InputError(option, key, fmt::format("must be positive, got {}", n));
    if (p.*(field->member)) throw InputError(option, key, "given twice");
    p.*(field->member) = n;
  }
  return p;
}

GroupShape group_shape(const ParallelConfig& p, GroupKind k) {
  switch (k) {
    case GroupKind::kTp:
      return {*p.tp, 1};
    case GroupKind::kCp:
      return {*p.cp, *p.tp};
    case GroupKind::kEp:
      return *p.ep > 1 ? GroupShape{*p.ep, *p.etp} : GroupShape{*p.etp, 1};
    case GroupKind::kDp:
      return {*p.dp * *p.cp, *p.tp};
  }
  return {};
}

ParallelConfig resolve(ParallelConfig p) {
  // With no expert sizes given, an unset dp is 1 rather than derived.
  if (!p.dp && !p.ep && !p.edp) p.dp = 1;
  for (auto* v : {&p.tp, &p.pp, &p.cp, &p.etp, &p.vpp, &p.mbs, &p.ep}) {
    if (!*v) *v = 1;
  }
  const int64_t attn = *p.tp * *p.cp;  // attention GPUs per stage, without dp
  const int64_t expert = *p.etp * *p.ep;
  if (!p.dp) {
    // dp follows from the expert side: tp*cp*dp = etp*ep*edp.
    const int64_t edp = p.edp.value_or(1);
    if ((expert * edp) % attn != 0) {
      throw ConfigError(fmt::format(
          "cannot derive dp: etp*ep*edp = {} is not a multiple of tp*cp = {}", expert * edp, attn));
    }
    p.dp = expert * edp / attn;
  }
  const int64_t folded = attn * *p.dp;
  if (folded % expert != 0) {
    throw ConfigError(fmt::format(
        "dp={}: tp*cp*dp = {} is not a multiple of etp*ep = {} (Megatron-Core folds the experts "
        "into the tp x cp x dp GPUs of a stage; raise dp or leave it out to derive it)",
        *p.dp, folded, expert));
  }
  if (p.edp && *p.edp != folded / expert) {
    throw ConfigError(
        fmt::format("edp={} contradicts tp*cp*dp/(etp*ep) = {}", *p.edp, folded / expert));
  }
  p.edp = folded / expert;
  return p;
}

namespace {
void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}
}  // namespace

void check(const ParallelConfig& p, const ModelSpec& m) {
  require(p.complete(), "parallel layout is incomplete: " + p.to_string());
  for (const Field& f : kFields) {
    const auto& v = p.*(f.member);
    require(!v || *v > 0, fmt::format("{}={}: sizes must be positive", f.key, v.value_or(0)));
  }
  const int64_t tp = *p.tp, pp = *p.pp, ep = *p.ep, etp = *p.etp, vpp = *p.vpp;
  const AttentionSpec& a = m.attention;
  require(a.num_heads % tp == 0,
          fmt::format("tp={}: {} attention heads are not divisible by tp", tp, a.num_heads));
  require(a.kind == AttentionKind::kLatent || a.num_kv_heads % tp == 0,
          fmt::format("tp={}: {} KV heads are not divisible by tp", tp, a.num_kv_heads));
  require(m.linear_layer.empty() || m.linear_attention.key_heads % tp == 0,
          fmt::format("tp={}: {} linear-attention key heads are not divisible by tp", tp,
                      m.linear_attention.key_heads));
  if (m.is_moe()) {
    require(m.num_routed_experts % ep == 0,
            fmt::format("ep={}: {} experts are not divisible by ep", ep, m.num_routed_experts));
    require(
        m.expert_ffn_size % etp == 0,
        fmt::format("etp={}: expert FFN width {} is not divisible by etp", etp, m.expert_ffn_size));
  } else {
    require(ep == 1 && etp == 1,
            fmt::format("ep={}, etp={}: a dense model has no experts", ep, etp));
  }
  require(m.num_layers >= pp * vpp,
          fmt::format("pp={}, vpp={}: {} layers cannot fill {} pipeline chunks", pp, vpp,
                      m.num_layers, pp * vpp));
  if (p.pp_first || p.pp_last) {
    require(pp > 1, "pp_first/pp_last need pp > 1");
    require(vpp == 1, "pp_first/pp_last need vpp = 1");
    const auto [layers, stages] = middle(m, p);
    require(layers >= stages && (stages == 0 ? layers == 0 : layers % stages == 0),
            fmt::format("pp={}, pp_first={}, pp_last={}: the other {} layers do not split evenly "
                        "over {} stages",
                        pp, p.pp_first.value_or(0), p.pp_last.value_or(0), layers, stages));
  } else {
    // Megatron splits layers evenly: pp x vpp must divide them unless the end stages are set.
    require(
        m.num_layers % (pp * vpp) == 0,
        fmt::format(
            "pp={}, vpp={}: {} layers do not split evenly over {} chunks (set pp_first/pp_last)",
            pp, vpp, m.num_layers, pp * vpp));
  }
  require(vpp == 1 || pp > 1, fmt::format("vpp={} needs pp > 1", vpp));
  if (p.gbs) {
    const int64_t per_step = *p.mbs * *p.dp;
    require(*p.gbs % per_step == 0,
            fmt::format("gbs={}: not divisible by mbs*dp = {}", *p.gbs, per_step));
    if (vpp > 1) {
      require((*p.gbs / per_step) % pp == 0,
              fmt::format("gbs={}: {} micro-batches are not a multiple of pp={} (interleaved 1F1B)",
                          *p.gbs, *p.gbs / per_step, pp));
    }
  }
}

int64_t layers_in_stage(const ModelSpec& m, const ParallelConfig& p, int64_t stage) {
  const int64_t pp = *p.pp;
  if (stage == 0 && p.pp_first) return *p.pp_first;
  if (stage == pp - 1 && pp > 1 && p.pp_last) return *p.pp_last;
  const auto [layers, stages] = middle(m, p);
  if (stages <= 0) return 0;
  // Index among the evenly split stages; a remainder (only before check()) goes to the first.
  const int64_t k = stage - (p.pp_first ? 1 : 0);
  return layers / stages + (k < layers % stages ? 1 : 0);
}

int64_t first_layer_of_stage(const ModelSpec& m, const ParallelConfig& p, int64_t stage) {
  int64_t first = 0;
  for (int64_t s = 0; s < stage; ++s) first += layers_in_stage(m, p, s);
  return first;
}

}  // namespace moe
