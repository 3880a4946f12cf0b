//===- Watchdog.cpp - the collective timeout ------------------------------===//
//
// How the job ends when a wait passes the timeout: the watchdog thread
// prints its line, flushes, and calls std::_Exit. Not MPI_Abort, because
// the World runs MPI_THREAD_FUNNELED: only the main thread may call MPI,
// and that thread is at this moment inside MPI, blocked in the wait; a
// second thread entering the library is undefined behaviour and in
// practice may block on the library's locks, leaving the job hung, which is
// what the timeout is there to prevent. Not exit() either: its handlers and
// static destructors would run beside the blocked main thread (MPI's own
// exit hooks among them) and could block the same way. _Exit ends the
// process at once; the launcher then ends the job: Open MPI's mpirun sees a
// rank exit non-zero without MPI_Finalize and kills every other rank
// (SIGTERM, then SIGKILL, which also ends a rank stopped with SIGSTOP).
// Under Slurm's srun that needs --kill-on-bad-exit; without it the other
// ranks still end as their own watchdogs fire, but a stopped rank stays.
// An NCCL backend would end the same way: ncclCommAbort is for a thread
// that goes on, and this one ends the process.
//
//===----------------------------------------------------------------------===//

#include "Watchdog.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

namespace bmrt {

std::atomic<Watchdog *> Watchdog::armed{nullptr};

namespace {

/// Seconds as a message shows them: "600", "0.5"; waits "31", "4.2".
std::string formatSeconds(double seconds, bool waited = false) {
  char text[32];
  if (waited)
    std::snprintf(text, sizeof text, seconds >= 10 ? "%.0f" : "%.1f", seconds);
  else
    std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

/// "one of world ranks 0, 1, 3" (the members but `self`), or a count when
/// the list would be long.
std::string oneOf(const std::vector<int> &worldRanks, int self) {
  std::string list;
  for (int rank : worldRanks)
    if (rank != self)
      list += (list.empty() ? "" : ", ") + std::to_string(rank);
  if (list.empty())
    return "another rank"; // before the World: the launcher did not say
  if (worldRanks.size() > 9)
    return "one of the other " + std::to_string(worldRanks.size() - 1) +
           " ranks";
  return "one of world ranks " + list;
}

} // namespace

Watchdog::Watchdog(double seconds, int worldRank, int worldSize)
    : timeout(seconds), worldRank(worldRank), worldSize(worldSize) {
  BMRT_CHECK(!live(), "a process has one collective watchdog at a time");
  thread = std::thread([this] { watch(); });
  armed.store(this, std::memory_order_release);
}

Watchdog::~Watchdog() {
  armed.store(nullptr, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  thread.join();
}

Watchdog::Wait Watchdog::enter(const WaitSite &site) {
  Wait started{site, Clock::now(), true};
  std::lock_guard<std::mutex> lock(mutex);
  std::swap(current, started);
  return started;
}

void Watchdog::leave(const Wait &outer) {
  std::lock_guard<std::mutex> lock(mutex);
  current = outer;
}

void Watchdog::watch() {
  // About once a second, finer for a short timeout (but not a busy loop):
  // the job ends within a period of the timeout, plus the launcher's time
  // to kill the others.
  auto period = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(timeout / 4, 0.01, 1.0)));
  std::unique_lock<std::mutex> lock(mutex);
  Clock::time_point last = Clock::now();
  while (!wake.wait_for(lock, period, [&] { return stopping; })) {
    Clock::time_point now = Clock::now();
    discountPause(now - last - period, now);
    last = now;
    if (!current.active)
      continue;
    double waited = std::chrono::duration<double>(now - current.since).count();
    if (waited > timeout)
      fire(waited);
  }
}

void Watchdog::discountPause(Clock::duration late, Clock::time_point now) {
  // A wake-up a second or more late means this process did not run
  // (SIGSTOP, a suspended machine): the time is not spent waiting for the
  // others. Without this, a rank stopped inside a collective would, once
  // continued (Open MPI continues a stopped rank before it kills it),
  // blame the ranks that waited for it.
  if (current.active && late >= std::chrono::seconds(1))
    current.since = std::min(now, current.since + late);
}

void Watchdog::fire(double waited) {
  // The lock stays held: the wait's group cannot go away while it is read,
  // and the process ends here (see the file comment for why _Exit).
  printJobError(explain(waited));
  std::_Exit(1);
}

std::string Watchdog::explain(double waited) const {
  const WaitSite &site = current.site;
  const Communicator *group = site.group;
  std::string text = "waited " + formatSeconds(waited, true) + " s in " +
                     site.operation + " over " +
                     (group ? group->name() : std::string("world"));
  if (group)
    text += " (group rank " + std::to_string(group->rank()) + " of " +
            std::to_string(group->size()) + ", call #" +
            std::to_string(site.call) + " of that group)";
  return text + "; " + whoIsMissing() +
         " never arrived -- it stalled, died or waits in another "
         "collective; ending the job (--timeout " +
         formatSeconds(timeout) + ")";
}

std::string Watchdog::whoIsMissing() const {
  const Communicator *group = current.site.group;
  if (!group) {
    std::vector<int> everyone(worldSize);
    std::iota(everyone.begin(), everyone.end(), 0);
    return oneOf(everyone, worldRank);
  }
  // A transfer's peer, or the other member of a pair, is known.
  int peer = current.site.peer;
  if (peer < 0 && group->size() == 2)
    peer = 1 - group->rank();
  const std::vector<int> &members = group->worldRanks();
  if (peer < 0)
    return members.empty()
               ? "one of the other " + std::to_string(group->size() - 1) +
                     " ranks of the group"
               : oneOf(members, worldRank);
  std::string who = current.site.peer >= 0 ? "its peer, rank " : "rank ";
  who += std::to_string(peer) + " of the group";
  if (!members.empty())
    who += " (world rank " + std::to_string(members[peer]) + ")";
  return current.site.peer >= 0 ? who + "," : who;
}

} // namespace bmrt
