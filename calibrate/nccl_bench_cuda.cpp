// NCCL collectives on this rank's GPU (calibrate/nccl_bench.h).
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "calibrate/cuda_util.h"
#include "calibrate/nccl_bench.h"

namespace moe::calibrate {

namespace {

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw GpuError(fmt::format("{}: {}", call, ncclGetErrorString(r)));
}
#define MOE_NCCL(call) check_nccl((call), #call)

// Rank 0 writes the id next to the file and renames it into place (readers never see half of
// it); the others poll for it.
ncclUniqueId exchange_id(const NcclWorld& w, const std::string& path, double wait_seconds) {
  ncclUniqueId id{};
  if (w.size == 1) {
    MOE_NCCL(ncclGetUniqueId(&id));
    return id;
  }
  if (path.empty()) throw GpuError("a world of several ranks needs --nccl-id-file");
  if (w.rank == 0) {
    MOE_NCCL(ncclGetUniqueId(&id));
    const std::string tmp = path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(id.internal, sizeof id.internal);
      if (!out) throw GpuError(fmt::format("{}: cannot write the NCCL id", tmp));
    }
    std::filesystem::rename(tmp, path);
    return id;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id.internal, sizeof id.internal)) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw GpuError(fmt::format("{}: rank 0's NCCL id did not arrive in {:g} s", path, wait_seconds));
}

}  // namespace

struct NcclBench::State {
  ncclComm_t comm = nullptr;
  cuda::Stream stream;
  // MoNTA's TP and EP groups, split off `comm` for a TP size of split_tp.
  ncclComm_t tp = nullptr, ep = nullptr;
  int64_t split_tp = 0;
  ~State() {
    if (tp != nullptr) ncclCommDestroy(tp);
    if (ep != nullptr) ncclCommDestroy(ep);
    if (comm != nullptr) ncclCommDestroy(comm);
  }
};

NcclBench::NcclBench(const NcclWorld& world, const std::string& id_file, double wait_seconds)
    : world_(world) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    throw NoGpuError("no GPU: no CUDA device is visible");
  cuda::use_device(world.local_rank % count);
  const ncclUniqueId id = exchange_id(world, id_file, wait_seconds);
  state_ = std::make_unique<State>();
  MOE_NCCL(ncclCommInitRank(&state_->comm, world.size, id, world.rank));
}

NcclBench::~NcclBench() = default;

NcclTiming NcclBench::time(Collective op, double bytes_d, const BenchOptions& o) {
  const int n = world_.size, r = world_.rank;
  // Float elements; a size is rounded down to what divides evenly over the ranks.
  const size_t unit = sizeof(float) * static_cast<size_t>(n);
  const size_t bytes = std::max(unit, static_cast<size_t>(bytes_d) / unit * unit);
  const size_t count = bytes / sizeof(float);  // elements of the whole buffer
  const size_t share = count / static_cast<size_t>(n);
  cuda::DeviceBuffer send(bytes), recv(bytes);
  std::vector<float> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((i * 7 + r) % 13) - 6.0f;
  MOE_CUDA(cudaMemcpy(send.get(), host.data(), bytes, cudaMemcpyHostToDevice));
  const cudaStream_t s = state_->stream.get();
  ncclComm_t comm = state_->comm;
  auto* in = static_cast<float*>(send.get());
  auto* out = static_cast<float*>(recv.get());
  auto run = [&](int) {
    switch (op) {
      case Collective::kAllReduce:
        MOE_NCCL(ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, s));
        break;
      case Collective::kAllGather:
        MOE_NCCL(ncclAllGather(in, out, share, ncclFloat, comm, s));
        break;
      case Collective::kReduceScatter:
        MOE_NCCL(ncclReduceScatter(in, out, share, ncclFloat, ncclSum, comm, s));
        break;
      case Collective::kAllToAllV:  // time_alltoallv() runs it
      case Collective::kAllToAll:
        MOE_NCCL(ncclGroupStart());
        for (int peer = 0; peer < n; ++peer) {
          MOE_NCCL(
              ncclSend(in + share * static_cast<size_t>(peer), share, ncclFloat, peer, comm, s));
          MOE_NCCL(
              ncclRecv(out + share * static_cast<size_t>(peer), share, ncclFloat, peer, comm, s));
        }
        MOE_NCCL(ncclGroupEnd());
        break;
      case Collective::kSendRecv:
        MOE_NCCL(ncclGroupStart());
        MOE_NCCL(ncclSend(in, count, ncclFloat, (r + 1) % n, comm, s));
        MOE_NCCL(ncclRecv(out, count, ncclFloat, (r + n - 1) % n, comm, s));
        MOE_NCCL(ncclGroupEnd());
        break;
    }
  };
  NcclTiming t;
  t.op = op;
  t.bytes = static_cast<double>(bytes);
  t.seconds = slowest(cuda::median_seconds(s, o, run));
  // Spot-check the result: an all-reduce sums every rank's element i.
  if (op == Collective::kAllReduce) {
    float got = 0;
    MOE_CUDA(cudaMemcpy(&got, out + 1, sizeof got, cudaMemcpyDeviceToHost));
    float want = 0;
    for (int k = 0; k < n; ++k) want += static_cast<float>((1 * 7 + k) % 13) - 6.0f;
    if (got != want)
      throw GpuError(
          fmt::format("all_reduce of {} bytes: element 1 is {}, not {}", bytes, got, want));
  }
  t.algbw = t.bytes / t.seconds;
  t.busbw = t.algbw * bus_factor(op, n);
  return t;
}

double NcclBench::slowest(double seconds) {
  cuda::DeviceBuffer slot(sizeof(double));
  const cudaStream_t s = state_->stream.get();
  MOE_CUDA(cudaMemcpy(slot.get(), &seconds, sizeof seconds, cudaMemcpyHostToDevice));
  MOE_NCCL(ncclAllReduce(slot.get(), slot.get(), 1, ncclDouble, ncclMax, state_->comm, s));
  MOE_CUDA(cudaStreamSynchronize(s));
  MOE_CUDA(cudaMemcpy(&seconds, slot.get(), sizeof seconds, cudaMemcpyDeviceToHost));
  return seconds;
}

NcclTiming NcclBench::time_alltoallv(const std::vector<std::vector<double>>& matrix,
                                     const BenchOptions& o) {
  const int n = world_.size, r = world_.rank;
  if (matrix.size() != static_cast<size_t>(n))
    throw GpuError(fmt::format("dispatch matrix has {} rows for {} ranks", matrix.size(), n));
  // Whole floats per peer; offsets into one send and one receive buffer.
  auto elems = [](double bytes) { return static_cast<size_t>(bytes) / sizeof(float); };
  std::vector<size_t> send_off(static_cast<size_t>(n) + 1, 0), recv_off(send_off);
  double busiest = 0;
  for (int p = 0; p < n; ++p) {
    send_off[static_cast<size_t>(p) + 1] =
        send_off[static_cast<size_t>(p)] +
        elems(matrix[static_cast<size_t>(r)].at(static_cast<size_t>(p)));
    recv_off[static_cast<size_t>(p) + 1] =
        recv_off[static_cast<size_t>(p)] +
        elems(matrix[static_cast<size_t>(p)].at(static_cast<size_t>(r)));
    double received = 0;
    for (int q = 0; q < n; ++q)
      received +=
          static_cast<double>(elems(matrix[static_cast<size_t>(q)][static_cast<size_t>(p)]));
    busiest = std::max(busiest, received * sizeof(float));
  }
  cuda::DeviceBuffer send(std::max<size_t>(send_off.back(), 1) * sizeof(float));
  cuda::DeviceBuffer recv(std::max<size_t>(recv_off.back(), 1) * sizeof(float));
  MOE_CUDA(cudaMemset(send.get(), 0x3f, send.bytes()));  // 0x3f3f3f3f: 0.747f, not zero
  auto* in = static_cast<float*>(send.get());
  auto* out = static_cast<float*>(recv.get());
  const cudaStream_t s = state_->stream.get();
  auto run = [&](int) {
    MOE_NCCL(ncclGroupStart());
    for (int p = 0; p < n; ++p) {
      const size_t ps = static_cast<size_t>(p);
      MOE_NCCL(ncclSend(in + send_off[ps], send_off[ps + 1] - send_off[ps], ncclFloat, p,
                        state_->comm, s));
      MOE_NCCL(ncclRecv(out + recv_off[ps], recv_off[ps + 1] - recv_off[ps], ncclFloat, p,
                        state_->comm, s));
    }
    MOE_NCCL(ncclGroupEnd());
  };
  NcclTiming t;
  t.op = Collective::kAllToAllV;
  t.bytes = busiest;
  t.seconds = slowest(cuda::median_seconds(s, o, run));
  t.algbw = t.bytes / t.seconds;
  t.busbw = t.algbw * bus_factor(t.op, n);
  return t;
}

double NcclBench::time_monta(monta::Strategy strategy, int64_t tp, double bytes_d, int64_t chunks,
                             const BenchOptions& o) {
  const int n = world_.size, r = world_.rank;
  if (tp < 1 || n % tp != 0)
    throw GpuError(fmt::format("a world of {} ranks has no TP groups of {}", n, tp));
  const int64_t ep = n / tp;
  if (state_->split_tp != tp) {
    if (state_->tp != nullptr) MOE_NCCL(ncclCommDestroy(state_->tp));
    if (state_->ep != nullptr) MOE_NCCL(ncclCommDestroy(state_->ep));
    state_->tp = state_->ep = nullptr;
    MOE_NCCL(ncclCommSplit(state_->comm, static_cast<int>(r / tp), r, &state_->tp, nullptr));
    MOE_NCCL(ncclCommSplit(state_->comm, static_cast<int>(r % tp), r, &state_->ep, nullptr));
    state_->split_tp = tp;
  }
  const bool pipelined = strategy == monta::Strategy::kO2 || strategy == monta::Strategy::kO3;
  const size_t parts =
      static_cast<size_t>(tp * ep * (pipelined ? std::max<int64_t>(chunks, 1) : 1));
  const size_t bytes = std::max(parts, static_cast<size_t>(bytes_d) / parts * parts);
  cuda::DeviceBuffer in(bytes), sent(bytes), gathered(bytes), ordered(bytes);
  std::vector<unsigned char> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>((r * 31 + i * 7) % 251);
  MOE_CUDA(cudaMemcpy(in.get(), host.data(), bytes, cudaMemcpyHostToDevice));
  auto at = [](const cuda::DeviceBuffer& b, size_t off) {
    return static_cast<unsigned char*>(b.get()) + off;
  };
  // Each rank sends `per_peer` bytes from src to every EP peer, receiving as much into dst.
  auto alltoall = [&](unsigned char* src, unsigned char* dst, size_t per_peer, cudaStream_t s) {
    MOE_NCCL(ncclGroupStart());
    for (int64_t p = 0; p < ep; ++p) {
      const size_t off = static_cast<size_t>(p) * per_peer;
      MOE_NCCL(ncclSend(src + off, per_peer, ncclInt8, static_cast<int>(p), state_->ep, s));
      MOE_NCCL(ncclRecv(dst + off, per_peer, ncclInt8, static_cast<int>(p), state_->ep, s));
    }
    MOE_NCCL(ncclGroupEnd());
  };
  const cudaStream_t a = state_->stream.get();
  cuda::Stream gather_stream, copy_stream;
  const cudaStream_t g = gather_stream.get(), c = copy_stream.get();
  const size_t n_chunks = pipelined ? static_cast<size_t>(chunks) : 1;
  std::vector<cuda::Event> sent_ev(n_chunks), gathered_ev(n_chunks);
  cuda::Event gather_done, copy_done;
  const size_t slice = bytes / static_cast<size_t>(tp);  // what one TP rank sends across
  auto run = [&](int) {
    switch (strategy) {
      case monta::Strategy::kBaseline:
        alltoall(at(in, 0), at(sent, 0), bytes / static_cast<size_t>(ep), a);
        return;
      case monta::Strategy::kO1:
        alltoall(at(in, 0), at(sent, 0), slice / static_cast<size_t>(ep), a);
        MOE_NCCL(ncclAllGather(at(sent, 0), at(gathered, 0), slice, ncclInt8, state_->tp, a));
        MOE_CUDA(
            cudaMemcpyAsync(at(ordered, 0), at(gathered, 0), bytes, cudaMemcpyDeviceToDevice, a));
        return;
      case monta::Strategy::kO2:
      case monta::Strategy::kO3:
        break;
    }
    const size_t piece = slice / n_chunks;  // one chunk's all-to-all input per rank
    for (size_t j = 0; j < n_chunks; ++j) {
      alltoall(at(in, j * piece), at(sent, j * piece), piece / static_cast<size_t>(ep), a);
      MOE_CUDA(cudaEventRecord(sent_ev[j].get(), a));
      MOE_CUDA(cudaStreamWaitEvent(g, sent_ev[j].get(), 0));
      const size_t out = j * piece * static_cast<size_t>(tp);
      MOE_NCCL(
          ncclAllGather(at(sent, j * piece), at(gathered, out), piece, ncclInt8, state_->tp, g));
      if (strategy == monta::Strategy::kO3) {
        MOE_CUDA(cudaEventRecord(gathered_ev[j].get(), g));
        MOE_CUDA(cudaStreamWaitEvent(c, gathered_ev[j].get(), 0));
        MOE_CUDA(cudaMemcpyAsync(at(ordered, out), at(gathered, out),
                                 piece * static_cast<size_t>(tp), cudaMemcpyDeviceToDevice, c));
      }
    }
    if (strategy == monta::Strategy::kO2) {
      MOE_CUDA(
          cudaMemcpyAsync(at(ordered, 0), at(gathered, 0), bytes, cudaMemcpyDeviceToDevice, g));
    }
    // The timing stream waits for the other two.
    MOE_CUDA(cudaEventRecord(gather_done.get(), g));
    MOE_CUDA(cudaEventRecord(copy_done.get(), c));
    MOE_CUDA(cudaStreamWaitEvent(a, gather_done.get(), 0));
    MOE_CUDA(cudaStreamWaitEvent(a, copy_done.get(), 0));
  };
  const double seconds = slowest(cuda::median_seconds(a, o, run));
  if (strategy == monta::Strategy::kBaseline) {
    // EP peer p (world rank p tp + r % tp) sent us block (r / tp) of its input.
    const size_t per_peer = bytes / static_cast<size_t>(ep);
    std::vector<unsigned char> got(bytes);
    MOE_CUDA(cudaMemcpy(got.data(), sent.get(), bytes, cudaMemcpyDeviceToHost));
    for (int64_t p = 0; p < ep; ++p) {
      const int64_t src = p * tp + r % tp;
      const size_t i = static_cast<size_t>(r / tp) * per_peer + per_peer / 2;
      const auto want = static_cast<unsigned char>((src * 31 + i * 7) % 251);
      if (got[static_cast<size_t>(p) * per_peer + per_peer / 2] != want)
        throw GpuError(
            fmt::format("MoNTA baseline all-to-all: the block from rank {} is wrong", src));
    }
  }
  return seconds;
}

}  // namespace moe::calibrate
