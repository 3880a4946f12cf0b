//===- Error.h - runtime errors with file and line -------------*- C++ -*-===//
//
// Everything that can go wrong at run time because of input (a data file,
// a checkpoint, a program file, a flag) or the machine (a full disk) is a
// bmrt::Error carrying one line of text and where it was raised. The trainer
// catches it once and prints "trainer: error: ..." (with the rank when there
// are several), so a failure never crashes or hangs. Programming errors in
// the runtime itself are still bugs, not Errors.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_ERROR_H
#define BMRT_ERROR_H

#include <stdexcept>
#include <string>
#include <utility>

namespace bmrt {

class Error : public std::runtime_error {
public:
  Error(const std::string &message, const char *file, int line)
      : std::runtime_error(message), file(file), line(line) {}
  /// Where it was raised, for developers ("runtime/cpu/Kernels.cpp:42").
  std::string where() const;
  const char *file;
  int line;
};

/// A device that could not hold an allocation (Device::allocate): the
/// trainer adds what the plan predicted to the line.
class OutOfMemory : public Error {
public:
  OutOfMemory(const std::string &message, const char *file, int line,
              std::string kind)
      : Error(message, file, line), kind(std::move(kind)) {}
  /// The memory kind that did not fit ("activations", bmrt::nameOf).
  std::string kind;
};

} // namespace bmrt

/// Throws bmrt::Error(MESSAGE) unless COND holds. MESSAGE is any expression
/// convertible to std::string; it is evaluated only on failure.
#define BMRT_CHECK(cond, message)                                              \
  do {                                                                         \
    if (!(cond))                                                               \
      throw ::bmrt::Error((message), __FILE__, __LINE__);                      \
  } while (false)

#define BMRT_FAIL(message) throw ::bmrt::Error((message), __FILE__, __LINE__)

#endif // BMRT_ERROR_H
