#include "simulator/event_queue.h"

#include <stdexcept>

namespace moe::sim {

// An EventId is the slot (low 32 bits) and the sequence number's low 32 bits: a slot is reused
// once its event has run, and a stale id then names another sequence number.
EventQueue::EventId EventQueue::at(SimTime t, Action action) {
  if (t < now_) throw std::logic_error("event scheduled in the past");
  uint32_t slot = 0;
  if (free_slots_.empty()) {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  const uint64_t seq = next_seq_++;
  slots_[slot] = Slot{std::move(action), seq, false};
  heap_.push(Key{t, seq, slot});
  return ((seq & 0xffffffffu) << 32) | slot;
}

void EventQueue::cancel(EventId id) {
  Slot& s = slots_.at(static_cast<uint32_t>(id & 0xffffffffu));
  if ((s.seq & 0xffffffffu) == (id >> 32) && s.action) s.cancelled = true;
}

uint64_t EventQueue::run() {
  uint64_t executed = 0;
  while (!heap_.empty()) {
    const Key k = heap_.top();
    heap_.pop();
    Slot& s = slots_[k.slot];
    // Move the action out and free its slot first: it may schedule more events.
    Action action = std::move(s.action);
    s.action = nullptr;
    const bool cancelled = s.cancelled;
    free_slots_.push_back(k.slot);
    if (cancelled) continue;
    now_ = k.time;
    action();
    ++executed;
  }
  return executed;
}

}  // namespace moe::sim
