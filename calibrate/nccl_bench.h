// NCCL collectives timed as nccl-tests times them, one process per GPU.
//
// The world comes from the launcher's environment (mpirun: OMPI_COMM_WORLD_RANK/SIZE, srun:
// SLURM_PROCID/NTASKS, torchrun: RANK/WORLD_SIZE, or MOEPLAN_RANK/MOEPLAN_WORLD_SIZE); without
// one it is a world of one. Ranks meet through NCCL's own bootstrap: rank 0 writes the
// ncclUniqueId to a file every rank can read, the others wait for it. `size` follows
// nccl-tests: the whole buffer of an all-reduce or all-to-all, the gathered output of an
// all-gather, the input of a reduce-scatter, the message of a send/recv; algbw = size / time
// (GB = 1e9) and busbw = algbw x bus_factor.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/gpu_bench.h"
#include "planner/monta.h"

namespace moe::calibrate {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kAllToAllV, kSendRecv };
const char* collective_name(Collective c);  // "all_reduce", "all_gather", ...

// nccl-tests' bus bandwidth factor: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
// reduce-scatter and all-to-all, 1 for send/recv.
double bus_factor(Collective c, int ranks);

struct NcclWorld {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // picks the GPU: LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
};
// Throws GpuError for a rank outside [0, size) or a size below 1.
NcclWorld world_from_environment(const std::function<const char*(const char*)>& getenv);

// One MoE dispatch as an all-to-all-v: every rank sends `bytes_per_rank`, split over the
// receivers in proportion to their loads (RoutingSkew::rank_loads, mean 1), so row r is what
// rank r sends and column d what rank d receives.
std::vector<std::vector<double>> dispatch_matrix(const std::vector<double>& loads,
                                                 double bytes_per_rank);

struct NcclTiming {
  Collective op = Collective::kAllReduce;
  double bytes = 0;    // nccl-tests' size
  double seconds = 0;  // median over repeats, the slowest rank's
  double algbw = 0;    // bytes / seconds
  double busbw = 0;
};

// One communicator over the world, on this rank's GPU (local_rank modulo the visible GPUs).
class NcclBench {
 public:
  // `id_file`: where rank 0 leaves the unique id (unused in a world of one). Throws NoGpuError
  // without a GPU, GpuError when NCCL fails or the id does not arrive within `wait_seconds`.
  NcclBench(const NcclWorld& world, const std::string& id_file, double wait_seconds = 120);
  ~NcclBench();
  NcclBench(const NcclBench&) = delete;
  NcclBench& operator=(const NcclBench&) = delete;

  // Every rank must call this with the same arguments, in the same order.
  NcclTiming time(Collective op, double bytes, const BenchOptions& o);
  // The all-to-all-v of a dispatch matrix (one row and column per rank): its size is the
  // busiest receiver's bytes, its bus bandwidth those bytes over the time times (n-1)/n.
  NcclTiming time_alltoallv(const std::vector<std::vector<double>>& matrix, const BenchOptions& o);
  // MoNTA's dispatch over this world as tp x ep ranks (TP groups of `tp` consecutive ranks, EP
  // groups of the ranks at one index in their TP group, each pair split off the world's
  // communicator), `bytes` of tokens per rank: the baseline all-to-all of all of them over EP;
  // O1's all-to-all of 1/tp over EP, all-gather over TP and the D2D copy that restores order;
  // O2 and O3 in `chunks` chunks with the all-to-all, the all-gather (and under O3 the copy) on
  // streams of their own, chunk j's all-gather waiting on its all-to-all by an event. Returns
  // the slowest rank's median seconds; the baseline's received bytes are spot-checked.
  double time_monta(monta::Strategy strategy, int64_t tp, double bytes, int64_t chunks,
                    const BenchOptions& o);
  const NcclWorld& world() const { return world_; }

 private:
  // Every rank gets the slowest rank's time: the collective takes that long for all.
  double slowest(double seconds);
  struct State;
  NcclWorld world_;
  std::unique_ptr<State> state_;
};

}  // namespace moe::calibrate
