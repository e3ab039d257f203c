#include "simulator/collectives.h"

namespace moe::sim {

namespace {

struct Ring : std::enable_shared_from_this<Ring> {
  EventQueue& queue;
  FlowNetwork& net;
  std::vector<std::vector<int>> links;
  Bytes chunk;
  SimTime latency;
  std::function<void(SimTime)> done;
  size_t steps_left = 0;
  size_t in_flight = 0;

  Ring(EventQueue& q, FlowNetwork& n) : queue(q), net(n) {}

  void step() {
    if (steps_left == 0) {
      if (done) done(queue.now());
      return;
    }
    --steps_left;
    in_flight = links.size();
    auto self = shared_from_this();
    for (const auto& path : links) {
      net.send(path, chunk, latency, [self](SimTime) {
        if (--self->in_flight == 0) self->step();
      });
    }
  }
};

}  // namespace

void ring_collective(EventQueue& queue, FlowNetwork& net, std::vector<std::vector<int>> rank_links,
                     Bytes total, SimTime step_latency, std::function<void(SimTime)> done) {
  const size_t n = rank_links.size();
  auto ring = std::make_shared<Ring>(queue, net);
  ring->links = std::move(rank_links);
  ring->chunk = n > 0 ? total / static_cast<double>(n) : Bytes(0);
  ring->latency = step_latency;
  ring->done = std::move(done);
  ring->steps_left = n > 1 ? n - 1 : 0;
  ring->step();
}

void alltoall(EventQueue& queue, FlowNetwork& net,
              const std::vector<std::vector<std::vector<int>>>& paths, Bytes per_pair,
              SimTime latency, std::function<void(SimTime)> done) {
  auto left = std::make_shared<size_t>(0);
  auto finish = std::make_shared<std::function<void(SimTime)>>(std::move(done));
  for (size_t i = 0; i < paths.size(); ++i) {
    for (size_t j = 0; j < paths[i].size(); ++j) {
      if (i != j) ++*left;
    }
  }
  if (*left == 0) {
    queue.after(latency, [finish, &queue] {
      if (*finish) (*finish)(queue.now());
    });
    return;
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    for (size_t j = 0; j < paths[i].size(); ++j) {
      if (i == j) continue;
      net.send(paths[i][j], per_pair, latency, [left, finish](SimTime t) {
        if (--*left == 0 && *finish) (*finish)(t);
      });
    }
  }
}

}  // namespace moe::sim
