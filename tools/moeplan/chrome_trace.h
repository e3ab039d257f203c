// Chrome trace-event JSON of a simulated run (opens in Perfetto and chrome://tracing): a process
// per pipeline stage's GPU, a thread per stream (passes, compute, TP, EP, CP, DP, pipeline
// sends), and counters for the GPU's allocated memory and the flows on its NVLink port and NIC.
// Times are microseconds, as the format wants.
#pragma once

#include <nlohmann/json.hpp>

#include "simulator/offload_sim.h"
#include "simulator/training_sim.h"

namespace moe::cli {

nlohmann::json chrome_trace(const sim::TrainingReport& r);

// An offload run: a process per GPU, threads for its compute, both PCIe directions and its CPU
// cores and the CPU experts' token transfers.
nlohmann::json chrome_trace(const sim::OffloadReport& r);

}  // namespace moe::cli
