#include "planner/workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

namespace moe {

TEST(Workers, EveryWorkerRunsAndTheFirstExceptionReachesTheCaller) {
  std::atomic<int> ran{0};
  run_workers(4, [&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 4);
  // A throw on a worker thread (which std::thread would turn into std::terminate) comes back
  // to the caller once all have finished; of several, the lowest worker's.
  ran = 0;
  try {
    run_workers(3, [&](int w) {
      ++ran;
      if (w >= 1) throw std::runtime_error("worker " + std::to_string(w));
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "worker 1");
  }
  EXPECT_EQ(ran.load(), 3);
  // The calling thread is worker 0.
  const std::thread::id caller = std::this_thread::get_id();
  run_workers(2, [&](int w) {
    if (w == 0) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
    }
  });
}

}  // namespace moe
