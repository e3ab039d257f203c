#include "planner/parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <regex>
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
  if (!layout.empty()) {
    if (!out.empty()) out += ',';
    out += "layout=" + format_pipeline_layout(layout);
  }
  return out;
}

PipelineLayout parse_pipeline_layout(const std::string& text, const std::string& source,
                                     const std::string& where) {
  auto fail = [&](const std::string& problem) {
    return InputError(source, where, fmt::format("'{}': {}", text, problem));
  };
  // Megatron's two unrolling passes, in its order: "(ab|)*2" first, then "x*3".
  std::string s;
  for (char ch : text)
    if (ch != ',') s += ch;
  for (const std::regex& pattern :
       {std::regex(R"(\(([^)]+)\)\*(\d+))"), std::regex(R"((.)\*(\d+))")}) {
    std::string unrolled;
    auto last = s.cbegin();
    for (std::sregex_iterator it(s.begin(), s.end(), pattern), end; it != end; ++it) {
      unrolled.append(last, (*it)[0].first);
      const std::string n = (*it)[2].str();
      if (n.size() > 4) throw fail(fmt::format("repeat count {} is too large", n));
      for (int i = std::stoi(n); i > 0; --i) unrolled += (*it)[1].str();
      last = (*it)[0].second;
    }
    unrolled.append(last, s.cend());
    s = std::move(unrolled);
  }
  std::vector<std::string> stages(1);
  for (char ch : s) {
    if (ch == '|') {
      stages.emplace_back();
    } else if (ch == 'E' || ch == 't' || ch == 'm' || ch == 'L') {
      stages.back() += ch;
    } else {
      throw fail(
          fmt::format("'{}' is not a layer (E embedding, t decoder, m MTP, L loss, | stage)", ch));
    }
  }
  if (stages.front().empty() || stages.front().front() != 'E')
    throw fail("the first virtual stage must start with E (the embedding)");
  if (stages.back().empty() || stages.back().back() != 'L')
    throw fail("the last virtual stage must end with L (the loss)");
  PipelineLayout out;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string& st = stages[i];
    size_t pos = i == 0 ? 1 : 0;  // past the embedding
    int64_t decoders = 0;
    while (pos < st.size() && st[pos] == 't') ++decoders, ++pos;
    if (decoders > 0 && out.mtp_stage >= 0)
      throw fail("decoder layers (t) must come before the MTP modules (m)");
    if (pos < st.size() && st[pos] == 'm') {
      if (out.mtp_stage >= 0) throw fail("the MTP modules (m) must share one virtual stage");
      out.mtp_stage = static_cast<int64_t>(i);
      while (pos < st.size() && st[pos] == 'm') ++out.mtp, ++pos;
    }
    if (i + 1 == stages.size() && pos + 1 == st.size()) ++pos;  // the loss
    if (pos != st.size())
      throw fail(fmt::format(
          "virtual stage {} is '{}': a stage is E (first only), decoder layers (t), MTP modules "
          "(m) and L (last only), in that order",
          i, st));
    out.decoder_layers.push_back(decoders);
  }
  return out;
}

std::string format_pipeline_layout(const PipelineLayout& layout) {
  auto run = [](char ch, int64_t n) {
    return n <= 0 ? std::string() : n == 1 ? std::string(1, ch) : fmt::format("{}*{}", ch, n);
  };
  const size_t n = layout.decoder_layers.size();
  std::vector<std::string> stages;
  for (size_t i = 0; i < n; ++i) {
    std::string st = (i == 0 ? "E" : "") + run('t', layout.decoder_layers[i]);
    if (static_cast<int64_t>(i) == layout.mtp_stage) st += run('m', layout.mtp);
    if (i + 1 == n) st += "L";
    stages.push_back(st);
  }
  // Equal neighbours fold into "(S|)*r"; the last stage, with the loss, never folds.
  std::string out;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && stages[j] == stages[i]) ++j;
    if (j - i > 1)
      out += fmt::format("({}|)*{}", stages[i], j - i);
    else
      out += stages[i] + (j == n ? "" : "|");
    i = j;
  }
  return out;
}

bool has_end_light_shape(const PipelineLayout& layout) {
  const std::vector<int64_t>& n = layout.decoder_layers;
  if (n.size() < 3) return true;
  const int64_t k = n[1];
  for (size_t i = 1; i + 1 < n.size(); ++i)
    if (n[i] != k) return false;
  return n.front() <= k && n.back() <= k;
}

int64_t mtp_stage(const ParallelConfig& p) {
  if (p.layout.mtp_stage >= 0) return p.layout.mtp_stage % *p.pp;
  return *p.pp - 1;
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
    std::string value = item.substr(eq + 1);
    if (key == "layout") {
      // Megatron's cosmetic commas: the items up to the next key=value belong to the layout.
      while (pos < text.size()) {
        const size_t next = text.find(',', pos);
        const std::string more =
            text.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
        if (more.find('=') != std::string::npos) break;
        value += ',' + more;
        pos = next == std::string::npos ? text.size() + 1 : next + 1;
      }
      if (!p.layout.empty()) throw InputError(option, key, "given twice");
      p.layout = parse_pipeline_layout(value, option);
      continue;
    }
    const Field* field = nullptr;
    for (const Field& f : kFields) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) {
      throw InputError(option, key,
                       "unknown size (known: tp pp ep etp edp dp cp vpp mbs gbs pp_first pp_last "
                       "layout)");
    }
    int64_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec == std::errc::result_out_of_range)
      throw InputError(option, key, fmt::format("'{}' is too large", value));
    if (ec != std::errc() || end != value.data() + value.size()) {
      throw InputError(option, key, fmt::format("'{}' is not an integer", value));
    }
    if (n <= 0) throw InputError(option, key, fmt::format("must be positive, got {}", n));
    if (p.*(field->member)) throw InputError(option, key, "given twice");
    p.*(field->member) = n;
  }
  try {
    apply_layout(p);
  } catch (const ConfigError& e) {
    throw InputError(option, "layout", e.what());
  }
  return p;
}

void apply_layout(ParallelConfig& p) {
  if (p.layout.empty()) return;
  const auto stages = static_cast<int64_t>(p.layout.decoder_layers.size());
  if (!p.pp)
    throw ConfigError(
        fmt::format("a layout of {} virtual stages needs pp as well (they are pp x vpp)", stages));
  if (stages % *p.pp != 0)
    throw ConfigError(fmt::format("{} virtual stages are not a multiple of pp={}", stages, *p.pp));
  if (p.vpp && *p.vpp != stages / *p.pp)
    throw ConfigError(fmt::format("{} virtual stages over pp={} make vpp={}, not vpp={}", stages,
                                  *p.pp, stages / *p.pp, *p.vpp));
  if (p.pp_first || p.pp_last)
    throw ConfigError("pp_first/pp_last and a layout both split the layers: give one");
  p.vpp = stages / *p.pp;
  // Megatron runs the MTP modules at the end of a stage's last model chunk.
  if (p.layout.mtp_stage >= 0 && p.layout.mtp_stage / *p.pp != *p.vpp - 1)
    throw ConfigError(fmt::format(
        "the MTP modules sit in virtual stage {}, chunk {} of stage {}; Megatron runs them in a "
        "stage's last chunk ({})",
        p.layout.mtp_stage, p.layout.mtp_stage / *p.pp, p.layout.mtp_stage % *p.pp, *p.vpp - 1));
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

void check_sequence(const ParallelConfig& p, int64_t seq_len) {
  const int64_t tp = p.tp.value_or(1), cp = p.cp.value_or(1);
  require(cp == 1 || seq_len % (2 * cp) == 0,
          fmt::format("cp={}: sequence length {} is not divisible by 2 x cp = {} (Megatron cuts "
                      "it into 2 x cp chunks to balance causal attention)",
                      cp, seq_len, 2 * cp));
  require(tp == 1 || (seq_len / cp) % tp == 0,
          fmt::format("tp={}: the {} tokens of a sequence on each CP rank are not divisible by tp "
                      "(sequence parallelism splits them over TP)",
                      tp, seq_len / cp));
}

std::optional<std::string> fixed_sizes_problem(const ParallelConfig& fixed, const ModelSpec& m,
                                               int64_t world, int64_t seq_len, int64_t gbs) {
  // Each side of Megatron-Core's folding spans the stage's GPUs times pp.
  using Sizes = std::initializer_list<std::pair<const char*, std::optional<int64_t>>>;
  for (const Sizes sizes :
       {Sizes{{"tp", fixed.tp}, {"cp", fixed.cp}, {"dp", fixed.dp}, {"pp", fixed.pp}},
        Sizes{{"etp", fixed.etp}, {"ep", fixed.ep}, {"edp", fixed.edp}, {"pp", fixed.pp}}}) {
    int64_t product = 1, count = 0;
    std::string names;
    for (const auto& [key, size] : sizes) {
      if (!size) continue;
      product *= *size;
      names += fmt::format("{}{}={}", count++ ? " x " : "", key, *size);
    }
    if (count > 0 && world % product != 0) {
      return count > 1 ? fmt::format("{} = {} GPUs does not divide {}", names, product, world)
                       : fmt::format("{} does not divide {} GPUs", names, world);
    }
  }
  // One at a time against the model and the sequence, the searched sizes at 1 (dp as large as
  // the fixed experts need, so the folding holds); vpp and the end stages only with pp fixed.
  ParallelConfig q = fixed;
  q.gbs.reset();
  q.edp.reset();
  if (!q.pp) {
    q.vpp.reset();
    q.pp_first.reset();
    q.pp_last.reset();
  }
  q.dp = q.ep.value_or(1) * q.etp.value_or(1);
  try {
    check(resolve(q), m);
    check_sequence(q, seq_len);
  } catch (const ConfigError& e) {
    return e.what();
  }
  const int64_t mbs = fixed.mbs.value_or(1), dp = fixed.dp.value_or(1);
  if (gbs % (mbs * dp) != 0) {
    return fmt::format("{}global batch {} is not divisible by {}",
                       fixed.mbs && fixed.dp ? fmt::format("mbs={} x dp={}: ", mbs, dp)
                       : fixed.mbs           ? fmt::format("mbs={}: ", mbs)
                                             : fmt::format("dp={}: ", dp),
                       gbs, mbs * dp);
  }
  return std::nullopt;
}

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
  if (!p.layout.empty()) {
    int64_t layers = 0;
    for (int64_t n : p.layout.decoder_layers) layers += n;
    require(static_cast<int64_t>(p.layout.decoder_layers.size()) == pp * vpp,
            fmt::format("layout: {} virtual stages, but pp={} x vpp={} chunks",
                        p.layout.decoder_layers.size(), pp, vpp));
    require(
        layers == m.num_layers,
        fmt::format("layout: {} decoder layers (t), but the model has {}", layers, m.num_layers));
    require(p.layout.mtp == m.mtp_layers,
            fmt::format("layout: {} MTP modules (m), but the model trains {} (--mtp-num-layers)",
                        p.layout.mtp, m.mtp_layers));
    // Any split Megatron accepts, empty chunks included.
  } else {
    require(m.num_layers >= pp * vpp,
            fmt::format("pp={}, vpp={}: {} layers cannot fill {} pipeline chunks", pp, vpp,
                        m.num_layers, pp * vpp));
    if (p.pp_first || p.pp_last) {
      require(pp > 1, "pp_first/pp_last need pp > 1");
      require(vpp == 1, "pp_first/pp_last need vpp = 1");
      const auto [layers, stages] = middle(m, p);
      require(layers >= stages && (stages == 0 ? layers == 0 : layers % stages == 0),
              fmt::format("pp={}, pp_first={}, pp_last={}: the other {} layers do not split "
                          "evenly over {} stages",
                          pp, p.pp_first.value_or(0), p.pp_last.value_or(0), layers, stages));
    } else {
      // Megatron splits layers evenly: pp x vpp must divide them unless the end stages are set.
      require(m.num_layers % (pp * vpp) == 0,
              fmt::format("pp={}, vpp={}: {} layers do not split evenly over {} chunks (set "
                          "pp_first/pp_last, or a layout)",
                          pp, vpp, m.num_layers, pp * vpp));
    }
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

namespace {
// Layers of stage `stage` without a layout: consecutive, pp_first / pp_last or an even share.
int64_t consecutive_layers(const ModelSpec& m, const ParallelConfig& p, int64_t stage) {
  const int64_t pp = *p.pp;
  if (stage == 0 && p.pp_first) return *p.pp_first;
  if (stage == pp - 1 && pp > 1 && p.pp_last) return *p.pp_last;
  const auto [layers, stages] = middle(m, p);
  if (stages <= 0) return 0;
  // Index among the evenly split stages; a remainder (only before check()) goes to the first.
  const int64_t k = stage - (p.pp_first ? 1 : 0);
  return layers / stages + (k < layers % stages ? 1 : 0);
}

// The sum of consecutive_layers over the stages before `stage`, in closed form (the search
// asks for every chunk of every stage of every candidate).
int64_t layers_before(const ModelSpec& m, const ParallelConfig& p, int64_t stage) {
  if (stage <= 0) return 0;
  const auto [layers, stages] = middle(m, p);
  // The middle stages before `stage` (all of them before a pp_last stage).
  const int64_t j =
      std::clamp<int64_t>(stage - (p.pp_first ? 1 : 0), 0, std::max<int64_t>(stages, 0));
  const int64_t even = stages > 0 ? j * (layers / stages) + std::min(j, layers % stages) : 0;
  return (p.pp_first ? *p.pp_first : 0) + even;
}

}  // namespace

LayerRange chunk_layers(const ModelSpec& m, const ParallelConfig& p, int64_t stage, int64_t chunk) {
  const int64_t pp = *p.pp;
  if (!p.layout.empty()) {
    const int64_t index = chunk * pp + stage;
    int64_t begin = 0;
    for (int64_t i = 0; i < index; ++i) begin += p.layout.decoder_layers[static_cast<size_t>(i)];
    return {begin, begin + p.layout.decoder_layers[static_cast<size_t>(index)]};
  }
  const int64_t first = layers_before(m, p, stage);
  const int64_t n = consecutive_layers(m, p, stage), v = p.vpp.value_or(1);
  return {first + n * chunk / v, first + n * (chunk + 1) / v};
}

int64_t layers_in_stage(const ModelSpec& m, const ParallelConfig& p, int64_t stage) {
  if (p.layout.empty()) return consecutive_layers(m, p, stage);
  int64_t n = 0;
  for (int64_t k = 0; k < p.vpp.value_or(1); ++k) n += chunk_layers(m, p, stage, k).size();
  return n;
}

std::string stage_layer_label(const ModelSpec& m, const ParallelConfig& p, int64_t stage) {
  std::vector<std::string> runs;
  LayerRange open{-1, -1};
  auto close = [&] {
    if (open.size() > 0)
      runs.push_back(open.size() == 1 ? fmt::format("{}", open.begin)
                                      : fmt::format("{}-{}", open.begin, open.end - 1));
  };
  for (int64_t k = 0; k < p.vpp.value_or(1); ++k) {
    const LayerRange r = chunk_layers(m, p, stage, k);
    if (r.size() == 0) continue;
    if (r.begin == open.end) {
      open.end = r.end;
    } else {
      close();
      open = r;
    }
  }
  close();
  return runs.empty() ? "-" : fmt::format("{}", fmt::join(runs, ", "));
}

}  // namespace moe
