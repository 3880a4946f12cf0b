//===- CheckpointLock.h - one trainer per checkpoint folder -----*- C++ -*-===//
//
// Two trainers saving into one folder would replace each other's
// checkpoints. A trainer that saves or resumes holds an advisory lock
// (flock) on DIR.lock beside the folder (not in it: a save renames the
// folder) for as long as it runs; the file holds the holder's pid, so the
// second trainer's one line names the first. The kernel drops the lock
// when its holder exits, however it exits: a killed trainer leaves no
// stale lock, only the file, which the next holder reuses.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_CHECKPOINTLOCK_H
#define BMRT_CHECKPOINT_CHECKPOINTLOCK_H

#include <string>

namespace bmrt {

class CheckpointLock {
public:
  /// Locks checkpoint folder `dir`; throws bmrt::Error with one line naming
  /// the other process when another holds it, or when DIR.lock cannot be
  /// made.
  explicit CheckpointLock(const std::string &dir);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock &) = delete;
  CheckpointLock &operator=(const CheckpointLock &) = delete;

  /// DIR.lock.
  static std::string pathOf(const std::string &dir);

private:
  int fd = -1;
};

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINTLOCK_H
