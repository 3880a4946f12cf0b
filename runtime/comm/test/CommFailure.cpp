//===- CommFailure.cpp - one rank fails, the job must end -----------------===//
//
// Run under mpirun by check_failure.sh. In each mode one rank fails while
// the others wait in a collective that can never complete; the job must end
// with a non-zero status and one line naming the failing rank, not hang.
//
//   error       rank 1 throws a bmrt::Error, reported with abortJob
//   mpi-error   rank 1 receives a message too long for its buffer
//   unreported  rank 1's error escapes the World's scope uncaught
//   kill        rank 1 dies of SIGKILL
//   async       as error, while the others wait for a nonblocking
//               all-reduce (PendingCollective::wait)
//   abandoned   rank 0 drops a nonblocking all-reduce still in flight
//   timeout     rank 1 sleeps past the collective timeout (1 s) before an
//               all-reduce: rank 0's watchdog ends the job
//   stopped     as timeout, but rank 1 stops itself (SIGSTOP): the
//               launcher must end a stopped rank too
//
//===----------------------------------------------------------------------===//

#include "bmrt/Backend.h"
#include "bmrt/Comm.h"
#include "bmrt/Error.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

using namespace bmrt;

namespace {

/// Rank 1 fails as `mode` says; everyone else waits for it.
void run(const std::string &mode, World &world) {
  if (mode == "timeout" || mode == "stopped")
    world.setTimeout(1);
  std::unique_ptr<Device> device = createDevice("cpu");
  Stream &stream = device->computeStream();
  std::unique_ptr<Communicator> all = world.all();
  float values[4] = {1, 2, 3, 4};
  if (mode == "abandoned") {
    if (world.rank() == 0) {
      PendingCollective dropped =
          all->allReduceAsync(values, values, 4, DType::F32, stream);
      return; // its destructor ends the job
    }
    all->allReduce(values, values, 4, DType::F32, stream);
    return;
  }
  if (world.rank() == 1) {
    if (mode == "error" || mode == "unreported" || mode == "async")
      BMRT_FAIL("the data file is truncated");
    if (mode == "mpi-error")
      all->recv(values, 2, DType::F32, 0, stream);
    if (mode == "kill")
      std::raise(SIGKILL);
    if (mode == "stopped")
      std::raise(SIGSTOP); // Open MPI continues it before killing it
    if (mode == "timeout" || mode == "stopped") {
      // Not waiting in an operation: this rank's own watchdog stays quiet.
      std::this_thread::sleep_for(std::chrono::seconds(30));
      all->allReduce(values, values, 4, DType::F32, stream);
      return;
    }
    BMRT_FAIL("unknown mode '" + mode + "'");
  }
  if (mode == "mpi-error" && world.rank() == 0)
    all->send(values, 4, DType::F32, 1, stream);
  if (mode == "async") {
    all->allReduceAsync(values, values, 4, DType::F32, stream).wait();
    return;
  }
  all->allReduce(values, values, 4, DType::F32, stream);
  std::printf("rank %d: the collective completed without rank 1\n",
              world.rank());
}

} // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "unreported") {
    // The mistake World's destructor guards against: the World dies while
    // the error unwinds, before anyone reports it.
    try {
      std::unique_ptr<World> world = createWorld();
      run(mode, *world);
    } catch (const Error &) {
    }
    return 0;
  }
  // The pattern the trainer follows: the World outlives the try.
  std::unique_ptr<World> world;
  try {
    world = createWorld();
    run(mode, *world);
  } catch (const Error &e) {
    abortJob(e.what());
  }
  return 0;
}
