//===- FuzzInput.cpp - hand a fuzz input to a reader that wants a file ----===//

#include "FuzzInput.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <sys/mman.h>
#include <unistd.h>

namespace bm::fuzz {

namespace {

[[noreturn]] void harnessFailure(const char *what) {
  std::perror(what);
  std::abort();
}

} // namespace

MemoryFile::MemoryFile(const uint8_t *data, size_t size) {
  fd = memfd_create("bmc-fuzz-input", MFD_CLOEXEC);
  if (fd < 0)
    harnessFailure("memfd_create");
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0)
      harnessFailure("write to memfd");
    done += static_cast<size_t>(n);
  }
  name = "/proc/self/fd/" + std::to_string(fd);
}

MemoryFile::~MemoryFile() { ::close(fd); }

const std::string &scratchFolder() {
  static const std::string folder = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "bmc-fuzz-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      harnessFailure("mkdtemp");
    static std::string removeAtExit = pattern;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removeAtExit, ec);
    });
    return pattern;
  }();
  return folder;
}

void writeWholeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out)
    harnessFailure(path.c_str());
}

} // namespace bm::fuzz
