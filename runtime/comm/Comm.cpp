//===- Comm.cpp - meshes, argument checks, abortJob -----------------------===//
//
// The backend-neutral half of Comm.h: everything an NCCL backend would
// share with the MPI one, the collective timeout's records among it (each
// blocking entry below waits inside a WaitScope, Watchdog.h). Part of bmrt
// itself (no MPI in here), so that the executor's collective kernels can
// call a Communicator; the backends and createWorld (CreateWorld.cpp) are
// bmrt_comm.
//
//===----------------------------------------------------------------------===//

#include "Backends.h"
#include "Watchdog.h"

#include "bmrt/Comm.h"
#include "bmrt/Error.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <numeric>
#include <optional>

namespace bmrt {

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

Mesh::Mesh(std::vector<MeshAxis> axesInnermostFirst)
    : meshAxes(std::move(axesInnermostFirst)) {
  for (size_t i = 0; i < meshAxes.size(); ++i) {
    const MeshAxis &axis = meshAxes[i];
    BMRT_CHECK(axis.size >= 1, "mesh axis '" + axis.name + "' has size " +
                                   std::to_string(axis.size));
    for (size_t j = 0; j < i; ++j)
      BMRT_CHECK(meshAxes[j].name != axis.name,
                 "mesh axis '" + axis.name + "' appears twice");
  }
}

Mesh Mesh::fromPlan(const std::map<std::string, int> &sizes) {
  // PLAN_SCHEMA.md: the ep groups are the innermost of dp's ranks.
  for (const auto &[name, size] : sizes)
    BMRT_CHECK(std::find_if(std::begin(kMeshAxes), std::end(kMeshAxes),
                            [&](const char *known) { return name == known; }) !=
                   std::end(kMeshAxes),
               "unknown mesh axis '" + name +
                   "' (expected tp, tp2, cp, ep, dp, pp)");
  std::vector<MeshAxis> axes;
  for (const char *name : kMeshAxes) {
    auto it = sizes.find(name);
    if (it == sizes.end() && isOptionalAxis(name))
      continue;
    axes.push_back({name, it == sizes.end() ? 1 : it->second});
  }
  return Mesh(std::move(axes));
}

int Mesh::numRanks() const {
  int n = 1;
  for (const MeshAxis &axis : meshAxes)
    n *= axis.size;
  return n;
}

int Mesh::axisIndex(const std::string &axis) const {
  for (size_t i = 0; i < meshAxes.size(); ++i)
    if (meshAxes[i].name == axis)
      return static_cast<int>(i);
  BMRT_FAIL("the mesh " + str() + " has no axis '" + axis + "'");
}

int Mesh::axisSize(const std::string &axis) const {
  return meshAxes[axisIndex(axis)].size;
}

std::vector<int> Mesh::coordinates(int rank) const {
  BMRT_CHECK(rank >= 0 && rank < numRanks(),
             "rank " + std::to_string(rank) + " is not on the mesh " + str());
  std::vector<int> coords;
  for (const MeshAxis &axis : meshAxes) {
    coords.push_back(rank % axis.size);
    rank /= axis.size;
  }
  return coords;
}

int Mesh::coordinate(int rank, const std::string &axis) const {
  return coordinates(rank)[axisIndex(axis)];
}

int Mesh::rankAt(const std::vector<int> &coordinates) const {
  BMRT_CHECK(coordinates.size() == meshAxes.size(),
             "mesh coordinates need one value per axis of " + str());
  int rank = 0;
  for (size_t i = meshAxes.size(); i-- > 0;) {
    BMRT_CHECK(coordinates[i] >= 0 && coordinates[i] < meshAxes[i].size,
               "coordinate " + std::to_string(coordinates[i]) +
                   " is off mesh axis '" + meshAxes[i].name + "'");
    rank = rank * meshAxes[i].size + coordinates[i];
  }
  return rank;
}

std::vector<int> Mesh::groupRanks(int rank,
                                  const std::vector<std::string> &axes) const {
  std::vector<bool> inGroup(meshAxes.size(), false);
  for (const std::string &axis : axes) {
    int index = axisIndex(axis);
    BMRT_CHECK(!inGroup[index], "mesh axis '" + axis + "' named twice");
    inGroup[index] = true;
  }
  // Count through the group's axes like an odometer, innermost digit
  // fastest: the ranks come out increasing, in group-rank order.
  std::vector<int> coords = coordinates(rank);
  for (size_t i = 0; i < meshAxes.size(); ++i)
    if (inGroup[i])
      coords[i] = 0;
  std::vector<int> ranks;
  while (true) {
    ranks.push_back(rankAt(coords));
    size_t i = 0;
    for (; i < meshAxes.size(); ++i) {
      if (!inGroup[i])
        continue;
      if (++coords[i] < meshAxes[i].size)
        break;
      coords[i] = 0;
    }
    if (i == meshAxes.size())
      return ranks;
  }
}

std::string Mesh::str() const {
  std::string text;
  for (const MeshAxis &axis : meshAxes)
    text +=
        (text.empty() ? "" : ",") + axis.name + "=" + std::to_string(axis.size);
  return text.empty() ? "(no axes)" : text;
}

//===----------------------------------------------------------------------===//
// PendingCollective
//===----------------------------------------------------------------------===//

PendingCollective::Operation::~Operation() = default;

PendingCollective &
PendingCollective::operator=(PendingCollective &&other) noexcept {
  if (this != &other) {
    abandon();
    operation = std::move(other.operation);
    site = other.site;
  }
  return *this;
}

PendingCollective::~PendingCollective() { abandon(); }

void PendingCollective::abandon() noexcept {
  // While an error unwinds, the job is about to end through abortJob.
  if (operation && std::uncaught_exceptions() == 0)
    abortJob("a collective still in flight was abandoned (its buffers would "
             "be written after they are gone)");
  operation.reset();
}

bool PendingCollective::test() {
  if (operation && operation->test())
    operation.reset();
  return !operation;
}

void PendingCollective::wait() {
  if (!operation)
    return;
  WaitScope waiting(site);
  operation->wait();
  operation.reset();
}

//===----------------------------------------------------------------------===//
// Communicator: the argument checks every backend shares
//===----------------------------------------------------------------------===//

Communicator::Communicator(std::string name, int rank, int size)
    : groupName(std::move(name)), groupRank(rank), groupSize(size) {}

Communicator::~Communicator() = default;

std::string Communicator::describe(const char *operation) const {
  return std::string(operation) + " over " + groupName + " (rank " +
         std::to_string(groupRank) + " of " + std::to_string(groupSize) + ")";
}

void Communicator::checkCollective(const char *operation) const {
  BMRT_CHECK(groupDepth == 0,
             describe(operation) +
                 " inside groupStart / groupEnd: only send and recv group");
}

void Communicator::checkPeer(const char *operation, int peer) const {
  BMRT_CHECK(peer >= 0 && peer < groupSize, describe(operation) + ": no rank " +
                                                std::to_string(peer) +
                                                " in the group");
  // A blocking transfer with oneself waits for a partner that is never
  // posted.
  BMRT_CHECK(peer != groupRank || groupDepth > 0,
             describe(operation) +
                 " with itself outside groupStart / groupEnd never completes");
}

static void checkSummable(const std::string &what, DType type) {
  BMRT_CHECK(type != DType::Bool,
             what + ": sums of " + nameOf(type) + " are not supported");
}

/// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
static bool overlaps(const void *a, size_t aBytes, const void *b,
                     size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return aBytes && bBytes && x < y + bBytes && y < x + aBytes;
}

static const char *offsetBy(const void *base, size_t elements, DType type) {
  return static_cast<const char *>(base) + elements * sizeOf(type);
}

void Communicator::checkAllReduce(const void *send, const void *recv,
                                  size_t count, DType type) const {
  checkCollective("all-reduce");
  checkSummable(describe("all-reduce"), type);
  size_t bytes = count * sizeOf(type);
  BMRT_CHECK(send == recv || !overlaps(send, bytes, recv, bytes),
             describe("all-reduce") + ": buffers overlap");
}

void Communicator::checkReduceScatter(const void *send, const void *recv,
                                      size_t recvCount, DType type) const {
  checkCollective("reduce-scatter");
  checkSummable(describe("reduce-scatter"), type);
  size_t bytes = recvCount * sizeOf(type);
  BMRT_CHECK(recv == offsetBy(send, groupRank * recvCount, type) ||
                 !overlaps(send, groupSize * bytes, recv, bytes),
             describe("reduce-scatter") +
                 ": buffers overlap other than in place");
}

void Communicator::allReduce(const void *send, void *recv, size_t count,
                             DType type, Stream &stream) {
  checkAllReduce(send, recv, count, type);
  WaitScope waiting(nextCall("all-reduce"));
  doAllReduce(send, recv, count, type, stream);
}

void Communicator::reduceScatter(const void *send, void *recv, size_t recvCount,
                                 DType type, Stream &stream) {
  checkReduceScatter(send, recv, recvCount, type);
  WaitScope waiting(nextCall("reduce-scatter"));
  doReduceScatter(send, recv, recvCount, type, stream);
}

PendingCollective Communicator::allReduceAsync(const void *send, void *recv,
                                               size_t count, DType type,
                                               Stream &stream) {
  checkAllReduce(send, recv, count, type);
  // Starting may block too (a backend that completes it at once).
  WaitSite site = nextCall("all-reduce");
  WaitScope waiting(site);
  return PendingCollective(doAllReduceAsync(send, recv, count, type, stream),
                           site);
}

PendingCollective Communicator::reduceScatterAsync(const void *send,
                                                   void *recv,
                                                   size_t recvCount,
                                                   DType type,
                                                   Stream &stream) {
  checkReduceScatter(send, recv, recvCount, type);
  WaitSite site = nextCall("reduce-scatter");
  WaitScope waiting(site);
  return PendingCollective(
      doReduceScatterAsync(send, recv, recvCount, type, stream), site);
}

void Communicator::allGather(const void *send, void *recv, size_t sendCount,
                             DType type, Stream &stream) {
  checkCollective("all-gather");
  size_t bytes = sendCount * sizeOf(type);
  BMRT_CHECK(send == offsetBy(recv, groupRank * sendCount, type) ||
                 !overlaps(send, bytes, recv, groupSize * bytes),
             describe("all-gather") + ": buffers overlap other than in place");
  WaitScope waiting(nextCall("all-gather"));
  doAllGather(send, recv, sendCount, type, stream);
}

void Communicator::allToAll(const void *send, void *recv, size_t chunkCount,
                            DType type, Stream &stream) {
  checkCollective("all-to-all");
  size_t bytes = groupSize * chunkCount * sizeOf(type);
  BMRT_CHECK(!overlaps(send, bytes, recv, bytes),
             describe("all-to-all") + ": buffers overlap");
  WaitScope waiting(nextCall("all-to-all"));
  doAllToAll(send, recv, chunkCount, type, stream);
}

WaitSite Communicator::nextCall(const char *operation, int peer) {
  return {this, operation, peer, ++calls};
}

bool Communicator::notePosted(int peer) {
  if (groupDepth == 0)
    return false;
  // groupEnd waits for the group's transfers, as one call that names
  // their peer when they have one.
  groupPeer = groupPeer == kNoPeer || groupPeer == peer ? peer : -1;
  return true;
}

void Communicator::send(const void *buffer, size_t count, DType type, int peer,
                        Stream &stream) {
  checkPeer("send", peer);
  std::optional<WaitScope> waiting;
  if (!notePosted(peer))
    waiting.emplace(nextCall("send", peer));
  doSend(buffer, count, type, peer, groupDepth > 0, stream);
}

void Communicator::recv(void *buffer, size_t count, DType type, int peer,
                        Stream &stream) {
  checkPeer("recv", peer);
  std::optional<WaitScope> waiting;
  if (!notePosted(peer))
    waiting.emplace(nextCall("recv", peer));
  doRecv(buffer, count, type, peer, groupDepth > 0, stream);
}

void Communicator::groupStart() { ++groupDepth; }

void Communicator::groupEnd() {
  BMRT_CHECK(groupDepth > 0,
             describe("groupEnd") + " without a matching groupStart");
  if (--groupDepth > 0)
    return;
  int peer = groupPeer == kNoPeer ? -1 : groupPeer;
  groupPeer = kNoPeer;
  WaitScope waiting(nextCall("grouped send/recv", peer));
  doGroupEnd();
}

void Communicator::barrier() {
  checkCollective("barrier");
  WaitScope waiting(nextCall("barrier"));
  doBarrier();
}

//===----------------------------------------------------------------------===//
// World
//===----------------------------------------------------------------------===//

/// The live World, for abortJob (which any code may call).
static World *liveWorld = nullptr;

World::World(int rank, int size) : worldRank(rank), worldSize(size) {
  BMRT_CHECK(!liveWorld, "a process has one communication World at a time");
  liveWorld = this;
}

World::~World() {
  // The watchdog reads liveWorld when it fires: stopped first.
  watchdog.reset();
  liveWorld = nullptr;
}

void World::setTimeout(double seconds) {
  watchdog.reset();
  if (seconds > 0 && worldSize > 1)
    watchdog = std::make_unique<Watchdog>(seconds, worldRank, worldSize);
}

std::unique_ptr<Communicator> World::all() {
  std::vector<int> everyone(worldSize);
  std::iota(everyone.begin(), everyone.end(), 0);
  return splitInto(std::move(everyone), "world");
}

std::unique_ptr<Communicator>
World::group(const Mesh &mesh, const std::vector<std::string> &axes) {
  // Checked before any communication, and alike on every rank, so that a
  // bad request throws everywhere instead of leaving some ranks in a split.
  BMRT_CHECK(mesh.numRanks() == worldSize, "the mesh " + mesh.str() + " has " +
                                               std::to_string(mesh.numRanks()) +
                                               " ranks but the job has " +
                                               std::to_string(worldSize));
  BMRT_CHECK(!axes.empty(), "a communicator group needs a mesh axis");
  std::vector<int> members = mesh.groupRanks(worldRank, axes);
  std::string name;
  for (const std::string &axis : axes)
    name += (name.empty() ? "" : "+") + axis;
  return splitInto(std::move(members), name);
}

std::unique_ptr<Communicator> World::splitInto(std::vector<int> members,
                                               const std::string &name) {
  // The first member names the group; ranking by position keeps the mesh's
  // order (members are increasing).
  int key = static_cast<int>(
      std::find(members.begin(), members.end(), worldRank) - members.begin());
  std::unique_ptr<Communicator> comm;
  {
    WaitScope waiting({nullptr, "communicator split"});
    comm = split(members.front(), key, name);
  }
  BMRT_CHECK(comm->size() == static_cast<int>(members.size()) &&
                 comm->rank() == key,
             "the " + name + " group of rank " + std::to_string(worldRank) +
                 " came out as rank " + std::to_string(comm->rank()) + " of " +
                 std::to_string(comm->size()) + ", not " + std::to_string(key) +
                 " of " + std::to_string(members.size()));
  comm->setWorldRanks(std::move(members));
  return comm;
}

/// The first of `names` set in the environment, as an integer; -1 if none.
static int firstVariable(std::initializer_list<const char *> names) {
  for (const char *name : names)
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return -1;
}

int launcherRank() {
  return firstVariable(
      {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"});
}

int launcherSize() {
  return firstVariable({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
}

static const char *programName = "trainer";

void setProgramName(const char *name) { programName = name; }

void printJobError(const std::string &message) {
  // Once per process: a second failure while aborting (another thread, a
  // destructor, the watchdog) adds nothing the user needs.
  static std::atomic<bool> printed{false};
  if (!printed.exchange(true)) {
    std::string line = message;
    std::replace(line.begin(), line.end(), '\n', ' ');
    std::replace(line.begin(), line.end(), '\r', ' ');
    int rank = liveWorld ? liveWorld->rank() : launcherRank();
    bool several = liveWorld ? liveWorld->size() > 1 : rank >= 0;
    std::fflush(stdout);
    if (several)
      std::fprintf(stderr, "%s: error: rank %d: %s\n", programName, rank,
                   line.c_str());
    else
      std::fprintf(stderr, "%s: error: %s\n", programName, line.c_str());
    std::fflush(stderr);
  }
}

void abortJob(const std::string &message) {
  printJobError(message);
  if (liveWorld)
    liveWorld->terminate();
  // No World: under a launcher, a process that exits non-zero ends the job.
  std::_Exit(1);
}

} // namespace bmrt
