//===- FileIO.cpp - durable writes and checked reads of whole files -------===//

#include "FileIO.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

namespace bmrt {
namespace {

std::string reason() { return std::strerror(errno); }

} // namespace

void FileDigest::add(const void *data, size_t count) {
  // crc32_z takes a size_t: no 4 GiB chunks to split.
  crc32 = uint32_t(
      ::crc32_z(crc32, static_cast<const Bytef *>(data), count));
  bytes += count;
}

FileWriter::FileWriter(const std::string &path) : path(path) {
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BMRT_CHECK(fd >= 0, "cannot create '" + path + "': " + reason());
}

FileWriter::~FileWriter() {
  if (fd >= 0)
    ::close(fd);
}

void FileWriter::write(const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    // write() returns 0 only for a zero-byte request; treat it as a full
    // disk rather than loop forever.
    if (n == 0)
      errno = ENOSPC;
    BMRT_CHECK(n > 0, "cannot write '" + path + "': " + reason());
    written.add(p, size_t(n));
    p += n;
    bytes -= size_t(n);
  }
}

void FileWriter::finish() {
  // A failed fsync or close can be the first report of a full disk (delayed
  // allocation, network filesystems).
  BMRT_CHECK(::fsync(fd) == 0, "cannot write '" + path + "': " + reason());
  int rc = ::close(fd);
  fd = -1;
  BMRT_CHECK(rc == 0, "cannot write '" + path + "': " + reason());
}

FileReader::FileReader(const std::string &path) : path(path) {
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BMRT_CHECK(fd >= 0, "cannot open '" + path + "': " + reason());
  struct stat st;
  BMRT_CHECK(::fstat(fd, &st) == 0, "cannot read '" + path + "': " + reason());
  BMRT_CHECK(!S_ISDIR(st.st_mode), "'" + path + "' is a folder, not a file");
  bytes = uint64_t(st.st_size);
}

FileReader::~FileReader() {
  if (fd >= 0)
    ::close(fd);
}

void FileReader::read(uint64_t offset, void *out, size_t count) {
  if (count == 0)
    return;
  if (offset != prefix.bytes)
    inOrder = false;
  char *p = static_cast<char *>(out);
  while (count > 0) {
    ssize_t n = ::pread(fd, p, count, off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    BMRT_CHECK(n >= 0, "cannot read '" + path + "': " + reason());
    BMRT_CHECK(n > 0, "cannot read '" + path + "': it ends at byte " +
                          std::to_string(offset) + ", before the " +
                          std::to_string(count) +
                          " bytes it should still hold");
    if (inOrder)
      prefix.add(p, size_t(n));
    p += n;
    offset += uint64_t(n);
    count -= size_t(n);
  }
}

std::optional<FileDigest> FileReader::wholeDigest() const {
  if (!inOrder || prefix.bytes != bytes)
    return std::nullopt;
  return prefix;
}

FileDigest digestOfFile(const std::string &path) {
  FileReader reader(path);
  std::vector<char> chunk(size_t(1) << 20);
  for (uint64_t at = 0; at < reader.size(); at += chunk.size())
    reader.read(at, chunk.data(),
                size_t(std::min<uint64_t>(chunk.size(), reader.size() - at)));
  return *reader.wholeDigest();
}

void syncDirectory(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  BMRT_CHECK(fd >= 0, "cannot open the folder '" + path + "': " + reason());
  int rc = ::fsync(fd);
  int error = errno;
  ::close(fd);
  errno = error;
  BMRT_CHECK(rc == 0, "cannot sync the folder '" + path + "': " + reason());
}

std::string readTextFile(const std::string &path) {
  FileReader reader(path);
  std::string text(size_t(reader.size()), '\0');
  reader.read(0, text.data(), text.size());
  return text;
}

void writeTextFile(const std::string &path, const std::string &text) {
  FileWriter writer(path);
  writer.write(text.data(), text.size());
  writer.finish();
}

} // namespace bmrt
