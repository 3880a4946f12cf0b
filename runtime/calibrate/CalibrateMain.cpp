//===- CalibrateMain.cpp - the `bmrt-calibrate` executable ----------------===//
//
// Runs alone or under mpirun. Everything that stops a run reaches the user
// as one line "bmrt-calibrate: error: ..." and a non-zero exit: bad flags
// and an unwritable output on every rank alike before anything is
// measured; a failure while measuring ends the whole job (abortJob).
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"

#include "bmrt/Backend.h"
#include "bmrt/DeviceComm.h"
#include "bmrt/Error.h"
#include "bmrt/Process.h"
#include "bmrt/Tool.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>

namespace {

using namespace bmrt::calibrate;
using Json = nlohmann::ordered_json;

constexpr const char *kProgram = "bmrt-calibrate";

/// Rank 0 opens the output now, so that an unwritable path fails before a
/// minute of measuring; every rank learns whether it did. Returns the error
/// (empty when none).
std::string openOutput(const Options &options, bmrt::Communicator &world,
                       bmrt::Stream &stream, std::ofstream &file) {
  int32_t failed = 0;
  std::string reason;
  if (world.rank() == 0 && !options.output.empty()) {
    errno = 0;
    file.open(options.output);
    failed = file ? 0 : 1;
    reason = errno ? std::string(": ") + std::strerror(errno) : "";
  }
  world.allReduce(&failed, &failed, 1, bmrt::DType::I32, stream);
  return failed ? "cannot write '" + options.output + "'" + reason : "";
}

Json calibrate(Bench &bench) {
  Json out;
  out["format"] = "bmrt-calibration-1";
  bmrt::Communicator &world = bench.world();
  describeMachine(world, bench.stream(), out);
  out["ranks"] = world.size();
  out["threads_per_rank"] = bench.options().threads;
  measureGemm(bench, out);
  measureMemory(bench, out);
  measureKernels(bench, out);
  measureHost(bench, out);
  if (world.size() > 1) {
    bench.progress(std::string("collectives over ") + world.transport() +
                   " communicators");
    measureCollectives(bench, out);
    measureOverlap(bench, out);
  }
  return out;
}

void write(const Json &calibration, const Options &options,
           std::ofstream &file) {
  std::ostream &out = options.output.empty() ? std::cout : file;
  out << calibration.dump(2) << "\n";
  out.flush();
  BMRT_CHECK(out.good(), "writing '" +
                             (options.output.empty() ? "stdout"
                                                     : options.output) +
                             "' failed");
}

/// An error every rank met alike: one line, from rank 0.
int failEverywhere(bmrt::World &world, const std::string &error) {
  return world.rank() == 0 ? bmrt::printError(kProgram, error) : 1;
}

/// Measures and writes; returns non-zero after an error that every rank
/// met alike (one line from rank 0).
int run(const std::vector<std::string> &args, bmrt::World &world) {
  std::optional<Options> options;
  std::string error;
  try {
    options = parseOptions(args);
  } catch (const bmrt::Error &e) {
    error = e.what();
  }
  if (!error.empty() || !options)
    return error.empty() ? 0 : failEverywhere(world, error);
  std::unique_ptr<bmrt::Device> device;
  try {
    device = bmrt::createDevice(options->device, {options->threads, -1});
  } catch (const bmrt::Error &e) {
    return failEverywhere(world, e.what());
  }
  // The collectives measured are the trainer's over that device's memory:
  // NCCL's on GPUs of their own, staged where ranks share one, MPI's on
  // CPUs (bmrt/DeviceComm.h).
  std::unique_ptr<bmrt::Communicator> all =
      bmrt::deviceCommunicator(world.all(), *device);
  std::ofstream file;
  error = openOutput(*options, *all, device->computeStream(), file);
  if (!error.empty())
    return failEverywhere(world, error);
  // Each measurement's repetitions last about this long.
  double target = options->quick ? 0.005 : 0.05;
  Bench bench(*all, *device, *options, target);
  Json calibration = calibrate(bench);
  if (world.rank() == 0)
    write(calibration, *options, file);
  all->barrier();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  bmrt::makeIdleThreadsSleep(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  return bmrt::runWithWorld(
      kProgram, [&](bmrt::World &world) { return run(args, world); });
}
