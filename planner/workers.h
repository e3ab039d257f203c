// Runs a function on several threads and hands back the first exception one of them threw.
//
// An exception that leaves a std::thread's function ends the process (std::terminate); a bad
// layout or an unwritable output file must instead reach the CLI's one-line error.
#pragma once

#include <exception>
#include <thread>
#include <vector>

namespace moe {

// Calls work(w) for w in [0, threads): w = 0 on the calling thread, the rest on their own. Returns
// once all have finished; then rethrows the exception of the lowest w that threw, if any.
template <class Work>
void run_workers(int threads, Work&& work) {
  const int n = threads < 1 ? 1 : threads;
  std::vector<std::exception_ptr> failed(static_cast<size_t>(n));
  auto guarded = [&](int w) {
    try {
      work(w);
    } catch (...) {
      failed[static_cast<size_t>(w)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(n - 1));
  for (int w = 1; w < n; ++w) pool.emplace_back(guarded, w);
  guarded(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
}

}  // namespace moe
