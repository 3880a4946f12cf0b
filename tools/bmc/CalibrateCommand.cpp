//===- CalibrateCommand.cpp - `bmc calibrate [-np N] -o cluster.yaml` -----===//
//
// Measures this machine (or the ranks mpirun gives it) for the planner: runs
// the runtime's bmrt-calibrate, which times the trainer's own kernels and
// communicator, and writes what it measured as a cluster file that
// `--cluster` reads (cost/Measurements.h).
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"

#include "cost/Measurements.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <thread>
#include <unistd.h>

using namespace bmc;
using llvm::StringRef;

namespace {

constexpr StringRef kHelp = R"(USAGE: bmc calibrate [-np N] -o mycluster.yaml [options]

Measures what the planner's cost model uses, with the runtime's own kernels
and communicator: the GEMM rate over a grid of shapes, memory bandwidth, the
rate of each class of memory-bound kernel, and the time, bus bandwidth and
latency of every collective over message sizes (nccl-tests' definitions) for
N ranks started by mpirun, and how much of a gradient all-reduce hides
behind compute. Writes a cluster file for `bmc plan --cluster` with the
measured curves, the machine, the date and the library versions. Takes a
minute or two; progress goes to stderr.

OPTIONS:
  -o FILE           the cluster file to write (YAML; required)
  -np N             ranks to measure with (default 1: no collectives)
  --threads T       threads per rank, as the trainer's --threads (default 1)
  --quick           a small grid and few sizes (seconds; for tests)
  --mpirun PATH     the MPI launcher (default: mpirun on PATH)
  --keep-json FILE  also keep bmrt-calibrate's raw measurements
  --help            print this help
)";

struct CalibrateArgs {
  std::string output, threads = "1", mpirun = "mpirun", keepJson;
  int ranks = 1;
  bool quick = false;
};

std::optional<int> parseArgs(llvm::ArrayRef<StringRef> args,
                             CalibrateArgs &out) {
  ArgCursor cursor("calibrate", args);
  while (!cursor.done()) {
    if (cursor.takeSwitch("--help") || cursor.takeSwitch("-h")) {
      llvm::outs() << kHelp;
      return 0;
    }
    if (cursor.takeSwitch("--quick")) {
      out.quick = true;
      continue;
    }
    std::optional<std::string> value;
    StringRef flag = cursor.takeAnyFlag(
        {"-o", "-np", "--threads", "--mpirun", "--keep-json"}, value);
    if (flag.empty())
      return cursor.isOption()
                 ? cursor.unknownOption()
                 : fail("bmc calibrate takes no positional arguments, got '" +
                        cursor.peek() + "'");
    if (cursor.error)
      return fail(*cursor.error);
    unsigned number = 0;
    if ((flag == "-np" || flag == "--threads") &&
        (StringRef(*value).getAsInteger(10, number) || number < 1 ||
         number > 4096))
      return fail(flag + " must be a count from 1 to 4096, got '" + *value +
                  "'");
    if (flag == "-o")
      out.output = *value;
    else if (flag == "-np")
      out.ranks = static_cast<int>(number);
    else if (flag == "--threads")
      out.threads = *value;
    else if (flag == "--mpirun")
      out.mpirun = *value;
    else
      out.keepJson = *value;
  }
  if (out.output.empty())
    return fail("bmc calibrate needs an output file: -o mycluster.yaml");
  return std::nullopt;
}

/// The command line: bmrt-calibrate alone, or under mpirun with N ranks
/// (as root OpenMPI needs --allow-run-as-root; more ranks than cores need
/// --oversubscribe).
llvm::Expected<std::vector<std::string>>
commandLine(const CalibrateArgs &args, const std::string &tool,
            const std::string &json) {
  std::vector<std::string> command;
  if (args.ranks > 1) {
    llvm::ErrorOr<std::string> mpirun = llvm::sys::findProgramByName(args.mpirun);
    if (!mpirun)
      return llvm::createStringError(
          "-np " + std::to_string(args.ranks) + " needs '" + args.mpirun +
          "', which is not on PATH (install OpenMPI or give --mpirun)");
    command = {*mpirun, "-np", std::to_string(args.ranks)};
    if (geteuid() == 0)
      command.push_back("--allow-run-as-root");
    if (static_cast<unsigned>(args.ranks) > std::thread::hardware_concurrency())
      command.push_back("--oversubscribe");
  }
  command.insert(command.end(), {tool, "-o", json, "--threads", args.threads});
  if (args.quick)
    command.push_back("--quick");
  return command;
}

/// Runs the measuring tool; its JSON.
llvm::Expected<std::string> measure(const CalibrateArgs &args) {
  std::string tool = toolBesideBmc("bmrt-calibrate");
  if (!llvm::sys::fs::exists(tool))
    return llvm::createStringError("the measuring tool '" + tool +
                                   "' is missing; build the bmrt-calibrate "
                                   "target");
  llvm::SmallString<128> json;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("bmc-calibrate", "json", json))
    return llvm::createStringError("cannot create a temporary file: " +
                                   ec.message());
  llvm::FileRemover remover(json);
  auto command = commandLine(args, tool, json.str().str());
  if (!command)
    return command.takeError();
  std::vector<StringRef> argv(command->begin(), command->end());
  std::string error;
  // stdout and stderr stay the terminal's: the progress lines show.
  int rc = llvm::sys::ExecuteAndWait(argv[0], argv, std::nullopt, {}, 0, 0,
                                     &error);
  if (rc != 0)
    return llvm::createStringError(
        "measuring failed (" +
        (error.empty() ? "exit code " + std::to_string(rc) : error) +
        "): " + llvm::join(argv, " "));
  auto buffer = llvm::MemoryBuffer::getFile(json);
  if (!buffer)
    return llvm::createStringError("bmrt-calibrate wrote no measurements: " +
                                   buffer.getError().message());
  return (*buffer)->getBuffer().str();
}

} // namespace

int bmc::runCalibrate(llvm::ArrayRef<StringRef> args) {
  CalibrateArgs parsed;
  if (std::optional<int> done = parseArgs(args, parsed))
    return *done;
  // Fail on an unwritable output before a minute of measuring.
  if (int rc = writeFile(parsed.output, [](llvm::raw_ostream &) {}))
    return rc;
  llvm::Expected<std::string> json = measure(parsed);
  if (json && !parsed.keepJson.empty())
    if (int rc = writeFile(parsed.keepJson,
                           [&](llvm::raw_ostream &os) { os << *json; }))
      return rc;
  llvm::Expected<bm::cost::Cluster> cluster =
      json ? bm::cost::clusterFromMeasurements(*json,
                                               "bmrt-calibrate's measurements")
           : json.takeError();
  if (!cluster) {
    llvm::sys::fs::remove(parsed.output);
    return fail(llvm::toString(cluster.takeError()));
  }
  if (int rc = writeFile(parsed.output, [&](llvm::raw_ostream &os) {
        os << bm::cost::writeClusterYaml(*cluster);
      }))
    return rc;
  llvm::errs() << "calibrated " << cluster->name << " (" << parsed.ranks
               << " rank(s)) into " << parsed.output << "\n";
  return 0;
}
