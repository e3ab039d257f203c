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
  return static_cast<int>(links_.size()) - 1;
}

void FlowNetwork::send(std::vector<int> links, Bytes bytes, SimTime latency, Done done,
                       int priority) {
  for (int l : links) {
    if (l < 0 || l >= static_cast<int>(links_.size()))
      throw std::invalid_argument("flow over an unknown link");
  }
  if (!(bytes.value() >= 0) || !std::isfinite(bytes.value()))
    throw std::invalid_argument("flow size must be finite and not negative");
  Flow f;
  f.links = std::move(links);
  f.bytes = f.remaining = bytes.value();
  f.done = std::move(done);
  f.priority = priority;
  sent_ += bytes.value();
  // Finished flows leave their slot to new ones: a long run keeps only the flows in flight.
  size_t id = flows_.size();
  if (free_.empty()) {
    flows_.push_back(std::move(f));
  } else {
    id = free_.back();
    free_.pop_back();
    flows_[id] = std::move(f);
  }
  if (latency.ps == 0 && !flows_[id].links.empty() && flows_[id].remaining > 0) {
    activate(id);  // nothing to wait for, and done cannot run from inside send()
    return;
  }
  queue_.after(latency, [this, id] { activate(id); });
}

size_t FlowNetwork::active_flows() const {
  return active_.size();
}

BytesPerSec FlowNetwork::link_load(int link) const {
  double load = 0;
  for (size_t id : active_) {
    const Flow& f = flows_[id];
    if (std::find(f.links.begin(), f.links.end(), link) != f.links.end()) load += f.rate;
  }
  return BytesPerSec(load);
}

void FlowNetwork::activate(size_t id) {
  drain();
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
  active_.push_back(id);
  solve();
  schedule_next();
}

void FlowNetwork::drain() {
  const double dt = to_seconds(queue_.now() - last_drain_).value();
  last_drain_ = queue_.now();
  if (dt <= 0) return;
  for (size_t id : active_) {
    Flow& f = flows_[id];
    f.remaining = std::max(0.0, f.remaining - f.rate * dt);
  }
}

void FlowNetwork::solve() {
  ++solves_;
  std::vector<double> left = links_;
  std::vector<int> classes;
  for (size_t id : active_) classes.push_back(flows_[id].priority);
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  for (int cls : classes) {
    std::vector<size_t> members;
    for (size_t id : active_) {
      if (flows_[id].priority == cls) members.push_back(id);
    }
    fill(members, left);
  }
}

void FlowNetwork::fill(const std::vector<size_t>& members, std::vector<double>& left) {
  std::vector<int> unfrozen_on(links_.size(), 0);
  std::vector<char> frozen(members.size(), 0);
  for (size_t i = 0; i < members.size(); ++i) {
    Flow& f = flows_[members[i]];
    f.rate = 0;
    for (int l : f.links) ++unfrozen_on[l];
  }
  size_t unfrozen = members.size();
  while (unfrozen > 0) {
    // The smallest equal share any link can still give its unfrozen flows.
    double step = std::numeric_limits<double>::infinity();
    for (size_t l = 0; l < links_.size(); ++l) {
      if (unfrozen_on[l] > 0) step = std::min(step, std::max(left[l], 0.0) / unfrozen_on[l]);
    }
    for (size_t i = 0; i < members.size(); ++i) {
      if (!frozen[i]) flows_[members[i]].rate += step;
    }
    for (size_t l = 0; l < links_.size(); ++l) left[l] -= step * unfrozen_on[l];
    // Freeze the flows of every link that is now full. The link that set the step is full by
    // construction; the tolerance only absorbs rounding, and the fallback below guarantees
    // progress if rounding hides it.
    const size_t before = unfrozen;
    for (size_t i = 0; i < members.size(); ++i) {
      if (frozen[i]) continue;
      const Flow& f = flows_[members[i]];
      const bool saturated = std::any_of(f.links.begin(), f.links.end(),
                                         [&](int l) { return left[l] <= links_[l] * 1e-12; });
      if (!saturated) continue;
      frozen[i] = 1;
      --unfrozen;
      for (int l : f.links) --unfrozen_on[l];
    }
    if (unfrozen == before) {
      size_t tightest = 0;
      for (size_t l = 0; l < links_.size(); ++l) {
        if (unfrozen_on[l] > 0 && (unfrozen_on[tightest] == 0 || left[l] < left[tightest]))
          tightest = l;
      }
      left[tightest] = 0;
    }
  }
}

void FlowNetwork::schedule_next() {
  double soonest = std::numeric_limits<double>::infinity();
  for (size_t id : active_) {
    const Flow& f = flows_[id];
    if (f.rate > 0) soonest = std::min(soonest, f.remaining / f.rate);
  }
  if (!std::isfinite(soonest)) return;
  const uint64_t generation = ++generation_;
  queue_.after(to_sim_time(Seconds(soonest)), [this, generation] {
    if (generation == generation_) complete_due();
  });
}

void FlowNetwork::complete_due() {
  drain();
  std::vector<Done> finished;
  std::vector<size_t> still;
  for (size_t id : active_) {
    Flow& f = flows_[id];
    if (f.remaining <= std::max(f.bytes * kDoneFraction, 1e-3)) {
      f.active = false;
      f.rate = 0;
      delivered_ += f.bytes;
      finished.push_back(std::move(f.done));
      free_.push_back(id);
    } else {
      still.push_back(id);
    }
  }
  active_ = std::move(still);
  solve();
  schedule_next();
  for (Done& d : finished) {
    if (d) d(queue_.now());
  }
}

}  // namespace moe::sim
