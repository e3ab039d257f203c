// From microbenchmark timings to the curves a calibration file carries, and the sizes to sweep.
// Pure functions: the GPU side (gpu_bench.h) measures, this side is tested on any machine.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/gpu_bench.h"
#include "calibrate/nccl_bench.h"
#include "planner/model_spec.h"
#include "planner/units.h"

namespace moe::calibrate {

// The GEMMs the planner times for `model` (attention projections; one expert's up and down
// projections at several token counts), or, without a model, square GEMMs from 256 to 8192;
// always 8192^3, the size the default curve's plateau comes from. Sorted by FLOPs, no repeats.
std::vector<GemmShape> gemm_shapes(const ModelSpec* model, bool quick);

// Transfer sizes in bytes: powers of 4 from 4 KiB to 1 GiB (quick: 64 KiB, 4 MiB, 256 MiB).
std::vector<double> transfer_sizes(bool quick);

// A GEMM curve for the calibration file: points {size_flops, efficiency, seconds}, efficiency
// being achieved FLOP/s over `peak` divided by gemm_shape_factor (the discount gemm_time applies
// on top of the curve), so the planner reproduces each measurement; GEMMs of equal FLOPs are
// averaged, efficiencies capped at 1.5 (the loader's bound).
nlohmann::json gemm_curve(const std::vector<GemmTiming>& timings, FlopsPerSec peak,
                          const std::string& note);

// A collective's curve: points {size_bytes (nccl-tests' size), efficiency, seconds}, efficiency
// being bus bandwidth over `reference` (the link a rank's traffic crosses). Timings of a world
// of one (no bus bandwidth) give no points.
nlohmann::json collective_curve(const std::vector<NcclTiming>& timings, BytesPerSec reference,
                                const std::string& note);

// A transfer curve: points {size_bytes, efficiency, seconds}, efficiency being bytes moved per
// second (per direction) over `reference`, which the file records.
nlohmann::json transfer_curve(const std::vector<CopyTiming>& timings, BytesPerSec reference,
                              const std::string& note);

}  // namespace moe::calibrate
