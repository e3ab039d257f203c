// moeplan a2a: MoNTA's AllToAll strategies (baseline, O1, O2, O3) for one volume and layout.
#include <fmt/format.h>

#include <cmath>

#include "planner/default_efficiency.h"
#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/monta.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct A2aOptions {
  std::string cluster, bytes, curves;
  int64_t tp = 8, ep = 2;
  std::optional<int64_t> chunks;
  double min_chunk_mib = 1.0;
  std::optional<double> chunk_overhead_us;  // else the --curves file's constant, else 0
  bool json = false, explain = false;
  // --execute: run the four strategies over the ranks a launcher started (tp x ep of them).
  bool execute = false;
  std::string nccl_id_file;
  int repeats = 20;
};

Bytes parse_volume(const std::string& text) {
  size_t used = 0;
  double plain = 0;
  try {
    plain = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError("--bytes", "",
                     fmt::format("'{}' is not a size (bytes, or with a unit: 256 MiB)", text));
  }
  if (used == text.size()) {
    if (!(plain > 0) || !std::isfinite(plain))
      throw InputError("--bytes", "", fmt::format("'{}' must be positive", text));
    return Bytes(plain);
  }
  try {
    return io::parse_bytes(text);  // its messages quote the text
  } catch (const std::exception& e) {
    throw InputError("--bytes", "", e.what());
  }
}

// The curve named in the calibration file, or the documented default.
EfficiencyCurve curve_or(const io::Calibration* cal, const char* name, EfficiencyCurve fallback) {
  if (cal != nullptr) {
    auto it = cal->curves.find(name);
    if (it != cal->curves.end()) return it->second;
  }
  return fallback;
}

nlohmann::json chunk_json(const monta::ChunkChoice& c) {
  return {{"chunks", c.chunks},
          {"time_s", c.time.value()},
          {"per_chunk",
           {{"alltoall_s", c.per_chunk.alltoall.value()},
            {"allgather_s", c.per_chunk.allgather.value()},
            {"d2d_s", c.per_chunk.d2d.value()},
            {"alltoall_bytes", c.per_chunk.alltoall_bytes.value()},
            {"allgather_bytes", c.per_chunk.allgather_bytes.value()},
            {"r1", c.per_chunk.r1},
            {"r2", c.per_chunk.r2},
            {"r3", c.per_chunk.r3}}}};
}

void run_a2a(const A2aOptions& o) {
  const ClusterSpec c = io::load_cluster(o.cluster);
  std::optional<io::Calibration> cal;
  if (!o.curves.empty()) cal = io::load_calibration(o.curves);
  const io::Calibration* calp = cal ? &*cal : nullptr;

  monta::Problem p;
  p.volume = parse_volume(o.bytes);
  p.tp = o.tp;
  p.ep = o.ep;
  p.min_chunk = mebibytes(o.min_chunk_mib);
  double overhead_us = 0.0;
  if (o.chunk_overhead_us) {
    overhead_us = *o.chunk_overhead_us;
  } else if (cal && cal->constants.count("pipeline_chunk_overhead_us")) {
    overhead_us = cal->constants.at("pipeline_chunk_overhead_us");
  }
  p.chunk_overhead = Seconds(overhead_us * 1e-6);
  p.curves.alltoall = curve_or(calp, "alltoall_inter", defaults::alltoall_inter_node());
  p.curves.allgather = curve_or(calp, "allgather_intra", defaults::allgather_intra_node());
  p.curves.d2d = curve_or(calp, "d2d_copy", defaults::d2d_copy());
  // B1: what one GPU gets through its NIC (or NVLink on a single node); B2: the intra-node
  // fabric; B3: HBM. A curve that names its reference bandwidth overrides the cluster's.
  const NodeSpec& n = c.node;
  const BytesPerSec intra = n.fabric == Fabric::kNvSwitch ? n.nvlink_bandwidth : n.pcie_bandwidth();
  p.links.inter_alltoall =
      p.curves.alltoall.reference_or(c.num_nodes > 1 ? c.gpu_network_bandwidth() : intra);
  p.links.intra_allgather = p.curves.allgather.reference_or(intra);
  p.links.d2d_copy = p.curves.d2d.reference_or(n.gpu.hbm_bandwidth);

  const Seconds base = monta::baseline_time(p);
  const Seconds o1 = monta::o1_time(p);
  const monta::ChunkChoice o2 = monta::best_chunking(p, monta::Pipelining::kO2);
  const monta::ChunkChoice o3 = monta::best_chunking(p, monta::Pipelining::kO3);
  const monta::Strategy choice = monta::select_strategy(o1, o2.time, o3.time);
  std::optional<monta::ChunkChoice> o2n, o3n;
  if (o.chunks) {
    o2n = monta::at_chunks(p, monta::Pipelining::kO2, *o.chunks);
    o3n = monta::at_chunks(p, monta::Pipelining::kO3, *o.chunks);
  }
  std::optional<std::vector<MontaExecution>> executed;
  if (o.execute) {
    executed =
        execute_monta(p, o2n ? *o2n : o2, o3n ? *o3n : o3, o.nccl_id_file, o.repeats, "--ep");
    if (!executed) return;  // ranks other than 0 print nothing
  }
  const double r1 = p.curves.alltoall.at(p.volume), r2 = p.curves.allgather.at(p.volume);
  const double bw_ratio = p.links.intra_allgather / p.links.inter_alltoall;
  const double o3_limit = monta::o3_limit_ratio(p.tp, p.ep, bw_ratio, r1, r2);

  if (o.json) {
    nlohmann::json j = {{"volume_bytes", p.volume.value()},
                        {"tp", p.tp},
                        {"ep", p.ep},
                        {"bandwidth_Bps",
                         {{"b1_alltoall", p.links.inter_alltoall.value()},
                          {"b2_allgather", p.links.intra_allgather.value()},
                          {"b3_d2d", p.links.d2d_copy.value()}}},
                        {"baseline_s", base.value()},
                        {"o1_s", o1.value()},
                        {"o2", chunk_json(o2)},
                        {"o3", chunk_json(o3)},
                        {"choice", monta::strategy_name(choice)},
                        {"o3_limit_ratio", o3_limit}};
    if (o2n) j["at_chunks"] = {{"o2", chunk_json(*o2n)}, {"o3", chunk_json(*o3n)}};
    if (executed) j["executed"] = monta_execution_json(*executed);
    print_json(j);
    return;
  }
  fmt::print("AllToAll of {:.1f} MiB, tp={} ep={} on {}\n", p.volume.value() / kMebi, p.tp, p.ep,
             c.name);
  fmt::print("B1 (inter-node all-to-all) {}, B2 (intra-node all-gather) {}, B3 (D2D) {}\n\n",
             as_gbps(p.links.inter_alltoall.value()), as_gbps(p.links.intra_allgather.value()),
             as_gbps(p.links.d2d_copy.value()));
  Table t({"strategy", "chunks", "time", "vs baseline", "per chunk AA / AG / D2D"});
  auto ratio = [&](Seconds s) { return fmt::format("{:.3f}", s / base); };
  auto per_chunk = [](const monta::ChunkChoice& x) {
    return fmt::format("{} / {} / {}", as_ms(x.per_chunk.alltoall.value()),
                       as_ms(x.per_chunk.allgather.value()), as_ms(x.per_chunk.d2d.value()));
  };
  t.add({"baseline", "1", as_ms(base.value()), "1.000", ""});
  t.add({"O1", "1", as_ms(o1.value()), ratio(o1), ""});
  t.add({"O2 (best N)", std::to_string(o2.chunks), as_ms(o2.time.value()), ratio(o2.time),
         per_chunk(o2)});
  t.add({"O3 (best N)", std::to_string(o3.chunks), as_ms(o3.time.value()), ratio(o3.time),
         per_chunk(o3)});
  if (o2n) {
    t.add({"O2", std::to_string(*o.chunks), as_ms(o2n->time.value()), ratio(o2n->time),
           per_chunk(*o2n)});
    t.add({"O3", std::to_string(*o.chunks), as_ms(o3n->time.value()), ratio(o3n->time),
           per_chunk(*o3n)});
  }
  fmt::print("{}\n", t.render());
  fmt::print("choice (Algorithm 3): {}\n", monta::strategy_name(choice));
  fmt::print("O3 limit as N grows, eq. (13) form: T_O3/T_base -> {:.3f}\n", o3_limit);
  if (executed) print_monta_execution(*executed, choice);
  if (o.explain) {
    fmt::print("\nHow these numbers arise (MoNTA, 003_4e1468090f85ebf1):\n");
    fmt::print("  baseline: I (e-1)/e / (B1 r1(I)), r1({:.1f} MiB) = {:.3f}\n",
               p.volume.value() / kMebi, r1);
    fmt::print(
        "  O1, eq. (11): I/t (e-1)/e / (B1 r1(I/t)) + I (t-1)/t / (B2 r2(I)); r1 = {:.3f}, r2 = "
        "{:.3f}\n",
        p.curves.alltoall.at(p.volume / static_cast<double>(p.tp)), r2);
    fmt::print(
        "  per chunk, eq. (8)-(10): AA_j = I/(Nt) (e-1)/e / (B1 r1), AG_j = I/N (t-1)/t / (B2 r2), "
        "D2D_j = I/N / (B3 r3)\n");
    fmt::print(
        "  O2 (Alg. 1): AA_j < AG_j + D2D_j ? AA_j + (AG_j + D2D_j) N : AA_j N + AG_j + D2D_j\n");
    fmt::print("  O3 (Alg. 2): AA_j < AG_j ? AA_j + AG_j N + D2D_j : AA_j N + AG_j + D2D_j\n");
    fmt::print(
        "  N searched from 1 while chunks stay >= {:.1f} MiB (I_minimal), best (N, T) kept\n",
        o.min_chunk_mib);
    fmt::print("  curves: {}\n",
               o.curves.empty() ? "built-in defaults (planner/default_efficiency.h)" : o.curves);
    fmt::print("  each O2/O3 chunk also pays {:.0f} us ({})\n", p.chunk_overhead.value() * 1e6,
               o.chunk_overhead_us            ? "--chunk-overhead-us"
               : p.chunk_overhead.value() > 0 ? "the --curves file's pipeline_chunk_overhead_us"
                                              : "none: MoNTA's theoretical model");
  }
}

}  // namespace

void add_a2a(CommandLine& cli) {
  auto o = std::make_shared<A2aOptions>();
  Subcommand cmd = cli.subcommand(
      "a2a", "MoNTA AllToAll strategies: baseline, O1, O2, O3 with the best chunk count");
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.option("--bytes", o->bytes,
             "AllToAll volume I = b s h BPE: bytes, or with a unit (\"256 MiB\")")
      .required();
  cmd.option("--tp", o->tp, "tensor-parallel size t").positive();
  cmd.option("--ep", o->ep, "expert-parallel size e").positive();
  cmd.option("--curves", o->curves,
             "calibration file with alltoall_inter, allgather_intra, d2d_copy curves");
  cmd.option("--chunks", o->chunks, "also evaluate O2/O3 at this chunk count").positive();
  cmd.option("--min-chunk", o->min_chunk_mib, "I_minimal in MiB: smallest chunk the search tries")
      .positive();
  cmd.option("--chunk-overhead-us", o->chunk_overhead_us,
             "fixed cost per pipelined chunk in us (default: the --curves file's "
             "pipeline_chunk_overhead_us, else 0, MoNTA's theoretical model; plan uses 150)")
      .non_negative();
  cmd.flag("--json", o->json, "print one JSON document (seconds, bytes)");
  cmd.flag("--explain", o->explain, "show the equations and inputs behind the numbers");
  cmd.flag("--execute", o->execute,
           "run baseline, O1, O2 and O3 on NCCL over the tp x ep ranks a launcher started "
           "(mpirun, srun, torchrun or MOEPLAN_RANK/MOEPLAN_WORLD_SIZE), one GPU each");
  cmd.option("--nccl-id-file", o->nccl_id_file,
             "with --execute over several ranks: where rank 0 leaves NCCL's unique id");
  cmd.option("--repeats", o->repeats, "with --execute: timed runs, median kept (default 20)");
  cmd.on_run([o] { run_a2a(*o); });
}

}  // namespace moe::cli
