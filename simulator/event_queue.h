// The discrete-event core: a queue of actions ordered by (time, sequence number).
//
// Equal times run in the order they were scheduled, so a run is deterministic. Each simulation
// owns its queue (no global scheduler), as ns-3's Scheduler and SimCpp20 do.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <vector>

#include "simulator/sim_time.h"

namespace moe::sim {

class EventQueue {
 public:
  using Action = std::function<void()>;
  using EventId = uint64_t;

  // Schedules `action` (anything an Action holds) at absolute time `t` (not before now()). The
  // callable is stored straight into its slot: no Action in between to move and destroy.
  template <typename F>
  EventId at(SimTime t, F&& action) {
    const Reserved r = reserve(t);
    slots_[r.slot].action = std::forward<F>(action);
    return r.id;
  }
  template <typename F>
  EventId after(SimTime delay, F&& action) {
    return at(now_ + delay, std::forward<F>(action));
  }
  // A cancelled event neither runs nor moves the clock (a flow whose rate changed drops its old
  // completion, which would otherwise stretch the run's end).
  void cancel(EventId id);
  // Runs events until none is left. Returns the number executed.
  uint64_t run();
  // Calls `tick` after every `events` executed events (progress of a long run; 0 turns it off).
  void tick_every(uint64_t events, Action tick) {
    tick_every_ = tick ? events : 0;
    until_tick_ = tick_every_;
    tick_ = std::move(tick);
  }
  SimTime now() const { return now_; }
  bool empty() const { return heap_.empty(); }

 private:
  // Events at one time wait in a bucket, in the order they were scheduled; the heap holds each
  // pending time once. A run of every GPU schedules most events at a time some other event
  // already has (a stage's GPUs finish the same operator together: 99 % of the 60 M events of
  // the 1,440-GPU run), so they cost an append instead of a heap push and pop.
  struct Later {
    bool operator()(const std::pair<SimTime, uint32_t>& a,
                    const std::pair<SimTime, uint32_t>& b) const {
      return a.first > b.first;
    }
  };
  struct Slot {
    Action action;
    uint64_t seq = 0;
    bool cancelled = false;
  };
  uint32_t bucket_at(SimTime t);  // for a time other than last_time_: found or created
  struct Reserved {
    uint32_t slot;
    EventId id;
  };
  // A slot for an event at `t`, queued in its time's bucket; the caller fills its action.
  Reserved reserve(SimTime t);

  std::priority_queue<std::pair<SimTime, uint32_t>, std::vector<std::pair<SimTime, uint32_t>>,
                      Later>
      heap_;                                         // (time, bucket), each time once
  std::unordered_map<int64_t, uint32_t> bucket_of_;  // time (ps) -> its bucket
  std::vector<std::vector<uint32_t>> buckets_;       // slots, in scheduling order
  std::vector<uint32_t> free_buckets_;
  SimTime last_time_{-1};  // the last time scheduled and its bucket: most lookups hit it
  uint32_t last_bucket_ = 0;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  SimTime now_;
  uint64_t next_seq_ = 0;
  uint64_t tick_every_ = 0, until_tick_ = 0;
  Action tick_;
};

}  // namespace moe::sim
