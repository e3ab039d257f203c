#include "simulator/event_queue.h"

#include <stdexcept>

namespace moe::sim {

void EventQueue::at(SimTime t, Action action) {
  if (t < now_) throw std::logic_error("event scheduled in the past");
  heap_.push(Event{t, next_seq_++, std::move(action)});
}

uint64_t EventQueue::run() {
  uint64_t executed = 0;
  while (!heap_.empty()) {
    // Copy out before popping: the action may schedule more events.
    Event e = heap_.top();
    heap_.pop();
    now_ = e.time;
    e.action();
    ++executed;
  }
  return executed;
}

}  // namespace moe::sim
