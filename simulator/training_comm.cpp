// Communication of a simulated run: collectives joined by their whole group and expanded into
// flows, the DP stream's queue and the optimizer step behind it, and the per-GPU stream hooks
// that account links and memory.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "simulator/port_loads.h"
#include "simulator/training_run.h"

namespace moe::sim::training {

// Queues a data-parallel collective on the GPU's DP stream; `then` runs when it lands.
// `across` false keeps it on NVLink even when the stage's DP group crosses nodes.
void Training::dp_async(int64_t g, const char* name, Seconds time, std::function<void()> then,
                        bool across) {
  GpuState& x = gpus_[static_cast<size_t>(g)];
  if (time.value() <= 0) {
    // Nothing to move: runs once what is queued before it has landed (FIFO like the rest).
    if (!then) return;
    if (!x.dp_busy && x.dp_queue.empty()) {
      then();
      return;
    }
  }
  const bool nic = across && stages_[static_cast<size_t>(x.stage)].sync.crosses_nodes;
  x.dp_queue.push_back({name, time, nic, std::move(then)});
  dp_next(g);
}

void Training::dp_next(int64_t g) {
  GpuState& x = gpus_[static_cast<size_t>(g)];
  if (x.dp_busy || x.dp_queue.empty()) return;
  DpCollective next = std::move(x.dp_queue.front());
  x.dp_queue.pop_front();
  if (next.time.value() <= 0) {  // an empty stage that only orders its `then`
    if (next.then) next.then();
    dp_next(g);
    maybe_step(g);
    return;
  }
  x.dp_busy = true;
  const StageState& st = stages_[static_cast<size_t>(x.stage)];
  const Task t = comm_task(st, next.name, kDpStream, next.time, next.nic);
  const SimTime start = queue_->now();
  link_activity(x, t, +1);
  auto landed = [this, g, t, start, then = std::move(next.then)] {
    GpuState& y = gpus_[static_cast<size_t>(g)];
    link_activity(y, t, -1);
    if (o_.record_trace && y.local == 0)
      report_.spans.push_back({y.stage, "dp", t.name, offset_ + start, offset_ + queue_->now()});
    y.dp_busy = false;
    if (then) then();
    dp_next(g);
    maybe_step(g);
  };
  if (every_gpu()) {
    join(g, {x.stage, -1, x.dp_serial++, kDpStream, x.group[kDpStream]}, t, 1.0, std::move(landed));
  } else {
    net_->send(
        t.links, t.bytes, t.latency, [landed = std::move(landed)](SimTime) { landed(); },
        t.priority);
  }
}

// A member reaches a collective of its group; the flows start when the whole group is there.
void Training::join(int64_t g, CollectiveKey key, const Task& t, double ratio,
                    std::function<void()> done) {
  const GpuState& x = gpus_[static_cast<size_t>(g)];
  const int size = group_size_[t.stream] > 0 ? static_cast<int>(group_size_[t.stream]) : 1;
  std::get<4>(key) = size > 1 ? x.group[t.stream] : x.local;
  // A group's members arrive one after another (start_collectives starts them in a row), so
  // the collective the last call joined is most often this one: no map lookup.
  if (!last_joined_ || last_key_ != key) {
    auto it = joining_.find(key);
    if (it == joining_.end()) {
      // A map node (and its members' buffer) from a collective that has gone: tens of
      // thousands of collectives an iteration then cost no allocation each.
      if (spare_nodes_.empty()) {
        it = joining_.try_emplace(key).first;
      } else {
        auto node = std::move(spare_nodes_.back());
        spare_nodes_.pop_back();
        node.key() = key;
        node.mapped().members.clear();
        it = joining_.insert(std::move(node)).position;
      }
    }
    last_joined_ = &it->second;
    last_key_ = key;
  }
  Joining& j = *last_joined_;
  if (j.members.empty()) j.members.reserve(static_cast<size_t>(size));
  j.priority = t.priority;
  j.members.push_back({g, ratio, std::move(done)});
  if (static_cast<int>(j.members.size()) < size) return;
  ++report_.collectives;
  // From here its flows' callbacks hold it by a raw pointer, which std::function stores
  // inline (a shared_ptr would cost a heap block per flow); the last to land hands it back.
  Joining* shared = nullptr;
  if (landing_free_.empty()) {
    landing_.push_back(std::make_unique<Joining>());
    shared = landing_.back().get();
  } else {
    shared = landing_free_.back();
    landing_free_.pop_back();
  }
  // The landed collective's buffer goes back with the node.
  std::swap(*shared, j);
  spare_nodes_.push_back(joining_.extract(key));
  last_joined_ = nullptr;
  std::sort(shared->members.begin(), shared->members.end(),
            [](const Member& a, const Member& b) { return a.gpu < b.gpu; });  // rank order
  const bool across = on_nic(x, t);
  // A member's ports that carry the same bytes share one flow over all of them (under
  // balanced routing, out and in alike): its rate is the most contended port's share, which
  // is what the slower of separate flows would get, and the collective lands at the same
  // time with a quarter of the flows and events. Skew splits them.
  auto& flows = flows_scratch_;  // send() calls nothing back: no join runs inside this one
  flows.clear();
  if (shared->members.size() < 2) {
    // A group of one (a size-1 TP, CP or EP communicator) moves nothing; its task still lands
    // through the network so that it ends as an event.
    const GpuState& y = gpus_[static_cast<size_t>(shared->members.front().gpu)];
    const Bytes bytes = t.bytes * shared->members.front().weight;
    flows.push_back({{across ? y.nic_out : y.nvlink_out}, bytes});
    (across ? report_.nic_bytes : report_.nvlink_bytes) += bytes;
  } else {
    std::vector<PortMember>& ports = ports_scratch_;
    ports.clear();
    for (const Member& mb : shared->members) {
      const GpuState& y = gpus_[static_cast<size_t>(mb.gpu)];
      ports.push_back({y.node, y.rail, t.bytes, mb.weight});
    }
    const std::vector<PortLoad> loads =
        port_loads(t.exchange, ports, across, o_.pxn, remote_peers_[t.stream]);
    for (size_t i = 0; i < loads.size(); ++i) {
      const GpuState& y = gpus_[static_cast<size_t>(shared->members[i].gpu)];
      const PortLoad& l = loads[i];
      report_.nvlink_bytes += l.nvlink_out;
      report_.nic_bytes += l.nic_out;
      const size_t first = flows.size();
      for (const auto& port :
           {std::pair{y.nvlink_out, l.nvlink_out}, std::pair{y.nvlink_in, l.nvlink_in},
            std::pair{y.nic_out, l.nic_out}, std::pair{y.nic_in, l.nic_in}}) {
        const int link = port.first;
        const Bytes bytes = port.second;  // a plain local: lambdas may not capture bindings
        if (bytes.value() <= 0) continue;
        auto same = std::find_if(flows.begin() + static_cast<std::ptrdiff_t>(first), flows.end(),
                                 [&](const auto& f) { return f.second == bytes; });
        if (same == flows.end()) {
          flows.emplace_back();  // in place: a pair built aside and moved in cost more
          flows.back().first.push_back(link);
          flows.back().second = bytes;
        } else {
          same->first.push_back(link);
        }
      }
    }
  }
  report_.flows += flows.size();
  if (flows.empty()) flows.push_back({{}, Bytes(0)});  // lands as an event, not re-entrantly
  shared->flows_left = flows.size();
  for (const auto& [links, bytes] : flows) {
    net_->send(
        links, bytes, t.latency,
        [this, shared](SimTime) {
          if (--shared->flows_left > 0) return;
          // Handed back after the members go on: their next collectives take another.
          for (Member& done : shared->members) done.done();
          landing_free_.push_back(shared);
        },
        shared->priority);
  }
}

// The optimizer step, once every GPU's passes are done and its gradients reduced: Megatron's
// step all-reduces the gradients' norm over every rank first (clip_grad; with PP, the pipeline's
// other stages too), so a stage that finishes its backward early waits for the drain behind it
// (one micro-batch over four uneven stages: 12 % of the iteration when it did not).
void Training::maybe_step(int64_t g) {
  GpuState& x = gpus_[static_cast<size_t>(g)];
  if (!x.optimizer_waiting || x.dp_busy || !x.dp_queue.empty()) return;
  x.optimizer_waiting = false;
  if (++ready_to_step_ < static_cast<int64_t>(gpus_.size())) return;
  for (GpuState& y : gpus_) {
    Task step;
    step.name = "optimizer step";
    step.duration = to_sim_time(stages_[static_cast<size_t>(y.stage)].sync.optimizer);
    y.refs.reset();  // the step is not a layer operator: it runs at its own duration
    y.gpu->run(std::vector<Task>{step}, [] {});
  }
}

StreamHooks Training::stream_hooks(int64_t g) {
  StreamHooks h;
  h.on_start = [this, g](const Task& t) {
    GpuState& x = gpus_[static_cast<size_t>(g)];
    link_activity(x, t, +1);
    if (t.tag == 0) return SimTime{};
    const StageState& st = stages_[static_cast<size_t>(x.stage)];
    const MemAction& a = st.actions[static_cast<size_t>(t.tag - 1)];
    const Bytes alloc = own_bytes(x, a, a.alloc);
    if (alloc.value() <= 0) return SimTime{};
    x.current += alloc;
    x.peak = std::max(x.peak, x.current);
    sample_memory(x);
    if (x.current > capacity_) {
      ++report_.oom_count;
      if (report_.ooms.size() < o_.max_oom_events) {
        report_.ooms.push_back({iteration_, x.stage, a.layer, a.micro, x.local, 1, a.chunks, t.name,
                                x.current, capacity_});
      }
      return SimTime{};
    }
    if (x.current <= capacity_ * o_.alpha) return SimTime{};
    // Past the budget but inside the GPU: the caching allocator frees its cache and retries.
    ++report_.allocator_retries;
    return allocator_retry_;
  };
  // Both hooks pass over a compute task with no memory action unless its span is traced.
  h.every_task = o_.record_trace;
  h.on_end = [this, g](const Task& t, SimTime start, SimTime end) {
    GpuState& x = gpus_[static_cast<size_t>(g)];
    link_activity(x, t, -1);
    if (o_.record_trace && x.local == 0) {
      if (report_.spans.size() < o_.max_trace_spans) {
        report_.spans.push_back(
            {x.stage, stream_name(t.stream), t.name, offset_ + start, offset_ + end});
      } else {
        report_.trace_truncated = true;
      }
    }
    if (t.tag == 0) return;
    const StageState& st = stages_[static_cast<size_t>(x.stage)];
    const MemAction& a = st.actions[static_cast<size_t>(t.tag - 1)];
    const Bytes release = own_bytes(x, a, a.release);
    if (release.value() <= 0) return;
    x.current -= release;
    sample_memory(x);
  };
  if (every_gpu()) {
    h.duration = [this, g](uint32_t id, const Task& t) {
      const double r = ratio(gpus_[static_cast<size_t>(g)], id);
      return r == 1.0 ? t.duration : to_sim_time(to_seconds(t.duration) * r);
    };
    h.communicate = [this, g](uint32_t id, const Task& t, std::function<void()> done) {
      const GpuState& x = gpus_[static_cast<size_t>(g)];
      const StageState& st = stages_[static_cast<size_t>(x.stage)];
      join(g, {x.stage, st.pass_serial, id, t.stream, 0}, t, ratio(x, id), std::move(done));
    };
    h.caller_started.assign(kStreams, false);
    for (int k : kGroupStreams) h.caller_started[k] = true;
    h.on_ready = [this, g](uint32_t id, const Task& t) {
      auto& ready = gpus_[static_cast<size_t>(g)].ready_collectives[t.stream];
      const std::pair<int, uint32_t> key{t.rank, id};
      ready.insert(std::lower_bound(ready.begin(), ready.end(), key), key);
      start_collectives(g, t.stream);
    };
    h.on_free = [this, g](int stream) { start_collectives(g, stream); };
  }
  return h;
}

// Starts, on every member at once, the first collective of GPU g's group on `stream` that all
// members have ready while their streams are free. A collective never holds a member while
// it waits for another, so GPUs that run ahead (lighter experts) cannot deadlock with the
// ones behind, and each group issues its collectives in one order.
void Training::start_collectives(int64_t g, int stream) {
  GpuState& x = gpus_[static_cast<size_t>(g)];
  const std::vector<int64_t>& peers = *x.peers[stream];
  int64_t& held_by = x.held_by[stream];
  for (const auto& ready : x.ready_collectives[stream]) {
    const std::pair<int, uint32_t> key = ready;  // erased below
    auto has_it_ready = [&](int64_t p) {
      const GpuState& y = gpus_[static_cast<size_t>(p)];
      const auto& ready = y.ready_collectives[stream];
      return y.gpu->stream_free(stream) && std::binary_search(ready.begin(), ready.end(), key);
    };
    if (held_by >= 0 && !has_it_ready(held_by)) continue;
    const auto missing = std::find_if_not(peers.begin(), peers.end(), has_it_ready);
    if (missing != peers.end()) {
      held_by = *missing;
      continue;
    }
    for (int64_t p : peers) {
      auto& ready = gpus_[static_cast<size_t>(p)].ready_collectives[stream];
      ready.erase(std::lower_bound(ready.begin(), ready.end(), key));
    }
    for (int64_t p : peers) gpus_[static_cast<size_t>(p)].gpu->start(key.second);
    return;
  }
}

void Training::link_activity(GpuState& x, const Task& t, int delta) {
  if (!t.links.empty()) link_activity(x, on_nic(x, t), delta);
}

void Training::link_activity(GpuState& x, bool nic, int delta) {
  int& active = nic ? x.active_nic : x.active_nvlink;
  SimTime& since = nic ? x.nic_since : x.nvlink_since;
  const SimTime now = queue_->now();
  if (o_.record_trace && x.local == 0) {
    report_.links.push_back({x.stage, nic, offset_ + now, active + delta});
  }
  if (delta > 0 && active++ == 0) since = now;
  if (delta < 0 && --active == 0) {
    StageReport& r = report_.stages[static_cast<size_t>(x.stage)];
    (nic ? r.nic_busy : r.nvlink_busy) +=
        to_seconds(now - since) * (1.0 / static_cast<double>(per_stage_));
  }
}

void Training::sample_memory(const GpuState& x) {
  if (!o_.record_trace || x.local != 0) return;
  const SimTime now = queue_ ? queue_->now() : SimTime{};
  report_.memory.push_back({x.stage, offset_ + now, x.current});
}

int Training::priority_of(int stream) const {
  if (!o_.comm_priorities) return 0;
  switch (stream) {
    case kCpStream:
      return 2;
    case kDpStream:
      return 3;
    default:
      return 0;  // EP and TP first
  }
}

// A communication task of `time` on the link its group crosses: sized so that alone it takes
// exactly the planner's time, `latency` of it waited out before its bytes start.
Task Training::comm_task(const StageState& st, const char* name, int stream, Seconds time, bool nic,
                         Exchange exchange, Seconds latency) {
  if (!std::isfinite(time.value()) || time.value() < 0)
    throw std::logic_error(std::string("communication '") + name + "' has no finite time");
  latency = std::clamp(latency, Seconds(0), time);
  time -= latency;
  Task t;
  t.name = name;
  t.stream = stream;
  const GpuState& first = gpus_[static_cast<size_t>(st.first_gpu)];
  t.links = {nic ? first.nic_out : first.nvlink_out};
  t.bytes = Bytes(time.value() * (nic ? ctx_.links.inter : ctx_.links.intra).value());
  t.priority = priority_of(stream);
  t.exchange = exchange;
  t.latency = to_sim_time(latency);
  return t;
}

}  // namespace moe::sim::training
