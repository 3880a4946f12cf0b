//===- FileIO.h - durable writes and checked reads --------------*- C++ -*-===//
//
// POSIX I/O for checkpoints: every failure (a full disk, a missing folder,
// a file that is shorter than it said) becomes a one-line bmrt::Error that
// names the file and the system's reason, and a written file is fsynced
// before it counts as written.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_FILEIO_H
#define BMRT_CHECKPOINT_FILEIO_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace bmrt {

/// A file being written: created (or truncated), appended to, then
/// fsynced and closed by finish(). Destroying an unfinished writer closes
/// the file and leaves it as it is.
class FileWriter {
public:
  explicit FileWriter(const std::string &path);
  ~FileWriter();
  FileWriter(const FileWriter &) = delete;
  FileWriter &operator=(const FileWriter &) = delete;

  void write(const void *data, size_t bytes);
  /// fsync and close: a later power cut cannot leave a torn file.
  void finish();

private:
  std::string path;
  int fd = -1;
};

/// A file being read at explicit offsets.
class FileReader {
public:
  explicit FileReader(const std::string &path);
  ~FileReader();
  FileReader(const FileReader &) = delete;
  FileReader &operator=(const FileReader &) = delete;

  uint64_t size() const { return bytes; }
  /// Reads exactly `count` bytes at `offset`; throws if the file ends first.
  void read(uint64_t offset, void *out, size_t count) const;

private:
  std::string path;
  int fd = -1;
  uint64_t bytes = 0;
};

/// fsyncs a folder, so that the names created or renamed in it survive a
/// power cut.
void syncDirectory(const std::string &path);

/// The whole file as a string (for small files: manifests).
std::string readTextFile(const std::string &path);
/// Writes `text` to `path` durably (FileWriter).
void writeTextFile(const std::string &path, const std::string &text);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_FILEIO_H
