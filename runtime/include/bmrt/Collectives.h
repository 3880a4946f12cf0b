//===- Collectives.h - what a step program's collectives run on -*- C++ -*-===//
//
// A step program partitioned over a mesh names its collectives' groups by
// mesh axes (`all_reduce %6 {axes="tp"}`). The executor's collective
// kernels get from this context the rank's place on the mesh and a
// communicator per group, and record the time each group takes, which the
// trainer logs as communication time by axis.
//
// Every communicator is created up front, for every set of the mesh's
// axes longer than one rank, in one order on every rank: World::group is
// collective, and ranks that run different instructions (pipeline stages)
// must still create the same groups.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COLLECTIVES_H
#define BMRT_COLLECTIVES_H

#include "bmrt/Comm.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace bmrt {

class Collectives {
public:
  /// Collective over `world`: every rank calls it with the same mesh.
  /// Throws bmrt::Error when the mesh does not have world.size() ranks.
  /// Buffers are `device`'s memory: where the host cannot address it, each
  /// communicator is NCCL's or stages through host memory (DeviceComm.h).
  Collectives(World &world, Mesh mesh, Device *device = nullptr);
  ~Collectives();

  const Mesh &mesh() const { return meshOfJob; }
  /// This process's rank in the world (and on the mesh).
  int rank() const { return worldRank; }

  /// The group of this rank along `axes` (in any order); null when the
  /// group is this rank alone (axes of size 1), whose collectives are
  /// copies.
  Communicator *group(const std::vector<std::string> &axes);
  /// "dp+tp": the group's name, its axes innermost first, size-1 axes left
  /// out ("" for a group of one rank). Times are recorded under it.
  std::string groupName(const std::vector<std::string> &axes) const;

  /// Adds `seconds` spent communicating in the group named `name`.
  void addTime(const std::string &name, double seconds);
  /// Seconds per group name since the last takeTimes(), then starts over.
  std::map<std::string, double> takeTimes();

private:
  std::vector<std::string> canonical(const std::vector<std::string> &axes) const;

  Mesh meshOfJob;
  int worldRank;
  std::map<std::string, std::unique_ptr<Communicator>> groups;
  std::map<std::string, double> times;
};

} // namespace bmrt

#endif // BMRT_COLLECTIVES_H
