#include "simulator/event_queue.h"

#include <stdexcept>

namespace moe::sim {

EventQueue::EventId EventQueue::at(SimTime t, Action action) {
  if (t < now_) throw std::logic_error("event scheduled in the past");
  heap_.push(Event{t, next_seq_, std::move(action)});
  return next_seq_++;
}

uint64_t EventQueue::run() {
  uint64_t executed = 0;
  while (!heap_.empty()) {
    // Move out before popping (the heap's order does not read the action): the action may
    // schedule more events.
    Event e = std::move(const_cast<Event&>(heap_.top()));
    heap_.pop();
    if (!cancelled_.empty() && cancelled_.erase(e.seq) > 0) continue;
    now_ = e.time;
    e.action();
    ++executed;
  }
  return executed;
}

}  // namespace moe::sim
