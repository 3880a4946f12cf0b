//===- Tool.cpp - flags and failures of the runtime's executables ---------===//

#include "bmrt/Tool.h"

#include "bmrt/Error.h"

#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>

namespace bmrt {
namespace {

/// A message as one line, whatever it carried.
std::string oneLine(std::string message) {
  for (char &c : message)
    if (c == '\n' || c == '\r')
      c = ' ';
  return message;
}

} // namespace

int64_t parseIntegerFlag(const std::string &flag, const std::string &text,
                         int64_t min, int64_t max) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::logic_error &) {
    used = 0;
  }
  BMRT_CHECK(used == text.size() && used > 0,
             flag + " expects an integer, got '" + text + "'");
  BMRT_CHECK(value >= min, flag + " must be at least " + std::to_string(min) +
                               ", got " + text);
  BMRT_CHECK(value <= max, flag + " must be at most " + std::to_string(max) +
                               ", got " + text);
  return value;
}

int printError(const char *program, const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", program, oneLine(message).c_str());
  return 1;
}

int runWithWorld(const char *program, const std::function<int(World &)> &body,
                 double startTimeout) {
  setProgramName(program);
  // The World lives outside the try: it must not be destroyed while an
  // error unwinds (the other ranks may be blocked in a collective).
  std::unique_ptr<World> world;
  try {
    world = createWorld(startTimeout);
  } catch (const Error &e) {
    return printError(program, e.what());
  }
  std::string error;
  try {
    return body(*world);
  } catch (const Error &e) {
    error = e.what();
  } catch (const std::bad_alloc &) {
    error = "out of host memory";
  } catch (const std::exception &e) {
    error = std::string("internal error: ") + e.what();
  }
  if (world->size() == 1)
    return printError(program, error);
  abortJob(error);
}

} // namespace bmrt
