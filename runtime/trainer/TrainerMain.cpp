//===- TrainerMain.cpp - the `trainer` executable -------------------------===//
//
// The prebuilt executable `bmc compile` copies into OUT/trainer. Everything
// that stops a run reaches the user as one line "trainer: error: ..." and a
// non-zero exit; nothing crashes or hangs on bad input.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"

#include "bmrt/Error.h"

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

/// A message as one line, whatever it carried.
std::string oneLine(std::string message) {
  for (char &c : message)
    if (c == '\n' || c == '\r')
      c = ' ';
  return message;
}

int failWith(const std::string &message) {
  std::fprintf(stderr, "trainer: error: %s\n", oneLine(message).c_str());
  return 1;
}

} // namespace

/// OpenMP's idle threads spin by default, taking the cores OpenBLAS's own
/// threads need for the GEMM that follows each elementwise kernel (on two
/// cores, a GPT-2 124M step took 6.9 s spinning and 5.5 s passive). libgomp
/// reads the policy when it loads, before main: so the trainer sets it and
/// runs itself again, unless the user chose one.
void makeIdleThreadsSleep(char **argv) {
  if (std::getenv("OMP_WAIT_POLICY"))
    return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::execv("/proc/self/exe", argv);
  // If that fails, run on with spinning threads: slower, not wrong.
}

int main(int argc, char **argv) {
  makeIdleThreadsSleep(argv);
  // A write past a file-size limit (ulimit -f) must fail as an error that
  // keeps the last checkpoint, not kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  // Under mpirun every rank runs this; a rank that fails ends the whole job
  // (abortJob), so that no other rank waits for it forever. The World lives
  // outside the try: it must not be destroyed while an error unwinds.
  std::unique_ptr<bmrt::World> world;
  try {
    world = bmrt::createWorld();
  } catch (const bmrt::Error &e) {
    return failWith(e.what());
  }
  std::string error;
  try {
    auto options = bmrt::parseTrainerOptions(args, selfDirectory(argv[0]));
    if (!options)
      return 0;
    bmrt::runTrainer(*options, *world);
    return 0;
  } catch (const bmrt::Error &e) {
    error = e.what();
  } catch (const std::bad_alloc &) {
    error = "out of host memory";
  } catch (const std::exception &e) {
    error = std::string("internal error: ") + e.what();
  }
  if (world->size() == 1)
    return failWith(error);
  bmrt::abortJob(oneLine(error));
}
