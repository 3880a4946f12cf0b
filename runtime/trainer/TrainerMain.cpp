//===- TrainerMain.cpp - the `trainer` executable -------------------------===//
//
// The prebuilt executable `bmc compile` copies into OUT/trainer. Everything
// that stops a run reaches the user as one line "trainer: error: ..." and a
// non-zero exit; nothing crashes or hangs on bad input.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"

#include "bmrt/Error.h"
#include "bmrt/Process.h"
#include "bmrt/Tool.h"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <climits>
#include <csignal>
#include <cstdlib>
#include <unistd.h>

namespace {

/// The folder of this executable: where `bmc compile` put the program.
std::string selfDirectory(const char *argv0) {
  char buffer[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  std::string path = n > 0 ? std::string(buffer, n) : std::string(argv0);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

} // namespace

int main(int argc, char **argv) {
  bmrt::makeIdleThreadsSleep(argv);
  // A write past a file-size limit (ulimit -f) must fail as an error that
  // keeps the last checkpoint, not kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  // Under mpirun every rank runs this; a rank that fails ends the whole job
  // (abortJob), so that no other rank waits for it forever, and one that
  // stalls or dies silently is caught by the others' --timeout.
  return bmrt::runWithWorld("trainer", [&](bmrt::World &world) {
    auto options = bmrt::parseTrainerOptions(args, selfDirectory(argv[0]));
    if (!options)
      return 0;
    world.setTimeout(options->timeoutSeconds);
    bmrt::runTrainer(*options, world);
    return 0;
  }, bmrt::startTimeoutOf(args));
}
