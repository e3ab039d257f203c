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
  using EventId = uint64_t;

  // Schedules `action` at absolute time `t` (not before now()).
  EventId at(SimTime t, Action action);
  EventId after(SimTime delay, Action action) { return at(now_ + delay, std::move(action)); }
  // A cancelled event neither runs nor moves the clock (a flow whose rate changed drops its old
  // completion, which would otherwise stretch the run's end).
  void cancel(EventId id);
  // Runs events until none is left. Returns the number executed.
  uint64_t run();
  SimTime now() const { return now_; }
  bool empty() const { return heap_.empty(); }

 private:
  // The heap orders small keys; actions wait in slots (a heap of std::function moves each
  // action log n times per event).
  struct Key {
    SimTime time;
    uint64_t seq = 0;
    uint32_t slot = 0;
  };
  struct Later {
    bool operator()(const Key& a, const Key& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  struct Slot {
    Action action;
    uint64_t seq = 0;
    bool cancelled = false;
  };
  std::priority_queue<Key, std::vector<Key>, Later> heap_;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  SimTime now_;
  uint64_t next_seq_ = 0;
};

}  // namespace moe::sim
