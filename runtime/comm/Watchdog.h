//===- Watchdog.h - the collective timeout ----------------------*- C++ -*-===//
//
// A rank that stalls (SIGSTOP, a livelock, a hung device) or dies without
// its launcher noticing leaves the other ranks blocked in a collective
// forever. As PyTorch's NCCL watchdog does, every blocking entry of a
// Communicator records what it waits in (a WaitScope), and one thread per
// process checks about once a second whether the current wait has passed
// the timeout; if so it prints one line naming the operation, the group
// and the rank that never arrived, and ends the process, which makes the
// launcher end the job.
//
// Backend-neutral: the records are made in Comm.cpp around the backends'
// do* calls, so a new backend is watched without a line of its own as long
// as its blocking lies inside them (an NCCL backend: the stream waits of
// its operations and of PendingCollective::wait).
//
// Private to runtime/comm.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COMM_WATCHDOG_H
#define BMRT_COMM_WATCHDOG_H

#include "bmrt/Comm.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace bmrt {

/// Watches the waits of this process's communicating thread. One at a
/// time (the World's); none while no timeout is set, and then a WaitScope
/// costs one atomic load.
class Watchdog {
public:
  using Clock = std::chrono::steady_clock;

  /// A wait in progress.
  struct Wait {
    WaitSite site;
    Clock::time_point since;
    bool active = false;
  };

  Watchdog(double seconds, int worldRank, int worldSize);
  ~Watchdog();
  Watchdog(const Watchdog &) = delete;
  Watchdog &operator=(const Watchdog &) = delete;

  /// The armed watchdog, or null.
  static Watchdog *live() { return armed.load(std::memory_order_acquire); }
  /// Starts a wait at `site`; returns the wait it interrupts (a nested one).
  Wait enter(const WaitSite &site);
  /// Ends the current wait, going back to `outer`.
  void leave(const Wait &outer);

private:
  void watch();
  /// Takes a pause of this process out of the current wait.
  void discountPause(Clock::duration late, Clock::time_point now);
  [[noreturn]] void fire(double waited);
  std::string explain(double waited) const;
  std::string whoIsMissing() const;

  static std::atomic<Watchdog *> armed;
  const double timeout;
  const int worldRank, worldSize;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  Wait current;
  std::thread thread;
};

/// Records, for its lifetime, that this thread waits at `site` (when a
/// watchdog is armed). Scopes nest (a staged communicator's host
/// operation inside its own): the inner one is recorded, and the outer
/// restored when it ends.
class WaitScope {
public:
  explicit WaitScope(const WaitSite &site) : dog(Watchdog::live()) {
    if (dog)
      outer = dog->enter(site);
  }
  ~WaitScope() {
    if (dog)
      dog->leave(outer);
  }
  WaitScope(const WaitScope &) = delete;
  WaitScope &operator=(const WaitScope &) = delete;

private:
  Watchdog *dog;
  Watchdog::Wait outer;
};

/// abortJob's line ("PROGRAM: error: rank R: MESSAGE"), printed at most
/// once per process, after stdout is flushed (Comm.cpp).
void printJobError(const std::string &message);

} // namespace bmrt

#endif // BMRT_COMM_WATCHDOG_H
