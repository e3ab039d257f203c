// The discrete-event core: a queue of actions ordered by (time, sequence number).
//
// Equal times run in the order they were scheduled, so a run is deterministic. Each simulation
// owns its queue (no global scheduler), as ns-3's Scheduler and SimCpp20 do.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "simulator/sim_time.h"

namespace moe::sim {

class EventQueue {
 public:
  using Action = std::function<void()>;

  // Schedules `action` at absolute time `t` (not before now()).
  void at(SimTime t, Action action);
  void after(SimTime delay, Action action) { at(now_ + delay, std::move(action)); }
  // Runs events until none is left. Returns the number executed.
  uint64_t run();
  SimTime now() const { return now_; }
  bool empty() const { return heap_.empty(); }

 private:
  struct Event {
    SimTime time;
    uint64_t seq = 0;
    Action action;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  SimTime now_;
  uint64_t next_seq_ = 0;
};

}  // namespace moe::sim
