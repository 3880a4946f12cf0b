//===- CheckpointLock.h - one trainer per checkpoint folder -----*- C++ -*-===//
//
// Two trainers saving into one folder would interleave their versions and
// prune each other's. A trainer that saves or resumes holds an advisory
// lock (flock) on DIR/.lock for as long as it runs (the folder is never
// renamed, so the lock lies inside it); the file holds the holder's pid,
// so the second trainer's one line names the first. The kernel drops the
// lock when its holder exits, however it exits: a killed trainer leaves no
// stale lock, only the file, which the next holder reuses. Readers (`bmc
// export`) take no lock: the versions they read are immutable.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_CHECKPOINTLOCK_H
#define BMRT_CHECKPOINT_CHECKPOINTLOCK_H

#include <string>

namespace bmrt {

class CheckpointLock {
public:
  /// Locks checkpoint folder `dir`, creating it if it is absent (its
  /// parent must exist); throws bmrt::Error with one line naming the other
  /// process when another holds it, when `dir` is not a checkpoint folder
  /// (prepareCheckpointFolder), or when DIR/.lock cannot be made.
  explicit CheckpointLock(const std::string &dir);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock &) = delete;
  CheckpointLock &operator=(const CheckpointLock &) = delete;

  /// DIR/.lock.
  static std::string pathOf(const std::string &dir);

private:
  int fd = -1;
};

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINTLOCK_H
