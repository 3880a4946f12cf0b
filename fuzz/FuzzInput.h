//===- FuzzInput.h - hand a fuzz input to a reader that wants a file -*- C++ -*-===//
//
// The runtime's readers (safetensors, token files, checkpoints) take paths,
// as the trainer does. The fuzz targets hand them the input through an
// in-memory file (memfd), so a run touches no disk and a hang in one reader
// cannot leave files behind; the checkpoint reader wants a folder, which is
// made once per process under $TMPDIR and removed at exit.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_FUZZ_FUZZINPUT_H
#define BMC_FUZZ_FUZZINPUT_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace bm::fuzz {

/// An anonymous in-memory file holding the given bytes, open for as long as
/// the object lives; path() names it for open(2).
class MemoryFile {
public:
  MemoryFile(const uint8_t *data, size_t size);
  ~MemoryFile();
  MemoryFile(const MemoryFile &) = delete;
  MemoryFile &operator=(const MemoryFile &) = delete;
  /// "/proc/self/fd/N".
  const std::string &path() const { return name; }

private:
  int fd = -1;
  std::string name;
};

/// A private folder for this process, created on first use and removed
/// (with what is in it) when the process exits.
const std::string &scratchFolder();

/// Writes `bytes` to `path`, replacing it; aborts if it cannot (the fuzz
/// harness is broken then, not the reader under test).
void writeWholeFile(const std::string &path, const std::string &bytes);

} // namespace bm::fuzz

#endif // BMC_FUZZ_FUZZINPUT_H
