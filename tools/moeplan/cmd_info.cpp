// moeplan info: parameter counts and FLOPs per token of a model file.
#include <fmt/format.h>

#include "planner/io/loaders.h"
#include "planner/model_stats.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct InfoOptions {
  std::string model;
  int64_t seq_len = 4096;
  bool json = false;
};

nlohmann::json layer_json(const LayerParams& l) {
  return {{"attention", l.attention},
          {"norms", l.norms},
          {"router", l.router},
          {"shared_experts", l.shared_experts},
          {"routed_experts", l.routed_experts},
          {"dense_ffn", l.dense_ffn},
          {"total", l.total()}};
}

void run_info(const InfoOptions& o) {
  const ModelSpec m = io::load_model(o.model);
  const ModelParams p = count_params(m);
  const TokenFlops f = flops_per_token(m, o.seq_len);
  double router = 0, shared = 0, dense = 0, norms = 0;
  for (const LayerParams& l : p.layers) {
    router += l.router;
    shared += l.shared_experts;
    dense += l.dense_ffn;
    norms += l.norms;
  }
  if (o.json) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerParams& l : p.layers) layers.push_back(layer_json(l));
    print_json({{"model", m.name},
                {"total_params", p.total()},
                {"active_params", p.active(m)},
                {"mtp_params", p.mtp},
                {"breakdown",
                 {{"embedding", p.embedding},
                  {"output_head", p.output_head},
                  {"attention", p.attention()},
                  {"router", router},
                  {"shared_experts", shared},
                  {"routed_experts", p.routed_experts()},
                  {"dense_ffn", dense},
                  {"norms", norms + p.final_norm}}},
                {"layers", layers},
                {"sliding_window", m.attention.sliding_window},
                {"windowed_layers", m.num_windowed_layers()},
                {"chunked_window", m.attention.chunked_window},
                {"sparse_attention_topk", m.attention.sparse_topk},
                {"linear_attention_layers", m.num_linear_layers()},
                {"indexer_params", indexer_params(m) * static_cast<double>(m.num_layers)},
                {"seq_len", o.seq_len},
                {"flops_per_token",
                 {{"forward", f.forward().value()},
                  {"forward_matmul", f.forward_matmul.value()},
                  {"forward_attention", f.forward_attention.value()},
                  {"forward_indexer", f.forward_indexer.value()},
                  {"forward_linear", f.forward_linear.value()},
                  {"training", f.training().value()}}}});
    return;
  }
  // Shared experts: DeepSeek's count of expert-sized FFNs, or Qwen's one shared FFN of its width.
  const std::string shared_part = m.shared_expert_ffn_size > 0
                                      ? fmt::format("a shared FFN of {}", m.shared_expert_ffn_size)
                                      : fmt::format("{} shared", m.num_shared_experts);
  if (m.is_moe()) {
    fmt::print("{}: {} layers ({} MoE, {} dense), hidden {}, {} routed experts top-{}, {}\n",
               m.name, m.num_layers, m.num_moe_layers(), m.num_dense_layers(), m.hidden_size,
               m.num_routed_experts, m.top_k, shared_part);
  } else {
    fmt::print("{}: {} dense layers, hidden {}, FFN {}\n", m.name, m.num_layers, m.hidden_size,
               m.dense_ffn_size);
  }
  if (m.router_groups > 1) {
    fmt::print("routing groups     {} of {} experts, each token's top-{} from its best {}\n",
               m.router_groups, m.num_routed_experts / m.router_groups, m.top_k,
               m.router_group_topk);
  }
  if (m.attention.sliding_window > 0) {
    fmt::print("{} {} keys on {} of {} layers\n",
               m.attention.chunked_window ? "chunked attention " : "sliding window    ",
               m.attention.sliding_window, m.num_windowed_layers(), m.num_layers);
  }
  if (!m.linear_layer.empty()) {
    const LinearAttentionSpec& l = m.linear_attention;
    fmt::print(
        "linear attention   {} on {} of {} layers: {} key heads x {}, {} value heads x {}, "
        "conv {}{}{}\n",
        l.name(), m.num_linear_layers(), m.num_layers, l.key_heads, l.key_head_dim, l.value_heads,
        l.value_head_dim, l.conv_kernel,
        l.kind == LinearAttentionKind::kKimiDelta
            ? fmt::format(", gates of rank {}{}", l.gate_rank,
                          l.full_rank_output_gate ? " (output gate full rank)" : "")
            : "",
        m.attention.output_gate ? "; gated softmax attention on the rest" : "");
  }
  if (m.attention.sparse()) {
    fmt::print(
        "sparse attention   top-{} keys a query, indexer {} heads x {} ({:.2f} M weights a "
        "layer)\n",
        m.attention.sparse_topk, m.attention.indexer_heads, m.attention.indexer_head_dim,
        indexer_params(m) / 1e6);
  }
  fmt::print("total parameters   {}\nactive per token   {}\n", as_billions(p.total()),
             as_billions(p.active(m)));
  if (p.mtp > 0) fmt::print("MTP modules        {} (not in the total)\n", as_billions(p.mtp));
  fmt::print("\n");
  Table t({"part", "parameters", "share"});
  auto row = [&](const char* name, double v) {
    if (v > 0) t.add({name, as_billions(v), fmt::format("{:.1f} %", 100.0 * v / p.total())});
  };
  row("embedding", p.embedding);
  row("output head", p.output_head);
  row("attention", p.attention());
  row("router", router);
  row("shared experts", shared);
  row("routed experts", p.routed_experts());
  row("dense FFN", dense);
  row("norms", norms + p.final_norm);
  fmt::print("{}\n", t.render());
  fmt::print(
      "FLOPs per token at seq {}: forward {:.3f} GFLOP ({:.3f} matmul + {:.3f} attention), "
      "training {:.3f} GFLOP\n",
      o.seq_len, f.forward().value() / 1e9, f.forward_matmul.value() / 1e9,
      f.forward_attention.value() / 1e9, f.training().value() / 1e9);
  if (m.attention.sparse()) {
    fmt::print("the attention term holds the indexer's {:.3f} GFLOP\n",
               f.forward_indexer.value() / 1e9);
  }
  if (!m.linear_layer.empty()) {
    fmt::print("the attention term holds the linear layers' {:.3f} GFLOP\n",
               f.forward_linear.value() / 1e9);
  }
}

}  // namespace

void add_info(CommandLine& cli) {
  auto o = std::make_shared<InfoOptions>();
  Subcommand cmd =
      cli.subcommand("info", "Parameter counts (total, active, per part) and FLOPs per token");
  cmd.option("--model", o->model, "model file (moeplan JSON or HuggingFace config.json)")
      .required();
  cmd.option("--seq-len", o->seq_len, "sequence length for attention FLOPs").positive();
  cmd.flag("--json", o->json, "print one JSON document (SI units, plain counts)");
  cmd.on_run([o] { run_info(*o); });
}

void print_json(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(2));
}

}  // namespace moe::cli
