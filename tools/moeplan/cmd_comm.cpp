// moeplan comm: MegaScale-MoE communication volumes, dispatcher choice and compute/comm ratio.
#include <fmt/format.h>

#include "planner/errors.h"
#include "planner/io/loaders.h"
#include "planner/megascale.h"
#include "planner/model_stats.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct CommOptions {
  std::string model, cluster, parallel, curves, dtype = "bf16";
  int64_t seq_len = 4096;
  bool json = false, explain = false;
};

void run_comm(const CommOptions& o) {
  const ModelSpec m = io::load_model(o.model);
  const ClusterSpec c = io::load_cluster(o.cluster);
  const ParallelConfig p = layout_for(o.parallel, m, o.seq_len);
  warn_world_size(p, c);
  const Dtype dtype = parse_dtype(o.dtype, "--dtype");
  const double bpe = dtype_bytes(dtype);
  const int64_t b = *p.mbs, s = o.seq_len, h = m.hidden_size;
  const int64_t n_attn = *p.tp;  // TP, or Ulysses SP over the same GPUs
  const int64_t n_ffn = m.is_moe() ? *p.ep : *p.tp;
  const double m_ratio =
      static_cast<double>(m.attention.num_heads) / static_cast<double>(m.attention.num_kv_heads);
  const int64_t k = std::max<int64_t>(m.top_k, 1);

  const double tp_attn = megascale::tp_attention_volume(b, s, h, n_attn) * bpe;
  const double sp_attn = megascale::sp_attention_volume(b, s, h, n_attn, m_ratio) * bpe;
  const double ep_ffn = megascale::ep_ffn_volume(b, s, h, n_ffn, k) * bpe;
  const double tp_ffn = megascale::tp_ffn_volume(b, s, h, n_ffn) * bpe;
  // Measured efficiencies at this volume choose the dispatcher when a calibration file has
  // them (MegaScale Fig. 7); otherwise the figure's crossover ratio.
  double a2a_over_ag = megascale::kAllToAllOverAllGatherEfficiency;
  std::string ratio_source = "MegaScale Fig. 7";
  if (!o.curves.empty()) {
    const io::Calibration cal = io::load_calibration(o.curves);
    const auto a2a = cal.curves.find("alltoall_intra");
    const auto ag = cal.curves.find("allgather_intra");
    if (a2a == cal.curves.end() || ag == cal.curves.end()) {
      throw InputError(o.curves, "/curves", "needs alltoall_intra and allgather_intra curves");
    }
    a2a_over_ag = a2a->second.at(ep_ffn) / ag->second.at(tp_ffn);
    ratio_source = o.curves;
  }
  const megascale::Dispatcher dispatcher = megascale::choose_dispatcher(k, n_ffn, a2a_over_ag);

  // The EP group crosses nodes when it is wider than a node's GPUs (groups are laid out TP
  // innermost, then EP, as Megatron-Core orders them).
  const bool ep_inter_node = *p.etp * n_ffn > c.node.num_gpus;
  const BytesPerSec intra =
      c.node.fabric == Fabric::kNvSwitch ? c.node.nvlink_bandwidth : c.node.pcie_bandwidth();
  const BytesPerSec ep_bw = ep_inter_node ? c.gpu_network_bandwidth() : intra;
  const int64_t ffn_hidden = m.is_moe() ? m.expert_ffn_size : m.dense_ffn_size;
  megascale::RatioInputs ri{ffn_hidden, ep_bw,
                            c.node.gpu.peak_for(dtype == Dtype::kFp32 ? Dtype::kTf32 : dtype),
                            std::max<int64_t>(n_ffn, 2), bpe};
  const double r = megascale::compute_comm_ratio(ri);
  const double r_approx = megascale::compute_comm_ratio_approx(ri);

  const double f = static_cast<double>(ffn_hidden) / static_cast<double>(h);
  const double units_full = megascale::activation_units_full(n_ffn, k, f, m_ratio);
  const double units_remat = megascale::activation_units_remat(k, f, m_ratio);
  const Bytes act_full = megascale::activation_bytes(units_full, b, s, h, n_ffn, bpe);
  const Bytes act_remat = megascale::activation_bytes(units_remat, b, s, h, n_ffn, bpe);

  const double attn_params = attention_params(m);
  const int64_t d = *p.dp;
  const auto tp_sync = megascale::tp_attention_sync(attn_params, n_attn, d);
  const auto sp_sync = megascale::sp_attention_sync(attn_params, n_attn, d);
  const double intra_over_inter = c.num_nodes > 1 ? intra / c.gpu_network_bandwidth() : 1.0;
  // Eq. (10) compares the inter- and intra-node steps; with n = 1 or d = 1 one of them is absent.
  const bool has_eq10 = n_attn > 1 && d > 1;
  const double eq10 =
      has_eq10 ? megascale::hierarchical_sync_latency_ratio(n_attn, d, intra_over_inter) : 0.0;

  const ModelParams mp = count_params(m);
  const double dense_grads =
      (mp.total() - mp.routed_experts()) / static_cast<double>(*p.tp * *p.pp);
  const Bytes dp_fp32 = megascale::dp_gradient_bytes(dense_grads, d, false);
  const Bytes dp_bf16 = megascale::dp_gradient_bytes(dense_grads, d, true);
  const double act_elements = static_cast<double>(b * s * h);
  const Bytes rs_bf16 = megascale::tp_reduce_scatter_bytes(act_elements, n_attn, false);
  const Bytes rs_fp8 = megascale::tp_reduce_scatter_bytes(act_elements, n_attn, true);

  if (o.json) {
    print_json(
        {{"model", m.name},
         {"parallel", p.to_string()},
         {"per_layer_bytes",
          {{"tp_attention", tp_attn},
           {"sp_attention", sp_attn},
           {"ep_ffn", ep_ffn},
           {"tp_ffn", tp_ffn}}},
         {"sp_over_tp_attention", tp_attn > 0 ? sp_attn / tp_attn : 0.0},
         {"ep_over_tp_ffn", tp_ffn > 0 ? ep_ffn / tp_ffn : 0.0},
         {"dispatcher", megascale::dispatcher_name(dispatcher)},
         {"alltoall_over_allgather_efficiency", a2a_over_ag},
         {"ep_crosses_nodes", ep_inter_node},
         {"r", r},
         {"r_approx", r_approx},
         {"sar_activation",
          {{"units_full", units_full},
           {"units_remat", units_remat},
           {"bytes_full", act_full.value()},
           {"bytes_remat", act_remat.value()}}},
         {"attention_sync",
          {{"tp_inter_node_bytes", tp_sync.inter_node * bpe},
           {"sp_inter_node_bytes", sp_sync.inter_node * bpe},
           {"sp_intra_node_bytes", sp_sync.intra_node * bpe},
           {"eq10_inter_over_intra", has_eq10 ? nlohmann::json(eq10) : nlohmann::json(nullptr)}}},
         {"dp_gradient_bytes",
          {{"fp32_reduce_scatter", dp_fp32.value()}, {"bf16_alltoall", dp_bf16.value()}}},
         {"tp_reduce_scatter_bytes", {{"bf16", rs_bf16.value()}, {"fp8", rs_fp8.value()}}}});
    return;
  }
  fmt::print("{} on {}, layout {}, seq {}, {} (bytes per GPU per layer, forward)\n\n", m.name,
             c.name, p.to_string(), s, dtype_name(dtype));
  Table t({"operation", "volume", "equation"});
  t.add({fmt::format("attention, TP n={}", n_attn), as_gb(tp_attn), "MegaScale eq. (1)"});
  t.add({fmt::format("attention, SP n={} m={:.0f}", n_attn, m_ratio), as_gb(sp_attn),
         fmt::format("eq. (2), {:.4f} of TP", tp_attn > 0 ? sp_attn / tp_attn : 0.0)});
  t.add({fmt::format("FFN, EP n={} k={}", n_ffn, k), as_gb(ep_ffn),
         fmt::format("eq. (3), {:.4f} of TP", tp_ffn > 0 ? ep_ffn / tp_ffn : 0.0)});
  t.add({fmt::format("FFN, TP n={}", n_ffn), as_gb(tp_ffn), "eq. (4)"});
  fmt::print("{}\n", t.render());
  fmt::print("dispatcher: {} (all-to-all while k/n <= eff_a2a/eff_ag = {:.2f}, from {})\n",
             megascale::dispatcher_name(dispatcher), a2a_over_ag, ratio_source);
  fmt::print(
      "R = comp/comm for the expert FFN over {} ({}): {:.2f} (eq. 8), {:.2f} without n/(n-1) (eq. "
      "9)\n",
      ep_inter_node ? "the NICs" : "the intra-node fabric", as_gbps(ep_bw.value()), r, r_approx);
  fmt::print(
      "activation per MoE layer (App. A.2): {:.2f} bsh/n = {} stored, {:.2f} bsh/n = {} with "
      "selective rematerialization\n",
      units_full, as_gb(act_full.value()), units_remat, as_gb(act_remat.value()));
  fmt::print(
      "attention weight sync per layer (App. A.1): TP {} inter-node; SP {} inter-node + {} "
      "intra-node; eq. (10) ratio {}\n",
      as_gb(tp_sync.inter_node * bpe), as_gb(sp_sync.inter_node * bpe),
      as_gb(sp_sync.intra_node * bpe),
      has_eq10 ? fmt::format("{:.2f}", eq10) : std::string("n/a (needs n > 1 and d > 1)"));
  fmt::print("DP gradient sync per GPU: {} FP32 reduce-scatter, {} with BF16 compression\n",
             as_gb(dp_fp32.value()), as_gb(dp_bf16.value()));
  fmt::print("TP reduce-scatter per layer: {} BF16, {} as FP8 all-to-all\n", as_gb(rs_bf16.value()),
             as_gb(rs_fp8.value()));
  if (o.explain) {
    fmt::print(
        "\nInputs: b={} s={} h={} n_attn={} n_ffn={} k={} m={} h_ffn={} d={} bytes/element={}\n", b,
        s, h, n_attn, n_ffn, k, m_ratio, ffn_hidden, d, bpe);
    fmt::print("R, eq. (8): 3/2 h_ffn bandwidth/peak n/(n-1) with peak {:.0f} TFLOP/s\n",
               ri.peak.value() / 1e12);
  }
}

}  // namespace

void add_comm(CommandLine& cli) {
  auto o = std::make_shared<CommOptions>();
  Subcommand cmd = cli.subcommand(
      "comm", "MegaScale-MoE volumes (TP/SP attention, TP/EP FFN), dispatcher, R, SAR");
  cmd.option("--model", o->model, "model file").required();
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--parallel", o->parallel, "layout, e.g. tp=8,ep=8,dp=4");
  cmd.option("--seq-len", o->seq_len, "sequence length").positive();
  cmd.option("--dtype", o->dtype, "communication precision: bf16, fp16, fp32, fp8");
  cmd.option("--curves", o->curves,
             "calibration file with alltoall_intra and allgather_intra curves");
  cmd.flag("--json", o->json, "print one JSON document (bytes)");
  cmd.flag("--explain", o->explain, "show the inputs behind the numbers");
  cmd.on_run([o] { run_comm(*o); });
}

}  // namespace moe::cli
