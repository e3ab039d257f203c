// moeplan topo: a readable summary of a cluster file and its device graph.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner/cluster_graph.h"
#include "planner/cluster_spec.h"
#include "planner/io/loaders.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

struct TopoOptions {
  std::string cluster;
  bool json = false;
};

std::string path_text(const std::vector<Link>& path) {
  if (path.empty()) return "(same device)";
  std::string out;
  for (const Link& l : path)
    out += (out.empty() ? "" : " > ") + std::string(link_kind_name(l.kind));
  return fmt::format("{} hops: {}; bottleneck {}", path.size(), out,
                     as_gbps(ClusterGraph::bottleneck(path).value()));
}

nlohmann::json path_json(const std::vector<Link>& path) {
  nlohmann::json links = nlohmann::json::array();
  for (const Link& l : path)
    links.push_back({{"kind", link_kind_name(l.kind)}, {"bandwidth_Bps", l.bandwidth.value()}});
  return {{"links", links}, {"bottleneck_Bps", ClusterGraph::bottleneck(path).value()}};
}

void run_topo(const TopoOptions& o) {
  const ClusterSpec c = io::load_cluster(o.cluster);
  const ClusterGraph g(c);
  const NodeSpec& n = c.node;
  const int last_local = n.num_gpus - 1;
  const auto intra = g.gpu_path(0, last_local);
  const auto host = g.host_path(0);
  std::optional<std::vector<Link>> inter;
  if (c.num_nodes > 1) inter = g.gpu_path(0, n.num_gpus);
  if (o.json) {
    nlohmann::json peaks;
    for (const auto& [d, f] : n.gpu.peak) peaks[dtype_name(d)] = f.value();
    nlohmann::json j = {
        {"name", c.name},
        {"nodes", c.num_nodes},
        {"gpus", c.num_gpus()},
        {"gpu",
         {{"model", n.gpu.model},
          {"peak_flops", peaks},
          {"hbm_bytes", n.gpu.hbm_capacity.value()},
          {"hbm_bandwidth_Bps", n.gpu.hbm_bandwidth.value()},
          {"sms", n.gpu.sms},
          {"power",
           {{"limit_W", n.gpu.power.limit_w},
            {"idle_W", n.gpu.power.idle_w},
            {"busy_W", n.gpu.power.busy_w},
            {"sustained_rate", n.gpu.power.sustained_rate}}}}},
        {"fabric", n.fabric == Fabric::kNvSwitch ? "nvswitch" : "pcie"},
        {"pcie_bandwidth_Bps", n.pcie_bandwidth().value()},
        {"host_link_bandwidth_Bps", n.host_link_bandwidth().value()},
        {"node_network_bandwidth_Bps", c.node_network_bandwidth().value()},
        {"graph", {{"devices", g.num_devices()}, {"links", g.num_links()}}},
        {"paths", {{"gpu0_to_last_local", path_json(intra)}, {"gpu0_to_host", path_json(host)}}}};
    if (inter) j["paths"]["gpu0_to_next_node"] = path_json(*inter);
    print_json(j);
    return;
  }
  fmt::print("{}: {} node(s) x {} {} = {} GPUs\n", c.name, c.num_nodes, n.num_gpus, n.gpu.model,
             c.num_gpus());
  if (!c.description.empty()) fmt::print("{}\n", c.description);
  fmt::print("\n");
  Table gpu({"GPU", "value"});
  for (const auto& [d, f] : n.gpu.peak)
    gpu.add(
        {fmt::format("peak {}", dtype_name(d)), fmt::format("{:.1f} TFLOP/s", f.value() / 1e12)});
  gpu.add({"HBM", as_gb(n.gpu.hbm_capacity.value())});
  gpu.add({"HBM bandwidth", as_gbps(n.gpu.hbm_bandwidth.value())});
  gpu.add({"SMs", n.gpu.sms > 0 ? fmt::format("{}", n.gpu.sms) : "not given"});
  const GpuPower& w = n.gpu.power;
  gpu.add({"power limit", w.limit_w > 0
                              ? fmt::format("{:.0f} W ({:.0f} W idle, {:.0f} W busy at full clock; "
                                            "{:.2f} of the compute rate busy all the time)",
                                            w.limit_w, w.idle_w, w.busy_w, w.sustained_rate)
                              : std::string("not given (the clock never falls)")});
  fmt::print("{}\n", gpu.render());
  Table node({"node", "value"});
  node.add({"intra-node fabric", n.fabric == Fabric::kNvSwitch
                                     ? fmt::format("NVSwitch, {} per GPU per direction",
                                                   as_gbps(n.nvlink_bandwidth.value()))
                                     : std::string("PCIe only")});
  node.add({"PCIe", fmt::format("Gen{} x{}: {} per direction", n.pcie_generation, n.pcie_lanes,
                                as_gbps(n.pcie_bandwidth().value()))});
  if (n.has_c2c())
    node.add({"GPU to CPU", fmt::format("NVLink-C2C: {} per direction, shared per superchip",
                                        as_gbps(n.c2c_bandwidth.value()))});
  // Rack-scale nodes (36 superchips, 72 NICs) list their regular parts as one row each.
  const char* hub = n.has_c2c() ? "superchip" : "PCIe switch";
  const size_t per_switch = n.pcie_switches.empty() ? 0 : n.pcie_switches.front().gpus.size();
  bool regular_switches = n.pcie_switches.size() > 8;
  for (size_t s = 0; s < n.pcie_switches.size() && regular_switches; ++s) {
    const PcieSwitch& sw = n.pcie_switches[s];
    regular_switches = sw.cpu == static_cast<int>(s) && sw.gpus.size() == per_switch;
    for (size_t i = 0; i < sw.gpus.size() && regular_switches; ++i)
      regular_switches = sw.gpus[i] == static_cast<int>(s * per_switch + i);
  }
  if (regular_switches) {
    node.add({fmt::format("{}s 0-{}", hub, n.pcie_switches.size() - 1),
              per_switch == 1 ? std::string("GPU s -> CPU s")
                              : fmt::format("GPUs {}s to {}s+{} -> CPU s", per_switch, per_switch,
                                            per_switch - 1)});
  } else {
    for (size_t s = 0; s < n.pcie_switches.size(); ++s) {
      node.add({fmt::format("{} {}", hub, s),
                fmt::format("GPUs {} -> CPU {}", fmt::join(n.pcie_switches[s].gpus, ","),
                            n.pcie_switches[s].cpu)});
    }
  }
  auto cpu_text = [](const CpuSocket& cpu) {
    return fmt::format("{} cores, {:.0f} GFLOP/s, {} host memory at {}", cpu.cores,
                       cpu.achievable_flops.value() / 1e9, as_gb(cpu.memory.value()),
                       as_gbps(cpu.memory_bandwidth.value()));
  };
  for (size_t i = 0; i < n.cpus.size();) {
    size_t j = i + 1;  // a run of identical sockets
    while (j < n.cpus.size() && cpu_text(n.cpus[j]) == cpu_text(n.cpus[i])) ++j;
    node.add({j - i > 2 ? fmt::format("CPUs {}-{}", i, j - 1) : fmt::format("CPU {}", i),
              j - i > 2 ? cpu_text(n.cpus[i]) + " each" : cpu_text(n.cpus[i])});
    i = j - i > 2 ? j : i + 1;
  }
  bool nic_per_gpu = n.nics.size() > 8;
  for (size_t k = 0; k < n.nics.size() && nic_per_gpu; ++k) {
    nic_per_gpu = n.nics[k].gpus == std::vector<int>{static_cast<int>(k)} &&
                  n.nics[k].bandwidth == n.nics.front().bandwidth;
  }
  if (nic_per_gpu) {
    node.add({fmt::format("NICs 0-{}", n.nics.size() - 1),
              fmt::format("{:.0f} Gb/s each, NIC k for GPU k",
                          n.nics.front().bandwidth.value() * 8 / 1e9)});
  } else {
    for (size_t k = 0; k < n.nics.size(); ++k) {
      node.add({fmt::format("NIC {}", k),
                fmt::format("{:.0f} Gb/s for GPUs {}", n.nics[k].bandwidth.value() * 8 / 1e9,
                            fmt::join(n.nics[k].gpus, ","))});
    }
  }
  fmt::print("{}\n", node.render());
  fmt::print("graph: {} devices, {} links\n", g.num_devices(), g.num_links());
  fmt::print("GPU 0 -> GPU {} (same node): {}\n", last_local, path_text(intra));
  fmt::print("GPU 0 -> host memory: {}\n", path_text(host));
  if (inter) fmt::print("GPU 0 -> GPU {} (next node): {}\n", n.num_gpus, path_text(*inter));
}

}  // namespace

void add_topo(CommandLine& cli) {
  auto o = std::make_shared<TopoOptions>();
  Subcommand cmd =
      cli.subcommand("topo", "Summary of a cluster file: GPUs, links, NICs, CPUs and sample paths");
  cmd.option("--cluster", o->cluster, "cluster file").required();
  cmd.flag("--json", o->json, "print one JSON document (SI units)");
  cmd.on_run([o] { run_topo(*o); });
}

}  // namespace moe::cli
