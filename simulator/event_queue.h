// The discrete-event core: a queue of actions ordered by (time, sequence number).
//
// Equal times run in the order they were scheduled, so a run is deterministic. Each simulation
// owns its queue (no global scheduler), as ns-3's Scheduler and SimCpp20 do.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_set>
#include <vector>

#include "simulator/sim_time.h"

namespace moe::sim {

class EventQueue {
 public:
  using Action = std::function<void()>;
  using EventId = uint64_t;

  // Schedules `action` at absolute time `t` (not before now()).
  EventId at(SimTime t, Action action);
  EventId after(SimTime delay, Action action) { return at(now_ + delay, std::move(action)); }
  // A cancelled event neither runs nor moves the clock (a flow whose rate changed drops its old
  // completion, which would otherwise stretch the run's end).
  void cancel(EventId id) { cancelled_.insert(id); }
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
  std::unordered_set<EventId> cancelled_;
  SimTime now_;
  uint64_t next_seq_ = 0;
};

}  // namespace moe::sim
