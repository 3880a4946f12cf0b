//===- CheckpointLock.cpp - one trainer per checkpoint folder -------------===//

#include "CheckpointLock.h"

#include "CheckpointVersions.h"

#include "bmrt/Error.h"

#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace bmrt {

std::string CheckpointLock::pathOf(const std::string &dir) {
  return pathIn(withoutTrailingSlashes(dir), kLockFile);
}

namespace {

/// The pid the holder wrote into the lock file ("" if none yet).
std::string holderOf(int fd) {
  char text[32] = {};
  ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string pid = n > 0 ? std::string(text, size_t(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' '))
    pid.pop_back();
  return pid;
}

} // namespace

CheckpointLock::CheckpointLock(const std::string &dir) {
  prepareCheckpointFolder(dir);
  std::string path = pathOf(dir);
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  BMRT_CHECK(fd >= 0, "cannot create the lock '" + path +
                          "' of the checkpoint '" + dir +
                          "': " + std::strerror(errno));
  int locked;
  do
    locked = ::flock(fd, LOCK_EX | LOCK_NB);
  while (locked != 0 && errno == EINTR);
  if (locked != 0) {
    int error = errno;
    std::string pid = error == EWOULDBLOCK ? holderOf(fd) : std::string();
    ::close(fd);
    fd = -1;
    BMRT_CHECK(error == EWOULDBLOCK,
               "cannot lock '" + path + "': " + std::strerror(error));
    BMRT_FAIL("the checkpoint '" + dir + "' is in use by another trainer (" +
              (pid.empty() ? std::string("pid unknown") : "pid " + pid) +
              ", holding '" + path +
              "'): two trainers would replace each other's checkpoints");
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  BMRT_CHECK(::ftruncate(fd, 0) == 0 &&
                 ::pwrite(fd, pid.data(), pid.size(), 0) ==
                     ssize_t(pid.size()),
             "cannot write the lock '" + path + "': " + std::strerror(errno));
}

CheckpointLock::~CheckpointLock() {
  if (fd >= 0)
    ::close(fd); // drops the lock; the file stays for the next holder
}

} // namespace bmrt
