// moeplan calibrate: measure the efficiency curves the cost model uses on this machine and write
// them as a calibration file (moeplan-calibration/1) that plan/simulate/affinity read with
// --calibration. The file is rewritten atomically after every finished curve, so an interrupted
// run keeps what it finished and --resume continues from there.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "calibrate/cpu_calibration.h"
#include "calibrate/device_info.h"
#include "planner/errors.h"
#include "planner/io/json_reader.h"
#include "planner/io/loaders.h"
#include "planner/io/plan_io.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

const std::set<std::string> kParts = {"gemm", "copy", "pcie", "nccl", "cpu"};

struct CalibrateOptions {
  std::string out, only = "gemm,copy,pcie,nccl,cpu", model;
  bool quick = false, resume = false;
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
  const bool gpu = parts.size() > parts.count("cpu");
  if (gpu) {
    calibrate::probe_system();  // one line and exit 1 without a GPU
    throw InputError("--only", "",
                     "the GPU microbenchmarks (gemm, copy, pcie, nccl) are not in this build yet; "
                     "run --only cpu");
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

  calibrate::CpuSweep sweep;
  if (!o.model.empty()) {
    const ModelSpec m = io::load_model(o.model);
    sweep.shape = {m.hidden_size, m.is_moe() ? m.expert_ffn_size : m.dense_ffn_size, m.gated_ffn};
  }
  if (o.quick) {
    sweep.tokens = {16, 128, 512};
    sweep.repeats = 3;
  }
  std::vector<calibrate::CpuExpertTiming> all;
  calibrate::run_cpu_sweep(
      sweep, done,
      [&](const calibrate::CpuExpertTiming& t) {
        fmt::print(stderr, "cpu expert: {:>5} tokens, {} thread(s): {:.1f} GFLOP/s forward\n",
                   t.tokens, t.threads, t.forward_flops / t.forward_s / 1e9);
        all.push_back(t);
      },
      [&](const std::string& name, const nlohmann::json& curve) {
        doc["curves"][name] = curve;
        io::write_file_atomically(o.out, doc.dump(2) + "\n");
      });
  io::write_file_atomically(o.out, doc.dump(2) + "\n");

  Table t({"part", "threads", "tokens", "forward", "backward", "GFLOP/s fwd", "GFLOP/s bwd"});
  for (const calibrate::CpuExpertTiming& r : all) {
    t.add({"cpu expert", std::to_string(r.threads), std::to_string(r.tokens), as_ms(r.forward_s),
           as_ms(r.backward_s), fmt::format("{:.1f}", r.forward_flops / r.forward_s / 1e9),
           fmt::format("{:.1f}", r.backward_flops / r.backward_s / 1e9)});
  }
  fmt::print("{}", t.render());
  fmt::print("{} curve(s) in {}{}\n", doc["curves"].size(), o.out,
             done.empty() ? "" : fmt::format(" ({} kept from the earlier run)", done.size()));
}

}  // namespace

void add_calibrate(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure efficiency curves on this machine and write a calibration file");
  cmd->add_option("--out", o->out, "calibration file to write")->required();
  cmd->add_option("--only", o->only,
                  "comma-separated parts: gemm,copy,pcie,nccl,cpu (default all)");
  cmd->add_option("--model", o->model, "take the expert shape (h, g, gated) from this model");
  cmd->add_flag("--quick", o->quick, "fewer sizes and repeats");
  cmd->add_flag("--resume", o->resume, "keep the curves an interrupted run already wrote");
  cmd->callback([o] { run_calibrate(*o); });
}

}  // namespace moe::cli
