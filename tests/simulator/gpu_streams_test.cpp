// GPU streams: serial inside a stream, concurrent across streams, dependencies, and the
// compute stream's waits charged to what it waited for.
#include "simulator/gpu_streams.h"

#include <gtest/gtest.h>

#include <map>

namespace moe::sim {

namespace {
SimTime ms(double x) {
  return to_sim_time(Seconds(x * 1e-3));
}

Task compute(double t_ms, std::vector<uint32_t> after = {}) {
  Task t;
  t.name = "compute";
  t.duration = ms(t_ms);
  t.after = std::move(after);
  return t;
}
Task comm(int link, double bytes, std::vector<uint32_t> after = {}) {
  Task t;
  t.name = "comm";
  t.stream = 1;
  t.links = {link};
  t.bytes = Bytes(bytes);
  t.after = std::move(after);
  return t;
}
}  // namespace

TEST(GpuStreams, StreamsOverlapAndDependenciesSerialise) {
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(BytesPerSec(1e9));  // 1 GB/s: 1e6 bytes take 1 ms
  GpuStreams gpu(q, net, 2, {});
  SimTime end;
  // Independent: 3 ms of compute beside 2 ms of communication.
  gpu.run({compute(1), compute(2), comm(link, 2e6)}, [&] { end = q.now(); });
  q.run();
  EXPECT_EQ(end, ms(3));
  EXPECT_EQ(gpu.waited_on(1), SimTime{});

  // Chained: compute, then communication, then compute: 1 + 2 + 1 ms, and the compute stream
  // waited 2 ms for stream 1.
  GpuStreams chained(q, net, 2, {});
  const SimTime start = q.now();
  chained.run({compute(1), comm(link, 2e6, {0}), compute(1, {1})}, [&] { end = q.now(); });
  q.run();
  EXPECT_EQ(end - start, ms(4));
  EXPECT_EQ(chained.waited_on(1), ms(2));
  EXPECT_EQ(chained.busy(0), ms(2));
}

TEST(GpuStreams, TheEarliestReadyTaskGoesFirst) {
  EventQueue q;
  FlowNetwork net(q);
  std::vector<std::string> order;
  StreamHooks hooks;
  hooks.on_start = [&](const Task& t) {
    order.push_back(std::to_string(t.tag));
    return SimTime{};
  };
  GpuStreams gpu(q, net, 1, hooks);
  std::vector<Task> g = {compute(1), compute(1), compute(1, {0})};
  for (size_t i = 0; i < g.size(); ++i) g[i].tag = static_cast<int64_t>(i);
  gpu.run(std::move(g), [] {});
  q.run();
  EXPECT_EQ(order, (std::vector<std::string>{"0", "1", "2"}));
}

// A stall on_start returns (an allocator retry) delays the task on its own stream: the 1 ms
// task behind a 0.5 ms stall ends at 1.5 ms, its dependent at 2.5 ms, and the other stream's
// communication is not held back.
TEST(GpuStreams, AStallAtStartDelaysTheTaskOnItsStream) {
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(BytesPerSec(1e9));
  StreamHooks hooks;
  hooks.on_start = [](const Task& t) { return t.tag == 1 ? ms(0.5) : SimTime{}; };
  std::vector<SimTime> ends(3);
  hooks.on_end = [&](const Task& t, SimTime, SimTime end) {
    ends[static_cast<size_t>(t.tag) - 1] = end;
  };
  GpuStreams gpu(q, net, 2, hooks);
  std::vector<Task> g = {compute(1), compute(1, {0}), comm(link, 1e6)};
  for (size_t i = 0; i < g.size(); ++i) g[i].tag = static_cast<int64_t>(i) + 1;
  gpu.run(std::move(g), [] {});
  q.run();
  EXPECT_EQ(ends[0], ms(1.5));
  EXPECT_EQ(ends[1], ms(1.5) + ms(1));
  EXPECT_EQ(ends[2], ms(1));
  EXPECT_EQ(gpu.busy(0), ms(2.5));  // the stall counts as the stream's time
}

TEST(GpuStreams, FlowsOfTwoStreamsShareALink) {
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(BytesPerSec(1e9));
  GpuStreams gpu(q, net, 3, {});
  Task a = comm(link, 1e6), b = comm(link, 1e6);
  b.stream = 2;
  SimTime end;
  gpu.run({a, b}, [&] { end = q.now(); });
  q.run();
  EXPECT_EQ(end, ms(2));  // each at half the link
}

TEST(GpuStreams, ALatencyHoldsNoLinkWhileItRuns) {
  // A 1 ms latency, then 1 MB, beside another stream's 1 MB on the same 1 GB/s link: the other
  // flow has the link to itself during the latency (done at 1 ms), then the late one's bytes
  // run alone (done at 2 ms). Were the latency bytes on the link (2 MB), they would share it
  // throughout: the other done at 2 ms, the late one at 3.
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(BytesPerSec(1e9));
  std::map<int, SimTime> ends;
  StreamHooks hooks;
  hooks.on_end = [&](const Task& t, SimTime, SimTime end) { ends[t.stream] = end; };
  GpuStreams gpu(q, net, 3, hooks);
  Task late = comm(link, 1e6), other = comm(link, 1e6);
  late.latency = ms(1);
  other.stream = 2;
  gpu.run({late, other}, [] {});
  q.run();
  EXPECT_EQ(ends.at(2), ms(1));
  EXPECT_EQ(ends.at(1), ms(2));
}

// A fused kernel carries its communication: the flow starts with the kernel, not when the
// kernel's own dependencies are through, and the kernel holds its stream until the flow has
// landed, or for its own time where that is longer.
TEST(GpuStreams, AKernelHoldsItsStreamUntilTheCommunicationItCarriesHasLanded) {
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(BytesPerSec(1e9));
  std::map<std::string, std::pair<SimTime, SimTime>> spans;
  StreamHooks hooks;
  hooks.on_end = [&](const Task& t, SimTime start, SimTime end) { spans[t.name] = {start, end}; };
  GpuStreams gpu(q, net, 2, hooks);
  // 2 ms of compute first; then a 1 ms kernel carrying 3 MB (3 ms) that also waits for it.
  Task first = compute(2), kernel = compute(1, {0}), carried = comm(link, 3e6);
  first.name = "first";
  kernel.name = "kernel";
  kernel.carries = 2;
  carried.name = "carried";
  SimTime end;
  gpu.run({first, kernel, carried}, [&] { end = q.now(); });
  q.run();
  EXPECT_EQ(spans.at("carried").first, ms(2));  // with its kernel, not at the graph's start
  EXPECT_EQ(spans.at("carried").second, ms(5));
  EXPECT_EQ(spans.at("kernel").second, ms(5));
  EXPECT_EQ(end, ms(5));
  EXPECT_EQ(gpu.busy(0), ms(5));  // the kernel's SMs are held while its data moves

  // The kernel longer than its flow keeps its own time; a carrier ready at the graph's start
  // starts its flow once.
  GpuStreams longer(q, net, 2, hooks);
  Task slow = compute(4);
  slow.name = "slow";
  slow.carries = 1;
  const SimTime start = q.now();
  longer.run({slow, comm(link, 1e6)}, [&] { end = q.now(); });
  q.run();
  EXPECT_EQ(end - start, ms(4));
  EXPECT_EQ(spans.at("comm").second - start, ms(1));
}

TEST(GpuStreams, RejectsACarriedTaskBeforeItsCarrier) {
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(BytesPerSec(1e9));
  GpuStreams gpu(q, net, 2, {});
  Task kernel = compute(1);
  kernel.carries = 0;
  EXPECT_THROW(gpu.run({comm(link, 1e6), kernel}, [] {}), std::invalid_argument);
  kernel.carries = 5;
  EXPECT_THROW(gpu.run({kernel, comm(link, 1e6)}, [] {}), std::invalid_argument);
}

// An all-to-all that leaves the node sends its local peers' bytes beside the NIC's: the flow on
// the NIC carries the one on the node's port, and the collective lands with the later.
TEST(GpuStreams, AFlowEndsWithTheFlowItCarries) {
  EventQueue q;
  FlowNetwork net(q);
  const int nic = net.add_link(BytesPerSec(1e9)), port = net.add_link(BytesPerSec(1e9));
  std::map<int, SimTime> ends;
  StreamHooks hooks;
  hooks.on_end = [&](const Task& t, SimTime, SimTime end) { ends[t.stream] = end; };
  GpuStreams gpu(q, net, 3, hooks);
  Task out = comm(nic, 1e6), local = comm(port, 1e6), sync = comm(port, 1e6);
  out.carries = 1;
  local.stream = 2;
  sync.stream = 0;  // another stream's flow on the node's port: the local bytes share it
  gpu.run({out, local, sync}, [] {});
  q.run();
  EXPECT_EQ(ends.at(2), ms(2));
  EXPECT_EQ(ends.at(1), ms(2));  // its own bytes were in at 1 ms
}

TEST(GpuStreams, RejectsForwardDependencies) {
  EventQueue q;
  FlowNetwork net(q);
  GpuStreams gpu(q, net, 1, {});
  EXPECT_THROW(gpu.run({compute(1, {1}), compute(1)}, [] {}), std::invalid_argument);
}

TEST(GpuStreams, RejectsTasksOnStreamsItDoesNotHave) {
  EventQueue q;
  FlowNetwork net(q);
  GpuStreams gpu(q, net, 2, {});
  Task high = compute(1);
  high.stream = 2;
  Task negative = compute(1);
  negative.stream = -1;
  EXPECT_THROW(gpu.run({compute(1), high}, [] {}), std::invalid_argument);
  EXPECT_THROW(gpu.run({negative, compute(1)}, [] {}), std::invalid_argument);
  bool done = false;
  gpu.run({compute(1), comm(net.add_link(gigabytes_per_sec(1)), 1e6)}, [&] { done = true; });
  q.run();
  EXPECT_TRUE(done);  // a rejected graph leaves the GPU free for the next
}

}  // namespace moe::sim
