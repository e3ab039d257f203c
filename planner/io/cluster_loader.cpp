#include <fmt/format.h>

#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"

namespace moe::io {

namespace {

constexpr const char* kClusterFormat = "moeplan-cluster/1";
// Beyond any machine built: a rack-scale NVLink domain holds 576 GPUs, a socket a few hundred
// cores; 65,536 nodes of 72 GPUs are 4.7 M GPUs.
constexpr int kMostGpusPerNode = 1024;
constexpr int kMostCoresPerSocket = 4096;
constexpr int kMostNodes = 65536;

std::vector<int> gpu_list(ObjectReader& r, const std::string& key) {
  std::vector<int> out;
  for (int64_t g : r.integer_array(key)) out.push_back(static_cast<int>(g));
  return out;
}

GpuSpec read_gpu(ObjectReader g) {
  GpuSpec gpu;
  gpu.model = g.string("model");
  ObjectReader peaks = g.object("peak_TFLOPS");
  for (Dtype d : {Dtype::kFp32, Dtype::kTf32, Dtype::kBf16, Dtype::kFp16, Dtype::kFp8}) {
    if (peaks.has(dtype_name(d)))
      gpu.peak[d] = teraflops_per_sec(positive_number(peaks, dtype_name(d)));
    else
      peaks.ignore(dtype_name(d));
  }
  peaks.finish();
  if (gpu.peak.count(Dtype::kBf16) == 0) g.fail("peak_TFLOPS", "needs a bf16 entry");
  if (gpu.peak.count(Dtype::kFp16) == 0) gpu.peak[Dtype::kFp16] = gpu.peak[Dtype::kBf16];
  gpu.hbm_capacity = gigabytes(positive_number(g, "hbm_GB"));
  gpu.hbm_bandwidth = gigabytes_per_sec(positive_number(g, "hbm_bandwidth_GBps"));
  gpu.sms = static_cast<int>(g.integer_or("sms", 0));
  if (gpu.sms < 0 || gpu.sms > 1024)
    g.fail("sms", fmt::format("{} is not a count of SMs", gpu.sms));
  if (g.has("compute_capability")) {
    gpu.compute_capability = g.number("compute_capability");
    if (!(gpu.compute_capability >= 1.0 && gpu.compute_capability < 100.0))
      g.fail("compute_capability",
             fmt::format("{} is not a CUDA compute capability (major.minor, e.g. 9.0)",
                         gpu.compute_capability));
  }
  if (g.has("power")) {
    ObjectReader w = g.object("power");
    gpu.power.limit_w = positive_number(w, "limit_W");
    gpu.power.idle_w = w.number("idle_W");
    gpu.power.busy_w = positive_number(w, "busy_W");
    gpu.power.sustained_rate = positive_number(w, "sustained_rate");
    gpu.power.rated_limit_w = gpu.power.limit_w;
    w.finish();
  }
  g.finish();
  return gpu;
}

NodeSpec read_node(ObjectReader n) {
  NodeSpec node;
  node.num_gpus = positive_count(n, "gpus", kMostGpusPerNode);
  node.gpu = read_gpu(n.object("gpu"));

  ObjectReader fabric = n.object("intra_node");
  const std::string kind = fabric.string("fabric");
  if (kind == "nvswitch") {
    node.fabric = Fabric::kNvSwitch;
    node.nvlink_bandwidth = gigabytes_per_sec(positive_number(fabric, "bandwidth_GBps"));
  } else if (kind == "pcie") {
    node.fabric = Fabric::kPcie;
  } else {
    fabric.fail("fabric", fmt::format("'{}' is not one of nvswitch, pcie", kind));
  }
  fabric.finish();

  ObjectReader pcie = n.object("pcie");
  node.pcie_generation = static_cast<int>(pcie.integer("generation"));
  if (node.pcie_generation < 1 || node.pcie_generation > 6) {
    pcie.fail("generation", fmt::format("{} is not one of 1-6", node.pcie_generation));
  }
  node.pcie_lanes = static_cast<int>(pcie.integer_or("lanes", 16));
  if (node.pcie_lanes <= 0 || node.pcie_lanes > 32) pcie.fail("lanes", "must be in 1-32");
  for (ObjectReader sw : pcie.object_array("switches")) {
    PcieSwitch s;
    s.cpu = static_cast<int>(sw.integer("cpu"));
    s.gpus = gpu_list(sw, "gpus");
    sw.finish();
    node.pcie_switches.push_back(std::move(s));
  }
  pcie.finish();
  if (n.has("c2c_GBps")) node.c2c_bandwidth = gigabytes_per_sec(positive_number(n, "c2c_GBps"));

  for (ObjectReader c : n.object_array("cpus")) {
    CpuSocket cpu;
    cpu.cores = positive_count(c, "cores", kMostCoresPerSocket);
    cpu.achievable_flops = FlopsPerSec(positive_number(c, "achievable_GFLOPS") * kGiga);
    cpu.memory = gigabytes(positive_number(c, "memory_GB"));
    cpu.memory_bandwidth = gigabytes_per_sec(positive_number(c, "memory_bandwidth_GBps"));
    c.finish();
    node.cpus.push_back(cpu);
  }
  node.cpu_interconnect = gigabytes_per_sec(n.number_or("cpu_interconnect_GBps", 0.0));
  if (node.cpus.size() > 1 && !(node.cpu_interconnect > BytesPerSec(0))) {
    n.fail("cpu_interconnect_GBps", "must be positive when a node has several sockets");
  }
  if (n.has("nics")) {
    for (ObjectReader k : n.object_array("nics")) {
      Nic nic;
      nic.bandwidth = gigabits_per_sec(positive_number(k, "bandwidth_Gbps"));
      nic.gpus = gpu_list(k, "gpus");
      nic.pcie_switch = static_cast<int>(k.integer_or("pcie_switch", -1));
      k.finish();
      node.nics.push_back(std::move(nic));
    }
  } else {
    n.ignore("nics");
  }
  n.finish();
  return node;
}

}  // namespace

ClusterSpec cluster_from_json(const nlohmann::json& j, const std::string& source) {
  ObjectReader r(j, source, "");
  const std::string format = r.string("format");
  if (format != kClusterFormat)
    r.fail("format", fmt::format("'{}' is not {}", format, kClusterFormat));
  ClusterSpec c;
  c.name = r.string("name");
  c.description = r.string_or("description", "");
  c.num_nodes = positive_count(r, "nodes", kMostNodes);
  c.intra_node_latency = Seconds(r.number_or("intra_node_latency_us", 2.0) * 1e-6);
  c.inter_node_latency = Seconds(r.number_or("inter_node_latency_us", 5.0) * 1e-6);
  c.switch_radix = static_cast<int>(r.integer_or("switch_radix", 0));
  c.node = read_node(r.object("node"));
  r.finish();
  try {
    validate(c);
  } catch (const ConfigError& e) {
    // validate() names the field as a path below the root: "node/nics/0/gpus: problem".
    const std::string what = e.what();
    const size_t colon = what.find(": ");
    throw InputError(source, "/" + what.substr(0, colon), what.substr(colon + 2));
  }
  return c;
}

ClusterSpec load_cluster(const std::string& path) {
  return cluster_from_json(read_json_file(path), path);
}

}  // namespace moe::io
