//===- Collectives.cpp - communicators per group of mesh axes -------------===//

#include "bmrt/Collectives.h"
#include "bmrt/DeviceComm.h"
#include "bmrt/Error.h"

namespace bmrt {

Collectives::Collectives(World &world, Mesh mesh, Device *device)
    : meshOfJob(std::move(mesh)), worldRank(world.rank()) {
  BMRT_CHECK(meshOfJob.numRanks() == world.size(),
             "the step program's mesh " + meshOfJob.str() + " has " +
                 std::to_string(meshOfJob.numRanks()) +
                 " ranks; the trainer was started on " +
                 std::to_string(world.size()));
  // Every subset of the axes longer than one rank, as a bit mask over
  // axes(), in increasing order: the same sequence of World::group calls
  // on every rank.
  const std::vector<MeshAxis> &axes = meshOfJob.axes();
  for (unsigned mask = 1; mask < (1u << axes.size()); ++mask) {
    std::vector<std::string> names;
    bool trivial = false;
    for (size_t i = 0; i < axes.size(); ++i)
      if (mask & (1u << i)) {
        names.push_back(axes[i].name);
        trivial |= axes[i].size == 1;
      }
    if (trivial)
      continue;
    std::unique_ptr<Communicator> comm = world.group(meshOfJob, names);
    if (device)
      comm = deviceCommunicator(std::move(comm), *device);
    groups[groupName(names)] = std::move(comm);
  }
}

Collectives::~Collectives() = default;

std::vector<std::string>
Collectives::canonical(const std::vector<std::string> &axes) const {
  std::vector<std::string> names;
  for (const MeshAxis &axis : meshOfJob.axes())
    for (const std::string &name : axes)
      if (name == axis.name && axis.size > 1) {
        names.push_back(name);
        break;
      }
  for (const std::string &name : axes)
    meshOfJob.axisIndex(name); // throws on an unknown axis
  return names;
}

std::string Collectives::groupName(const std::vector<std::string> &axes) const {
  std::string name;
  for (const std::string &axis : canonical(axes))
    name += (name.empty() ? "" : "+") + axis;
  return name;
}

Communicator *Collectives::group(const std::vector<std::string> &axes) {
  std::string name = groupName(axes);
  if (name.empty())
    return nullptr;
  auto it = groups.find(name);
  BMRT_CHECK(it != groups.end(), "no communicator for the group " + name);
  return it->second.get();
}

void Collectives::addTime(const std::string &name, double seconds) {
  times[name] += seconds;
}

std::map<std::string, double> Collectives::takeTimes() {
  std::map<std::string, double> taken;
  taken.swap(times);
  return taken;
}

} // namespace bmrt
