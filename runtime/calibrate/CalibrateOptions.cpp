//===- CalibrateOptions.cpp - the flags of bmrt-calibrate -----------------===//

#include "Calibrate.h"

#include "bmrt/Error.h"
#include "bmrt/Tool.h"

#include <cstdio>

namespace bmrt::calibrate {
namespace {

const char *const kHelp = R"(usage: bmrt-calibrate [options]
       mpirun -np N bmrt-calibrate [options]

Measures this machine with the runtime's own kernels and communicator and
writes JSON (format bmrt-calibration-1) for `bmc calibrate`: GEMM rates over
a grid of shapes, memory and kernel-class bandwidths, and under mpirun the
collectives' bus bandwidth by message size and how much of a gradient
all-reduce hides behind compute. Every rank measures at once; rank 0 writes.

options:
  -o FILE          write the JSON to FILE (default: stdout)
  --quick          a small grid and small sizes (a few seconds; for tests)
  --threads T      CPU threads per rank (default 1; calibrate with the
                   trainer's --threads that the runs will use)
  --max-bytes B    largest collective message in bytes (default 67108864;
                   65536 with --quick)
  --device NAME    the backend whose kernels are measured: cpu (default),
                   or cuda where built in
  --help           print this help
)";

} // namespace

std::optional<Options> parseOptions(const std::vector<std::string> &args) {
  Options o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kHelp, stdout);
      return std::nullopt;
    }
    if (arg == "--quick") {
      o.quick = true;
      continue;
    }
    BMRT_CHECK(arg == "-o" || arg == "--threads" || arg == "--max-bytes" ||
                   arg == "--device",
               "unknown option '" + arg + "'; see 'bmrt-calibrate --help'");
    BMRT_CHECK(i + 1 < args.size(), "option '" + arg + "' needs a value");
    const std::string &value = args[++i];
    if (arg == "-o")
      o.output = value;
    else if (arg == "--device")
      o.device = value;
    else if (arg == "--threads")
      o.threads = static_cast<int>(parseIntegerFlag(arg, value, 1, 1024));
    else
      o.maxBytes = parseIntegerFlag(arg, value, 4, int64_t(1) << 32);
  }
  if (o.maxBytes == 0)
    o.maxBytes = o.quick ? int64_t(64) << 10 : int64_t(64) << 20;
  return o;
}

} // namespace bmrt::calibrate
