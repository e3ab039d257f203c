// Flow-level bandwidth sharing by max-min fairness.
//
// Links are constraints and flows are variables:
//     for every link l:  sum over flows f crossing l of r_f  <=  C_l,    r_f >= 0.
// Max-min fair rates come from progressive filling: raise every unfrozen flow's rate at the same
// pace until a link is full, freeze the flows that cross it, repeat until every flow is frozen
// (the system SimGrid's lmm solver handles; packet-level effects are out of scope). Rates are
// re-solved when a flow starts or ends; in between each flow drains at its rate, so completion
// times are exact up to the picosecond rounding of SimTime. Flows may carry a priority class:
// classes are filled one after another, each from what the ones before left.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "planner/units.h"
#include "simulator/event_queue.h"

namespace moe::sim {

class FlowNetwork {
 public:
  using Done = std::function<void(SimTime)>;

  explicit FlowNetwork(EventQueue& queue) : queue_(queue) {}

  // Returns the link's index. Capacity is per direction; a link object carries one direction.
  int add_link(BytesPerSec capacity);
  // Sends `bytes` over `links` (indices from add_link): the flow starts after `latency`, shares
  // bandwidth with every flow on its links, and `done` runs when its last byte arrives. A flow
  // over no links (a copy inside one device) completes right after its latency.
  // `priority`: 0 is served first; a class only gets what the classes before it left on a link
  // (strict priority, max-min fair inside a class), as MoNTA orders EP << PP << CP << DP.
  void send(std::vector<int> links, Bytes bytes, SimTime latency, Done done, int priority = 0);

  size_t active_flows() const;
  // Current rate of each active flow on a link, summed (for invariant checks).
  BytesPerSec link_load(int link) const;
  BytesPerSec link_capacity(int link) const { return BytesPerSec(links_.at(link)); }
  Bytes bytes_sent() const { return Bytes(sent_); }
  Bytes bytes_delivered() const { return Bytes(delivered_); }
  uint64_t solves() const { return solves_; }

 private:
  struct Flow {
    std::vector<int> links;
    double bytes = 0;
    double remaining = 0;
    double rate = 0;
    Done done;
    bool active = false;
    int priority = 0;
  };

  void activate(size_t flow);
  void drain();  // move every active flow forward to now at its current rate
  void solve();  // progressive filling, class by class
  void fill(const std::vector<size_t>& members, std::vector<double>& left);
  void schedule_next();  // the earliest completion, tagged with the current generation
  void complete_due();

  EventQueue& queue_;
  std::vector<double> links_;  // capacity in bytes/s
  std::vector<Flow> flows_;
  std::vector<size_t> active_;  // indices into flows_
  std::vector<size_t> free_;    // slots of finished flows
  SimTime last_drain_;
  uint64_t generation_ = 0;
  uint64_t solves_ = 0;
  double sent_ = 0;
  double delivered_ = 0;
};

}  // namespace moe::sim
