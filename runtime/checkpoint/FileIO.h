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
#include <optional>
#include <string>

namespace bmrt {

/// A file's size and CRC-32, as a checkpoint's manifest records them for
/// each tensor file. The CRC is zlib's (gzip's and PNG's, which Python's
/// zlib.crc32 computes too): zlib is a system library every platform has,
/// and a CRC catches the bit flips and torn writes it is here for; it is
/// no defence against someone who edits a file on purpose.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;

  /// Adds the next `count` bytes of the file.
  void add(const void *data, size_t count);
  bool operator==(const FileDigest &other) const {
    return bytes == other.bytes && crc32 == other.crc32;
  }
  bool operator!=(const FileDigest &other) const { return !(*this == other); }
};

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
  /// The digest of the bytes written so far: of the whole file once
  /// finished, computed from the bytes handed to write(), not read back.
  const FileDigest &digest() const { return written; }

private:
  std::string path;
  int fd = -1;
  FileDigest written;
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
  void read(uint64_t offset, void *out, size_t count);
  /// The digest of the whole file, when its reads took every byte from the
  /// first to the last in order (as readSafetensors reads a file); none
  /// otherwise. Checking a file then costs no second read.
  std::optional<FileDigest> wholeDigest() const;

private:
  std::string path;
  int fd = -1;
  uint64_t bytes = 0;
  /// The bytes read in order from byte 0, while `inOrder`.
  FileDigest prefix;
  bool inOrder = true;
};

/// The digest of the file at `path`, read once from start to end.
FileDigest digestOfFile(const std::string &path);

/// fsyncs a folder, so that the names created or renamed in it survive a
/// power cut.
void syncDirectory(const std::string &path);

/// The whole file as a string (for small files: manifests).
std::string readTextFile(const std::string &path);
/// Writes `text` to `path` durably (FileWriter).
void writeTextFile(const std::string &path, const std::string &text);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_FILEIO_H
