// Flow-level bandwidth sharing by max-min fairness.
//
// Links are constraints and flows are variables:
//     for every link l:  sum over flows f crossing l of r_f  <=  C_l,    r_f >= 0.
// Max-min fair rates come from progressive filling: raise every unfrozen flow's rate at the same
// pace until a link is full, freeze the flows that cross it, repeat until every flow is frozen
// (the system SimGrid's lmm solver handles; packet-level effects are out of scope). Rates are
// re-solved when a flow starts or ends, but only for the flows that share a link with it,
// directly or through other flows (its connected component): a flow elsewhere keeps its rate, so
// a cluster of thousands of GPUs with their own ports costs per event what one port does (as
// SimGrid's lmm solver re-solves only modified constraints). In between each flow drains at its
// rate, and its completion is an event of its own, so completion times are exact up to the
// picosecond rounding of SimTime. Flows may carry a priority class: classes are filled one after
// another, each from what the ones before left.
#pragma once

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "planner/units.h"
#include "simulator/event_queue.h"

namespace moe::sim {

class FlowNetwork {
 public:
  using Done = std::function<void(SimTime)>;
  // A flow's links, inline up to four (a member's ports, out and in, NVLink and NIC): a run of
  // every GPU sends tens of millions of flows, and a heap block each was a tenth of its time.
  using Links = boost::container::small_vector<int, 4>;

  explicit FlowNetwork(EventQueue& queue) : queue_(queue) {}

  // Returns the link's index. Capacity is per direction; a link object carries one direction.
  int add_link(BytesPerSec capacity);
  // Sends `bytes` over `links` (indices from add_link; a link named twice counts once): the flow
  // starts after `latency`, shares
  // bandwidth with every flow on its links, and `done` runs when its last byte arrives. A flow
  // over no links (a copy inside one device) completes right after its latency.
  // `priority`: 0 is served first; a class only gets what the classes before it left on a link
  // (strict priority, max-min fair inside a class), as MoNTA orders EP << PP << CP << DP.
  void send(std::span<const int> links, Bytes bytes, SimTime latency, Done done, int priority = 0);
  void send(std::initializer_list<int> links, Bytes bytes, SimTime latency, Done done,
            int priority = 0) {
    send(std::span<const int>(links.begin(), links.size()), bytes, latency, std::move(done),
         priority);
  }
  void send(const Links& links, Bytes bytes, SimTime latency, Done done, int priority = 0) {
    send(std::span<const int>(links.data(), links.size()), bytes, latency, std::move(done),
         priority);
  }

  size_t active_flows() const;
  // Current rate of each active flow on a link, summed (for invariant checks).
  BytesPerSec link_load(int link) const;
  BytesPerSec link_capacity(int link) const { return BytesPerSec(links_.at(link)); }
  Bytes bytes_sent() const { return Bytes(sent_); }
  Bytes bytes_delivered() const { return Bytes(delivered_); }
  uint64_t solves() const { return solves_; }

 private:
  struct Flow {
    Links links;
    double bytes = 0;
    double remaining = 0;  // as of `since`
    double rate = 0;
    SimTime since;
    std::optional<EventQueue::EventId> completion;  // its pending completion event, at `due`
    SimTime due;
    Done done;
    bool active = false;
    int priority = 0;
  };

  void activate(size_t flow);
  void complete(size_t flow);
  // Re-solves the flows connected to `seeds` (links) and reschedules their completions.
  void resolve_around(std::span<const int> seeds);
  // resolve_around's answer when the seeds reach one flow alone on its links, or none; false
  // when the component is larger.
  bool resolve_alone(std::span<const int> seeds);
  void fill(std::span<const size_t> members, const std::vector<int>& links);
  void schedule(size_t flow);

  EventQueue& queue_;
  std::vector<double> links_;  // capacity in bytes/s
  // Active flows crossing each link, inline up to two (most links carry one or two at a time):
  // solves walk these for every flow that starts or ends, and a heap block a link cost a cache
  // miss each.
  using OnLink = boost::container::small_vector<size_t, 2>;
  std::vector<OnLink> on_link_;
  std::vector<Flow> flows_;
  std::vector<size_t> free_;  // slots of finished flows
  size_t active_count_ = 0;
  // Scratch for resolve_around, sized to the links and flows, reset after each use.
  std::vector<char> link_seen_, flow_seen_;
  std::vector<double> left_;
  std::vector<int> unfrozen_on_;
  std::vector<int> component_links_;     // resolve_around's scratch
  std::vector<size_t> component_flows_;  // (kept to spare an allocation per solve)
  std::vector<char> frozen_;
  uint64_t solves_ = 0;
  double sent_ = 0;
  double delivered_ = 0;
};

}  // namespace moe::sim
