//===- Tool.h - what the runtime's executables share ------------*- C++ -*-===//
//
// The trainer and bmrt-calibrate run alone or under mpirun, take integer
// flags and end every failure the same way: one line "PROGRAM: error: ..."
// and a non-zero exit, and under several ranks the end of the whole job
// (abortJob), never a hang.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TOOL_H
#define BMRT_TOOL_H

#include "bmrt/Comm.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

namespace bmrt {

/// `text`, the value of `flag`, as an integer in [min, max]; throws
/// bmrt::Error ("--steps expects an integer, got 'x'", "--steps must be at
/// least 1, got 0").
int64_t parseIntegerFlag(const std::string &flag, const std::string &text,
                         int64_t min,
                         int64_t max = std::numeric_limits<int64_t>::max());

/// Prints "PROGRAM: error: MESSAGE" on one line; returns 1, the exit status.
int printError(const char *program, const std::string &message);

/// Creates the World and returns body(world). A bmrt::Error (or running out
/// of memory, or any other exception) that leaves body becomes one line and
/// status 1 on one rank, and ends the whole job under several. abortJob
/// names `program` from here on. `startTimeout` bounds the World's start
/// (createWorld).
int runWithWorld(const char *program, const std::function<int(World &)> &body,
                 double startTimeout = 0);

} // namespace bmrt

#endif // BMRT_TOOL_H
