#include "simulator/event_queue.h"

#include <stdexcept>

namespace moe::sim {

uint32_t EventQueue::bucket_at(SimTime t) {
  auto [it, added] = bucket_of_.try_emplace(t.ps, 0);
  if (added) {
    if (free_buckets_.empty()) {
      it->second = static_cast<uint32_t>(buckets_.size());
      buckets_.emplace_back();
    } else {
      it->second = free_buckets_.back();
      free_buckets_.pop_back();
    }
    heap_.push({t, it->second});
  }
  last_time_ = t;
  last_bucket_ = it->second;
  return it->second;
}

// An EventId is the slot (low 32 bits) and the sequence number's low 32 bits: a slot is reused
// once its event has run, and a stale id then names another sequence number.
EventQueue::Reserved EventQueue::reserve(SimTime t) {
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
  Slot& s = slots_[slot];
  s.seq = seq;
  s.cancelled = false;
  // Most events go to the time scheduled last: its bucket without a call.
  buckets_[t == last_time_ ? last_bucket_ : bucket_at(t)].push_back(slot);
  return {slot, ((seq & 0xffffffffu) << 32) | slot};
}

void EventQueue::cancel(EventId id) {
  Slot& s = slots_.at(static_cast<uint32_t>(id & 0xffffffffu));
  if ((s.seq & 0xffffffffu) == (id >> 32) && s.action) s.cancelled = true;
}

uint64_t EventQueue::run() {
  uint64_t executed = 0;
  while (!heap_.empty()) {
    const auto [time, bucket] = heap_.top();
    // Events this one schedules at the same time join the bucket's end (an index, not an
    // iterator: the vector may grow).
    for (size_t i = 0; i < buckets_[bucket].size(); ++i) {
      const uint32_t slot = buckets_[bucket][i];
      Slot& s = slots_[slot];
      // Move the action out and free its slot first: it may schedule more events.
      Action action = std::move(s.action);
      s.action = nullptr;
      const bool cancelled = s.cancelled;
      free_slots_.push_back(slot);
      if (cancelled || !action) continue;  // empty: its callable threw while being stored
      now_ = time;
      action();
      ++executed;
      if (until_tick_ != 0 && --until_tick_ == 0) {  // a countdown: no division per event
        until_tick_ = tick_every_;
        tick_();
      }
    }
    heap_.pop();
    bucket_of_.erase(time.ps);
    if (last_time_ == time) last_time_ = SimTime{-1};
    buckets_[bucket].clear();
    free_buckets_.push_back(bucket);
  }
  return executed;
}

}  // namespace moe::sim
