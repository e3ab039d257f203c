// moeplan devices: the GPUs this machine has, and the driver, CUDA and NCCL versions.
#include <fmt/format.h>

#include "calibrate/device_info.h"
#include "tools/moeplan/commands.h"
#include "tools/moeplan/table.h"

namespace moe::cli {

namespace {

void run_devices(bool json) {
  const calibrate::SystemInfo s = calibrate::probe_system();
  if (json) {
    nlohmann::json devs = nlohmann::json::array();
    for (const auto& d : s.devices) {
      devs.push_back(
          {{"index", d.index},
           {"name", d.name},
           {"memory_bytes", d.memory_bytes},
           {"multiprocessors", d.multiprocessors},
           {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
           {"l2_bytes", d.l2_bytes}});
    }
    print_json({{"driver", s.driver_version},
                {"cuda_runtime", s.runtime_version},
                {"nccl", s.nccl_version},
                {"devices", devs}});
    return;
  }
  fmt::print("CUDA driver {}, runtime {}, NCCL {}\n\n", s.driver_version, s.runtime_version,
             s.nccl_version.empty() ? "unknown" : s.nccl_version);
  Table t({"GPU", "name", "memory", "SMs", "compute", "L2"});
  for (const auto& d : s.devices) {
    t.add({std::to_string(d.index), d.name, as_gb(static_cast<double>(d.memory_bytes)),
           std::to_string(d.multiprocessors),
           fmt::format("{}.{}", d.compute_major, d.compute_minor),
           fmt::format("{} MB", d.l2_bytes / 1000000)});
  }
  fmt::print("{}", t.render());
}

}  // namespace

void add_devices(CommandLine& cli) {
  auto json = std::make_shared<bool>(false);
  Subcommand cmd =
      cli.subcommand("devices", "GPUs on this machine with driver, CUDA and NCCL versions");
  cmd.flag("--json", *json, "print one JSON document");
  cmd.on_run([json] { run_devices(*json); });
}

}  // namespace moe::cli
