// Analytic checks of the event queue and the max-min flow solver (cf. SimGrid maxmin_test).
#include "simulator/flow_network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>

namespace moe::sim {

namespace {
constexpr double kGB = 1e9;
SimTime us(double x) {
  return to_sim_time(Seconds(x * 1e-6));
}
}  // namespace

TEST(SimTime, RoundsUpAndNeverToZero) {
  EXPECT_EQ(to_sim_time(Seconds(1e-15)).ps, 1);
  EXPECT_EQ(to_sim_time(Seconds(2.5e-12)).ps, 3);
  EXPECT_EQ(to_sim_time(Seconds(0)).ps, 0);
  EXPECT_EQ(to_sim_time(Seconds(1.0)).ps, 1000000000000);
  EXPECT_EQ(to_sim_time(Seconds(0.5)).ps, 500000000000);
  EXPECT_EQ(to_sim_time(Seconds(1.5e-12)).ps, 2);
  EXPECT_EQ(to_sim_time(Seconds(-1.0)).ps, 0);
  // Beyond int64 picoseconds (106 days) it saturates rather than overflowing.
  EXPECT_EQ(to_sim_time(Seconds(1e300)).ps, INT64_MAX);
}

TEST(EventQueue, EqualTimesRunInInsertionOrder) {
  EventQueue q;
  std::vector<int> order;
  q.at(us(5), [&] { order.push_back(2); });
  q.at(us(1), [&] { order.push_back(1); });
  q.at(us(5), [&] { order.push_back(3); });
  q.at(us(5), [&] {
    q.after(SimTime{0}, [&] { order.push_back(5); });
    order.push_back(4);
  });
  EXPECT_EQ(q.run(), 5u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(q.now(), us(5));
  EXPECT_THROW(q.at(us(1), [] {}), std::logic_error);
}

TEST(EventQueue, RunsARandomScheduleInTimeThenSchedulingOrder) {
  // The queue buckets events by time. Whatever the schedule (times that repeat, events that
  // schedule more at their own time, cancellations mid-run), it must run exactly the events not
  // cancelled, ordered by (time, order scheduled): what one heap of (time, sequence) does.
  EventQueue q;
  std::mt19937 rng(7);
  std::vector<int> order;
  std::vector<SimTime> time_of;
  std::vector<EventQueue::EventId> id_of;
  std::vector<bool> cancelled;
  std::function<void(SimTime)> schedule = [&](SimTime t) {
    const int id = static_cast<int>(time_of.size());
    time_of.push_back(t);
    cancelled.push_back(false);
    id_of.push_back(q.at(t, [&, id] {
      EXPECT_EQ(q.now(), time_of[static_cast<size_t>(id)]);
      order.push_back(id);
      if (time_of.size() >= 3000) return;
      for (int k = 0; k < 2; ++k) schedule(q.now() + us(static_cast<int>(rng() % 4)));
      const size_t victim = rng() % time_of.size();
      const bool ran = std::find(order.begin(), order.end(), victim) != order.end();
      if (rng() % 4 == 0 && !ran && !cancelled[victim]) {
        cancelled[victim] = true;
        q.cancel(id_of[victim]);
      }
    }));
  };
  for (int k = 0; k < 8; ++k) schedule(us(static_cast<int>(rng() % 3)));
  const uint64_t executed = q.run();
  EXPECT_EQ(executed, order.size());
  std::vector<int> expected;
  for (size_t id = 0; id < time_of.size(); ++id)
    if (!cancelled[id]) expected.push_back(static_cast<int>(id));
  std::stable_sort(expected.begin(), expected.end(), [&](int a, int b) {
    return time_of[static_cast<size_t>(a)] < time_of[static_cast<size_t>(b)];
  });
  EXPECT_EQ(order, expected);
  EXPECT_GT(std::count(cancelled.begin(), cancelled.end(), true), 10);
}

TEST(EventQueue, CancelledEventsNeitherRunNorMoveTheClock) {
  EventQueue q;
  bool ran = false;
  q.at(us(1), [] {});
  const EventQueue::EventId late = q.at(us(9), [&] { ran = true; });
  q.cancel(late);
  EXPECT_EQ(q.run(), 1u);
  EXPECT_FALSE(ran);
  EXPECT_EQ(q.now(), us(1));
}

TEST(FlowNetwork, ARateChangeLeavesNoLateCompletion) {
  // A (1 GB) runs alone at 100 GB/s, shares with B (0.2 GB) from 2 ms: both at 50 GB/s, B ends
  // at 6 ms, A has 0.6 GB left at 100 GB/s and ends at 12 ms. A's first completion (10 ms) was
  // dropped when B joined, so the run ends at A's real end, not later.
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(gigabytes_per_sec(100));
  SimTime a, b;
  net.send({link}, Bytes(kGB), SimTime{0}, [&](SimTime t) { a = t; });
  net.send({link}, Bytes(0.2 * kGB), us(2000), [&](SimTime t) { b = t; });
  q.run();
  EXPECT_NEAR(to_seconds(b).value(), 0.006, 1e-11);
  EXPECT_NEAR(to_seconds(a).value(), 0.012, 1e-11);
  EXPECT_EQ(q.now(), a);
}

TEST(FlowNetwork, FlowsOnDisjointLinksKeepTheirRates) {
  // Only a flow's connected component is re-solved: a thousand ports with their own flows,
  // starting at different times, each finish at latency + B / W as if alone.
  EventQueue q;
  FlowNetwork net(q);
  std::vector<SimTime> done(1000);
  for (int i = 0; i < 1000; ++i) {
    const int link = net.add_link(gigabytes_per_sec(10 + i % 7));
    net.send({link}, Bytes(kGB * (1 + i % 3)), us(i), [&, i](SimTime t) { done[i] = t; });
  }
  q.run();
  for (int i = 0; i < 1000; ++i)
    EXPECT_NEAR(to_seconds(done[i]).value(), i * 1e-6 + (1 + i % 3) / (10.0 + i % 7), 1e-10);
  EXPECT_EQ(net.active_flows(), 0u);
}

TEST(FlowNetwork, OneFlowTakesLatencyPlusBytesOverBandwidth) {
  // latency + B / W = 2 us + 1 GB / 100 GB/s = 10.002 ms.
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(gigabytes_per_sec(100));
  SimTime finished;
  net.send({link}, Bytes(1 * kGB), us(2), [&](SimTime t) { finished = t; });
  q.run();
  EXPECT_NEAR(to_seconds(finished).value(), 2e-6 + 0.01, 1e-11);
  EXPECT_DOUBLE_EQ(net.bytes_delivered().value(), net.bytes_sent().value());
}

TEST(FlowNetwork, TwoEqualFlowsOnOneLinkEachFinishAtTwiceTheTime) {
  // Each gets W/2, so both finish at 2B/W.
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(gigabytes_per_sec(50));
  std::vector<SimTime> done;
  for (int i = 0; i < 2; ++i)
    net.send({link}, Bytes(kGB), SimTime{0}, [&](SimTime t) { done.push_back(t); });
  q.run();
  ASSERT_EQ(done.size(), 2u);
  for (SimTime t : done) EXPECT_NEAR(to_seconds(t).value(), 2 * 1.0 / 50, 1e-11);
}

TEST(FlowNetwork, AHigherPriorityClassIsServedFirst) {
  // MoNTA's priorities: the EP flow (class 0) takes the whole link and finishes at B/W; the DP
  // flow (class 3) waits, then finishes at 2B/W. A third flow on another link is unaffected.
  EventQueue q;
  FlowNetwork net(q);
  const int link = net.add_link(gigabytes_per_sec(50));
  const int other = net.add_link(gigabytes_per_sec(50));
  SimTime ep, dp, free;
  net.send(
      {link}, Bytes(kGB), SimTime{0}, [&](SimTime t) { dp = t; }, 3);
  net.send(
      {link}, Bytes(kGB), SimTime{0}, [&](SimTime t) { ep = t; }, 0);
  net.send(
      {other}, Bytes(kGB), SimTime{0}, [&](SimTime t) { free = t; }, 3);
  q.run();
  EXPECT_NEAR(to_seconds(ep).value(), 1.0 / 50, 1e-11);
  EXPECT_NEAR(to_seconds(dp).value(), 2.0 / 50, 1e-11);
  EXPECT_NEAR(to_seconds(free).value(), 1.0 / 50, 1e-11);
}

TEST(FlowNetwork, ProgressiveFillingGivesMaxMinRates) {
  // Link 0 (10 GB/s): flows A, B.  Link 1 (4 GB/s): flows B, C.
  // Link 1 saturates first at 2 each (B, C frozen); A then takes link 0's remaining 8.
  EventQueue q;
  FlowNetwork net(q);
  const int l0 = net.add_link(gigabytes_per_sec(10));
  const int l1 = net.add_link(gigabytes_per_sec(4));
  std::map<char, SimTime> done;
  net.send({l0}, Bytes(8 * kGB), SimTime{0}, [&](SimTime t) { done['A'] = t; });
  net.send({l0, l1}, Bytes(2 * kGB), SimTime{0}, [&](SimTime t) { done['B'] = t; });
  net.send({l1}, Bytes(2 * kGB), SimTime{0}, [&](SimTime t) { done['C'] = t; });
  q.after(us(1), [&] {
    EXPECT_NEAR(net.link_load(l0).value(), 10 * kGB, 1.0);
    EXPECT_NEAR(net.link_load(l1).value(), 4 * kGB, 1.0);
  });
  q.run();
  // B and C finish together at 1 s (2 GB at 2 GB/s); A moved 8 GB at 8 GB/s: also 1 s.
  EXPECT_NEAR(to_seconds(done['A']).value(), 1.0, 1e-9);
  EXPECT_NEAR(to_seconds(done['B']).value(), 1.0, 1e-9);
  EXPECT_NEAR(to_seconds(done['C']).value(), 1.0, 1e-9);
}

TEST(FlowNetwork, RatesRiseWhenAFlowLeaves) {
  // Two flows share 10 GB/s; the 1 GB one leaves at 0.2 s; the 3 GB one then runs alone:
  // 1 GB by 0.2 s, 2 GB left at 10 GB/s, done at 0.4 s.
  EventQueue q;
  FlowNetwork net(q);
  const int l = net.add_link(gigabytes_per_sec(10));
  SimTime small, big;
  net.send({l}, Bytes(1 * kGB), SimTime{0}, [&](SimTime t) { small = t; });
  net.send({l}, Bytes(3 * kGB), SimTime{0}, [&](SimTime t) { big = t; });
  q.run();
  EXPECT_NEAR(to_seconds(small).value(), 0.2, 1e-9);
  EXPECT_NEAR(to_seconds(big).value(), 0.4, 1e-9);
}

TEST(FlowNetwork, AFlowLeftAloneRunsAtItsNarrowestLink) {
  // A (2 GB) crosses x (10 GB/s) and y (20 GB/s); B (0.5 GB) shares x: 5 GB/s each until B ends
  // at 0.1 s, then A, alone on both, runs at x's 10 GB/s: 1.5 GB left, done at 0.25 s.
  EventQueue q;
  FlowNetwork net(q);
  const int x = net.add_link(gigabytes_per_sec(10));
  const int y = net.add_link(gigabytes_per_sec(20));
  SimTime a, b;
  net.send({x, y}, Bytes(2 * kGB), SimTime{0}, [&](SimTime t) { a = t; });
  net.send({x}, Bytes(0.5 * kGB), SimTime{0}, [&](SimTime t) { b = t; });
  q.run();
  EXPECT_NEAR(to_seconds(b).value(), 0.1, 1e-9);
  EXPECT_NEAR(to_seconds(a).value(), 0.25, 1e-9);
  EXPECT_EQ(net.active_flows(), 0u);
}

TEST(FlowNetwork, InvariantsUnderManyFlows) {
  // Link loads never exceed capacity, every byte sent arrives, and the same input gives the
  // same completion times.
  auto run_once = [](std::vector<SimTime>& finish) {
    EventQueue q;
    FlowNetwork net(q);
    std::vector<int> links;
    for (int i = 0; i < 6; ++i) links.push_back(net.add_link(gigabytes_per_sec(10.0 + 7 * i)));
    uint64_t state = 12345;
    auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
    finish.assign(40, SimTime{});
    for (int f = 0; f < 40; ++f) {
      std::vector<int> path;
      for (int l : links) {
        if (next() % 3 == 0) path.push_back(l);
      }
      if (path.empty()) path.push_back(links[f % links.size()]);
      const double bytes = 1e8 * static_cast<double>(1 + next() % 50);
      net.send(path, Bytes(bytes), us(static_cast<double>(next() % 1000)),
               [&finish, f](SimTime t) { finish[f] = t; });
    }
    for (int probe = 1; probe <= 50; ++probe) {
      q.at(to_sim_time(Seconds(0.05 * probe)), [&net, links] {
        for (int l : links)
          EXPECT_LE(net.link_load(l).value(), net.link_capacity(l).value() * (1 + 1e-9));
      });
    }
    q.run();
    EXPECT_NEAR(net.bytes_delivered().value(), net.bytes_sent().value(), 1.0);
    EXPECT_EQ(net.active_flows(), 0u);
  };
  std::vector<SimTime> a, b;
  run_once(a);
  run_once(b);
  EXPECT_EQ(a, b);
  for (SimTime t : a) EXPECT_GT(t.ps, 0);
}

TEST(FlowNetwork, EmptyPathCompletesAfterItsLatency) {
  EventQueue q;
  FlowNetwork net(q);
  SimTime done{-1};
  net.send({}, Bytes(1e9), us(3), [&](SimTime t) { done = t; });
  q.run();
  EXPECT_EQ(done, us(3));
  EXPECT_THROW(net.send({7}, Bytes(1), SimTime{0}, nullptr), std::invalid_argument);
}

}  // namespace moe::sim
