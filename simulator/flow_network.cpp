#include "simulator/flow_network.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace moe::sim {

namespace {
// A flow is done when what is left is below this share of its size (or a millibyte): the
// completion event is rounded up to the next picosecond, so the remainder is rounding noise.
constexpr double kDoneFraction = 1e-9;
}  // namespace

int FlowNetwork::add_link(BytesPerSec capacity) {
  if (!(capacity.value() > 0)) throw std::invalid_argument("link capacity must be positive");
  links_.push_back(capacity.value());
  on_link_.emplace_back();
  link_seen_.push_back(0);
  left_.push_back(0);
  unfrozen_on_.push_back(0);
  return static_cast<int>(links_.size()) - 1;
}

void FlowNetwork::send(std::span<const int> links, Bytes bytes, SimTime latency, Done done,
                       int priority) {
  for (int l : links) {
    if (l < 0 || l >= static_cast<int>(links_.size()))
      throw std::invalid_argument("flow over an unknown link");
  }
  if (!(bytes.value() >= 0) || !std::isfinite(bytes.value()))
    throw std::invalid_argument("flow size must be finite and not negative");
  // Finished flows leave their slot to new ones: a long run keeps only the flows in flight.
  // The slot is filled in place (its links' buffer too): no allocation per flow.
  size_t id = flows_.size();
  if (free_.empty()) {
    flows_.emplace_back();
    flow_seen_.push_back(0);
  } else {
    id = free_.back();
    free_.pop_back();
  }
  Flow& f = flows_[id];
  f.links.assign(links.begin(), links.end());
  if (f.links.size() > 1) {  // mostly one or two links, in order already
    if (!std::is_sorted(f.links.begin(), f.links.end())) std::sort(f.links.begin(), f.links.end());
    f.links.erase(std::unique(f.links.begin(), f.links.end()), f.links.end());
  }
  f.bytes = f.remaining = bytes.value();
  f.rate = 0;
  f.since = SimTime{};
  f.completion.reset();
  f.due = SimTime{};
  f.done = std::move(done);
  f.active = false;
  f.priority = priority;
  sent_ += bytes.value();
  if (latency.ps == 0 && !f.links.empty() && f.remaining > 0) {
    activate(id);  // nothing to wait for, and done cannot run from inside send()
    return;
  }
  queue_.after(latency, [this, id] { activate(id); });
}

size_t FlowNetwork::active_flows() const {
  return active_count_;
}

BytesPerSec FlowNetwork::link_load(int link) const {
  double load = 0;
  for (size_t id : on_link_.at(static_cast<size_t>(link))) load += flows_[id].rate;
  return BytesPerSec(load);
}

void FlowNetwork::activate(size_t id) {
  Flow& f = flows_[id];
  if (f.links.empty() || f.remaining <= 0) {
    delivered_ += f.bytes;
    f.remaining = 0;
    Done done = std::move(f.done);
    free_.push_back(id);
    if (done) done(queue_.now());
    return;
  }
  f.active = true;
  f.since = queue_.now();
  ++active_count_;
  for (int l : f.links) on_link_[static_cast<size_t>(l)].push_back(id);
  resolve_around(std::span<const int>(f.links.data(), f.links.size()));
}

void FlowNetwork::complete(size_t id) {
  Flow& f = flows_[id];
  f.completion.reset();
  const double left = f.remaining - f.rate * to_seconds(queue_.now() - f.since).value();
  if (left > std::max(f.bytes * kDoneFraction, 1e-3)) {
    // Rounding put the event a hair early: come back when the rest has drained.
    f.remaining = left;
    f.since = queue_.now();
    schedule(id);
    return;
  }
  f.active = false;
  f.rate = 0;
  f.remaining = 0;
  --active_count_;
  delivered_ += f.bytes;
  for (int l : f.links) {
    OnLink& on = on_link_[static_cast<size_t>(l)];
    on.erase(std::find(on.begin(), on.end(), id));
  }
  Done done = std::move(f.done);
  // Its links stay in the slot until send() reuses it, which only `done` can call.
  resolve_around(std::span<const int>(f.links.data(), f.links.size()));
  free_.push_back(id);
  if (done) done(queue_.now());
}

void FlowNetwork::resolve_around(std::span<const int> seeds) {
  ++solves_;
  if (resolve_alone(seeds)) return;
  // The connected component: links reached from the seeds through the flows crossing them.
  // Reused buffers: nothing a solve calls solves again.
  std::vector<int>& links = component_links_;
  std::vector<size_t>& members = component_flows_;
  links.clear();
  members.clear();
  for (int l : seeds) {
    if (!link_seen_[static_cast<size_t>(l)]) {
      link_seen_[static_cast<size_t>(l)] = 1;
      links.push_back(l);
    }
  }
  for (size_t next = 0; next < links.size(); ++next) {
    for (size_t id : on_link_[static_cast<size_t>(links[next])]) {
      if (flow_seen_[id]) continue;
      flow_seen_[id] = 1;
      members.push_back(id);
      for (int l : flows_[id].links) {
        if (!link_seen_[static_cast<size_t>(l)]) {
          link_seen_[static_cast<size_t>(l)] = 1;
          links.push_back(l);
        }
      }
    }
  }
  for (int l : links) link_seen_[static_cast<size_t>(l)] = 0;
  for (size_t id : members) flow_seen_[id] = 0;
  if (members.empty()) return;
  // Bring every member to now at its old rate, then fill class by class.
  const SimTime now = queue_.now();
  for (size_t id : members) {
    Flow& f = flows_[id];
    f.remaining = std::max(0.0, f.remaining - f.rate * to_seconds(now - f.since).value());
    f.since = now;
  }
  std::sort(members.begin(), members.end(), [&](size_t a, size_t b) {
    return flows_[a].priority != flows_[b].priority ? flows_[a].priority < flows_[b].priority
                                                    : a < b;
  });
  for (int l : links) left_[static_cast<size_t>(l)] = links_[static_cast<size_t>(l)];
  for (size_t begin = 0; begin < members.size();) {
    size_t end = begin;
    while (end < members.size() && flows_[members[end]].priority == flows_[members[begin]].priority)
      ++end;
    fill(std::span<const size_t>(members).subspan(begin, end - begin), links);
    begin = end;
  }
  for (size_t id : members) schedule(id);
}

bool FlowNetwork::resolve_alone(std::span<const int> seeds) {
  // The seeds' links carry at most one flow between them, and that flow's other links carry it
  // alone: its rate is its narrowest link's capacity (what fill gives a component of one), with
  // no search, sort or filling (most solves in a run of every GPU: a member's own ports).
  size_t only = flows_.size();
  for (int l : seeds) {
    const OnLink& on = on_link_[static_cast<size_t>(l)];
    if (on.empty()) continue;
    if (on.size() > 1 || (only != flows_.size() && on.front() != only)) return false;
    only = on.front();
  }
  if (only == flows_.size()) return true;  // the links are idle now: nothing to re-solve
  Flow& f = flows_[only];
  double rate = std::numeric_limits<double>::infinity();
  for (int l : f.links) {
    if (on_link_[static_cast<size_t>(l)].size() != 1) return false;
    rate = std::min(rate, links_[static_cast<size_t>(l)]);
  }
  const SimTime now = queue_.now();
  f.remaining = std::max(0.0, f.remaining - f.rate * to_seconds(now - f.since).value());
  f.since = now;
  f.rate = rate;
  schedule(only);
  return true;
}

void FlowNetwork::fill(std::span<const size_t> members, const std::vector<int>& links) {
  if (members.size() == 1) {
    // One flow (most solves in a run of every GPU: a member's own ports): the filling's one
    // step, the tightest link's room.
    Flow& f = flows_[members.front()];
    double step = std::numeric_limits<double>::infinity();
    for (int l : f.links) step = std::min(step, std::max(left_[static_cast<size_t>(l)], 0.0));
    f.rate = step;
    for (int l : f.links) left_[static_cast<size_t>(l)] -= step;
    return;
  }
  std::vector<char>& frozen = frozen_;
  frozen.assign(members.size(), 0);
  for (size_t i = 0; i < members.size(); ++i) {
    Flow& f = flows_[members[i]];
    f.rate = 0;
    for (int l : f.links) ++unfrozen_on_[static_cast<size_t>(l)];
  }
  size_t unfrozen = members.size();
  while (unfrozen > 0) {
    // The smallest equal share any link can still give its unfrozen flows.
    double step = std::numeric_limits<double>::infinity();
    for (int l : links) {
      const size_t k = static_cast<size_t>(l);
      if (unfrozen_on_[k] > 0) step = std::min(step, std::max(left_[k], 0.0) / unfrozen_on_[k]);
    }
    for (size_t i = 0; i < members.size(); ++i) {
      if (!frozen[i]) flows_[members[i]].rate += step;
    }
    for (int l : links) {
      const size_t k = static_cast<size_t>(l);
      left_[k] -= step * unfrozen_on_[k];
    }
    // Freeze the flows of every link that is now full. The link that set the step is full by
    // construction; the tolerance only absorbs rounding, and the fallback below guarantees
    // progress if rounding hides it.
    const size_t before = unfrozen;
    for (size_t i = 0; i < members.size(); ++i) {
      if (frozen[i]) continue;
      const Flow& f = flows_[members[i]];
      const bool saturated = std::any_of(f.links.begin(), f.links.end(), [&](int l) {
        return left_[static_cast<size_t>(l)] <= links_[static_cast<size_t>(l)] * 1e-12;
      });
      if (!saturated) continue;
      frozen[i] = 1;
      --unfrozen;
      for (int l : f.links) --unfrozen_on_[static_cast<size_t>(l)];
    }
    if (unfrozen == before) {
      int tightest = -1;
      for (int l : links) {
        const size_t k = static_cast<size_t>(l);
        if (unfrozen_on_[k] > 0 &&
            (tightest < 0 || left_[k] < left_[static_cast<size_t>(tightest)]))
          tightest = l;
      }
      left_[static_cast<size_t>(tightest)] = 0;
    }
  }
}

void FlowNetwork::schedule(size_t id) {
  Flow& f = flows_[id];
  if (!(f.rate > 0)) return;  // starved by a higher class: rescheduled when that one ends
  const SimTime due = queue_.now() + to_sim_time(Seconds(f.remaining / f.rate));
  // A pending completion at or before the new one stays: it finds bytes left and comes back
  // (a long flow slowed by short ones would otherwise leave a cancelled event per change).
  if (f.completion && f.due <= due) return;
  if (f.completion) queue_.cancel(*f.completion);
  f.due = due;
  f.completion = queue_.at(due, [this, id] { complete(id); });
}

}  // namespace moe::sim
