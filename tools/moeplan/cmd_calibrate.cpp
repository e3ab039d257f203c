// moeplan calibrate: measure the efficiency curves the cost model uses on this machine and write
// them as a calibration file (moeplan-calibration/1) that plan/simulate/affinity read with
// --calibration. The file is rewritten atomically after every finished curve, so an interrupted
// run keeps what it finished and --resume continues from there.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "calibrate/cpu_calibration.h"
#include "calibrate/device_info.h"
#include "calibrate/gpu_calibration.h"
#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "planner/routing_skew.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/common.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

const std::set<std::string> kParts = {"gemm", "copy", "pcie", "nccl", "cpu"};

struct CalibrateOptions {
  std::string out, only = "gemm,copy,pcie,cpu", model, cluster, nccl_id_file, skew;
  bool quick = false, resume = false;
  int device = 0;
  double sustain = 0;
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void run_calibrate(const CalibrateOptions& o) {
  std::set<std::string> parts;
  std::stringstream list(o.only);
  for (std::string p; std::getline(list, p, ',');) {
    if (!kParts.count(p))
      throw InputError("--only", "",
                       fmt::format("'{}' is not one of gemm, copy, pcie, nccl, cpu", p));
    parts.insert(p);
  }
  // Launched as several processes (mpirun, srun, torchrun) for the collectives: every rank runs
  // them, rank 0 alone the rest, and only rank 0 writes and prints. Without nccl the launcher's
  // variables are not ours to read.
  const calibrate::NcclWorld world =
      parts.count("nccl") ? launcher_world() : calibrate::NcclWorld{};
  require_nccl_id_file(world, o.nccl_id_file);
  if (world.rank != 0) parts = {"nccl"};
  const bool gpu = parts.size() > parts.count("cpu");
  std::optional<calibrate::SystemInfo> system;
  std::optional<ClusterSpec> cluster;
  if (gpu) {
    if (o.cluster.empty())
      throw InputError("--cluster", "",
                       "the GPU parts measure against a cluster file's peaks and bandwidths; "
                       "give the one describing this machine");
    cluster = io::load_cluster(o.cluster);
    system = calibrate::probe_system();  // one line and exit 1 without a GPU
  }

  // What an earlier run finished (--resume) or a fresh document.
  nlohmann::json doc = {{"format", "moeplan-calibration/1"}, {"curves", nlohmann::json::object()}};
  std::vector<std::string> done;
  if (o.resume && std::ifstream(o.out).good()) {
    doc = io::read_json_file(o.out);
    io::calibration_from_json(doc, o.out);  // validates it
    for (auto it = doc["curves"].begin(); it != doc["curves"].end(); ++it) done.push_back(it.key());
  }
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  doc["provenance"] = {{"tool", "moeplan calibrate"},
                       {"date", now_utc()},
                       {"host", host},
                       {"cpu", cpu_model()},
                       {"hardware_threads", std::thread::hardware_concurrency()}};
  // GEMMs timed at the power limit's clock: a plan on a cluster that prices the limit is warned.
  if (o.sustain > 0) doc["provenance"]["gemm_sustain_s"] = o.sustain;
  if (system) {
    const auto& dev = system->devices.at(static_cast<size_t>(
        std::clamp<int>(o.device, 0, static_cast<int>(system->devices.size()) - 1)));
    doc["provenance"]["gpu"] = {
        {"name", dev.name},
        {"index", dev.index},
        {"memory_bytes", dev.memory_bytes},
        {"multiprocessors", dev.multiprocessors},
        {"compute_capability", fmt::format("{}.{}", dev.compute_major, dev.compute_minor)},
        {"driver", system->driver_version},
        {"cuda_runtime", system->runtime_version},
        {"nccl", system->nccl_version},
        {"cluster_file", cluster->name}};
  }
  auto save_curve = [&](const std::string& name, const nlohmann::json& curve) {
    if (world.rank != 0) return;
    doc["curves"][name] = curve;
    io::write_file_atomically(o.out, doc.dump(2) + "\n");
  };
  Table gpu_table({"curve", "measured", "time", "rate", "efficiency"});
  std::unique_ptr<ModelSpec> model;
  if (!o.model.empty()) model = std::make_unique<ModelSpec>(io::load_model(o.model));
  if (gpu) {
    calibrate::GpuSweep g;
    g.parts = parts;
    g.model = model.get();
    g.quick = o.quick;
    g.bench.device = o.device;
    if (o.quick) g.bench.repeats = 5;
    g.gemm_sustain_seconds = o.sustain;
    g.world = world;
    g.nccl_id_file = o.nccl_id_file;
    if (!o.skew.empty()) {
      if (!model) throw InputError("--skew", "", "needs --model (whose experts it routes to)");
      // The world is the EP group: its ranks receive by the skew's rank loads.
      const RoutingSkew skew = parse_skew(o.skew, *model);
      g.dispatch_loads = skew.rank_loads(*model, world.size);
      g.dispatch_skew = skew.describe();
    }
    calibrate::run_gpu_sweep(
        g, *cluster, done,
        [&](const calibrate::GpuPoint& p) {
          if (world.rank != 0) return;
          const bool flops = p.curve.rfind("gemm", 0) == 0;
          const std::string rate = flops ? fmt::format("{:.1f} TFLOP/s", p.rate / 1e12)
                                         : fmt::format("{:.1f} GB/s", p.rate / 1e9);
          fmt::print(stderr, "{}: {} in {} ({}, {:.2f} of the file's)\n", p.curve, p.what,
                     as_ms(p.seconds), rate, p.efficiency);
          gpu_table.add(
              {p.curve, p.what, as_ms(p.seconds), rate, fmt::format("{:.3f}", p.efficiency)});
        },
        save_curve);
  }

  calibrate::CpuSweep sweep;
  if (model) {
    const ModelSpec& m = *model;
    sweep.shape = {m.hidden_size, m.is_moe() ? m.expert_ffn_size : m.dense_ffn_size, m.gated_ffn};
  }
  if (o.quick) {
    sweep.tokens = {1, 16, 128, 512};
    sweep.repeats = 3;
  }
  std::vector<calibrate::CpuExpertTiming> all;
  if (parts.count("cpu"))
    calibrate::run_cpu_sweep(
        sweep, done,
        [&](const calibrate::CpuExpertTiming& t) {
          fmt::print(stderr, "cpu expert: {:>5} tokens, {} thread(s): {:.1f} GFLOP/s forward\n",
                     t.tokens, t.threads, t.forward_flops / t.forward_s / 1e9);
          all.push_back(t);
        },
        save_curve);
  if (world.rank != 0) return;
  io::write_file_atomically(o.out, doc.dump(2) + "\n");
  if (gpu) fmt::print("{}", gpu_table.render());

  Table t({"part", "threads", "tokens", "forward", "backward", "GFLOP/s fwd", "GFLOP/s bwd"});
  for (const calibrate::CpuExpertTiming& r : all) {
    t.add({"cpu expert", std::to_string(r.threads), std::to_string(r.tokens), as_ms(r.forward_s),
           as_ms(r.backward_s), fmt::format("{:.1f}", r.forward_flops / r.forward_s / 1e9),
           fmt::format("{:.1f}", r.backward_flops / r.backward_s / 1e9)});
  }
  if (!all.empty()) fmt::print("{}", t.render());
  fmt::print("{} curve(s) in {}{}\n", doc["curves"].size(), o.out,
             done.empty() ? "" : fmt::format(" ({} kept from the earlier run)", done.size()));
}

}  // namespace

void add_calibrate(CommandLine& cli) {
  auto o = std::make_shared<CalibrateOptions>();
  Subcommand cmd = cli.subcommand(
      "calibrate", "Measure efficiency curves on this machine and write a calibration file");
  cmd.option("--out", o->out, "calibration file to write").required();
  cmd.option("--only", o->only,
             "comma-separated parts: gemm,copy,pcie,nccl,cpu (default all but nccl, which "
             "wants one process per GPU: mpirun, srun or torchrun)");
  cmd.option("--skew", o->skew,
             "nccl: also time one MoE dispatch as an all-to-all-v, the world being the EP "
             "group routed by this skew (balanced, capacity=F, G=x, worst; needs --model)");
  cmd.option("--nccl-id-file", o->nccl_id_file,
             "nccl with several ranks: a path every rank can read, where rank 0 leaves "
             "NCCL's unique id");
  cmd.option("--cluster", o->cluster,
             "cluster file describing this machine: the GPU parts measure against its GPU "
             "peaks, HBM, PCIe, NVLink and NIC bandwidths (required for the GPU parts)");
  cmd.option("--device", o->device, "GPU index to measure").non_negative();
  cmd.option("--model", o->model, "take the expert shape (h, g, gated) from this model");
  cmd.flag("--quick", o->quick, "fewer sizes and repeats");
  cmd.option("--sustain", o->sustain,
             "gemm: run each shape back to back this many seconds before timing it, so the "
             "curve sees the clock the GPU holds under sustained load at its power limit (as "
             "a training run does) rather than a cool GPU's boost (default 0)")
      .non_negative();
  cmd.flag("--resume", o->resume, "keep the curves an interrupted run already wrote");
  cmd.on_run([o] { run_calibrate(*o); });
}

}  // namespace moe::cli
