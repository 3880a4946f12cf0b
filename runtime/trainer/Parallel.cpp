//===- Parallel.cpp - the trainer's parameters over the mesh --------------===//

#include "Parallel.h"

#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

namespace bmrt {

namespace {

const char *const kDp = "dp";
const char *const kPp = "pp";

bool contains(const std::vector<std::string> &names, const std::string &name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// Runs `transfer` and adds its time to the group of `axes`.
template <typename F>
void timed(Collectives &comms, const std::vector<std::string> &axes,
           Stream &stream, F transfer) {
  auto begin = std::chrono::steady_clock::now();
  transfer();
  stream.synchronize();
  comms.addTime(comms.groupName(axes),
                std::chrono::duration<double>(
                    std::chrono::steady_clock::now() - begin)
                    .count());
}

} // namespace

Parallel::Parallel(const Program &program, World &world, int zero,
                   Device &device)
    : device(device),
      comms(std::make_unique<Collectives>(
          world, meshOf(program, world.size()), &device)),
      meshLine(!program.mesh.empty()), zero(zero), ranks(world.size()) {}

Parallel::~Parallel() {
  device.deallocate(buffer, bufferBytes, MemoryKind::Workspace);
}

void Parallel::describe(ParamSlot &p, const Program &program) const {
  const Slot &slot = program.slots[p.slot];
  p.sharding = slot.sharding;
  p.global = globalShape(slot.shape, slot.sharding, mesh());
  p.model = slot.model.empty() ? p.global : slot.model;
  BMRT_CHECK(sameElementOrder(p.model, p.global),
             "parameter '" + slot.name + "' is stored as " +
                 formatShape(p.global) + ", no view of its model shape " +
                 formatShape(p.model));
  p.offsets = shardOffsets(slot.shape, slot.sharding, mesh(), comms->rank());
  int grad = program.gradientOf(p.slot);
  p.trained = grad >= 0;
  if (grad >= 0)
    p.partial = meshLine ? program.slots[grad].partial
                         : std::vector<std::string>{kDp};
  // A parameter every pipeline stage holds a copy of (embeddings tied to
  // the output layer; its gradient a sum over pp) counts, and is saved,
  // once: pipeline rank 0's.
  if (sharedByStages(p))
    p.ppRank = 0;
  int64_t n = numElements(slot.shape);
  int dp = zero ? mesh().axisSize(kDp) : 1;
  p.chunk = (n + dp - 1) / dp;
  p.begin = std::min(n, p.chunk * (zero ? mesh().coordinate(comms->rank(), kDp)
                                        : 0));
  p.length = std::min(n - p.begin, p.chunk);
}

double Parallel::gradientDivisor(int64_t microBatches) const {
  return double(microBatches) * (meshLine ? 1 : ranks);
}

TensorView Parallel::flatRange(const TensorView &t, int64_t begin,
                               int64_t length) {
  TensorView v = t;
  v.data = static_cast<char *>(t.data) + begin * sizeOf(t.dtype);
  v.shape = {length};
  return v;
}

void *Parallel::workspace(size_t bytes) {
  if (bytes <= bufferBytes)
    return buffer;
  // Work still queued may read the old buffer.
  device.computeStream().synchronize();
  device.deallocate(buffer, bufferBytes, MemoryKind::Workspace);
  buffer = device.allocate(bytes, MemoryKind::Workspace);
  bufferBytes = bytes;
  return buffer;
}

std::vector<std::string> Parallel::allReduceAxes(const ParamSlot &p) const {
  std::vector<std::string> axes;
  for (const std::string &axis : p.partial)
    if (axis != kPp && (zero < 2 || axis != kDp))
      axes.push_back(axis);
  return axes;
}

bool Parallel::sharedByStages(const ParamSlot &p) {
  return contains(p.partial, kPp);
}

GradientReduction Parallel::singleReduction(const ParamSlot &p) {
  std::vector<std::string> others = allReduceAxes(p);
  GradientReduction reduction;
  // A parameter shared by pipeline stages (tied embeddings): its chunks'
  // copies add into one sum (interleaved schedules), which must be
  // complete before it is reduced.
  if (sharedByStages(p))
    return reduction;
  if (zero < 2) {
    reduction.comm = others.empty() ? nullptr : comms->group(others);
    reduction.group = comms->groupName(others);
    return reduction;
  }
  // An all-reduce over other axes first would be a second collective.
  if (!contains(p.partial, kDp) || (!others.empty() && comms->group(others)))
    return reduction;
  reduction.comm = comms->group({kDp});
  reduction.group = comms->groupName({kDp});
  reduction.scatter = true;
  return reduction;
}

void Parallel::reduceGradient(const ParamSlot &p, const TensorView &g,
                              const TensorView &shardOut, Stream &stream) {
  bool scatter = zero >= 2;
  std::vector<std::string> others = allReduceAxes(p);
  if (Communicator *c = others.empty() ? nullptr : comms->group(others))
    timed(*comms, others, stream, [&] {
      c->allReduce(g.data, g.data, g.size(), g.dtype, stream);
    });
  if (!scatter)
    return;
  Communicator *dp = contains(p.partial, kDp) ? comms->group({kDp}) : nullptr;
  if (!dp) {
    // Not a partial sum over dp (or dp has one rank): the shard is a copy.
    device.fillBytes(shardOut.data, 0, shardOut.bytes(), stream);
    device.copyOnDevice(shardOut.data, flatRange(g, p.begin, p.length).data,
                        p.length * sizeOf(g.dtype), stream);
    return;
  }
  // reduceScatter takes whole chunks: pad the gradient to dp x chunk.
  size_t bytes = p.chunk * dp->size() * sizeOf(g.dtype);
  char *padded = static_cast<char *>(workspace(bytes));
  device.copyOnDevice(padded, g.data, g.bytes(), stream);
  device.fillBytes(padded + g.bytes(), 0, bytes - g.bytes(), stream);
  timed(*comms, {kDp}, stream, [&] {
    dp->reduceScatter(padded, shardOut.data, p.chunk, g.dtype, stream);
  });
}

void Parallel::sumOverStages(const ParamSlot &p, const TensorView &g,
                             Stream &stream) {
  Communicator *pp = comms->group({kPp});
  if (!pp)
    return;
  timed(*comms, {kPp}, stream, [&] {
    pp->allReduce(g.data, g.data, g.size(), g.dtype, stream);
  });
}

/// The axes that split `p`'s local tensor from the global one (and pp: each
/// pipeline rank holds other parameters).
static std::vector<std::string> shardedAxes(const ParamSlot &p) {
  // Each pipeline rank holds its own stages' parameters, except copies on
  // every stage (a partial sum over pp, then whole on each).
  std::vector<std::string> axes;
  if (!Parallel::sharedByStages(p))
    axes.push_back(kPp);
  for (const auto &dim : p.sharding)
    axes.insert(axes.end(), dim.begin(), dim.end());
  return axes;
}

/// Whether `rank` holds the replica of a tensor sharded over `sharded`
/// that counts: coordinate 0 along every other axis.
bool Parallel::ownsReplica(int rank,
                           const std::vector<std::string> &sharded) const {
  std::vector<int> coords = mesh().coordinates(rank);
  for (size_t i = 0; i < coords.size(); ++i)
    if (coords[i] != 0 && !contains(sharded, mesh().axes()[i].name))
      return false;
  return true;
}

std::optional<TensorView> Parallel::countedGradient(const ParamSlot &p,
                                                    const TensorView &g) const {
  std::vector<std::string> sharded = shardedAxes(p);
  if (zero >= 2)
    sharded.push_back(kDp);
  if (!ownsReplica(comms->rank(), sharded))
    return std::nullopt;
  return zero >= 2 ? flatRange(g, 0, p.length) : g;
}

std::vector<TensorShard> Parallel::writtenShards(const ParamSlot &p,
                                                bool flat) const {
  std::vector<std::string> axes = shardedAxes(p);
  if (flat)
    axes.push_back(kDp);
  std::vector<TensorShard> shards;
  const Shape &local = p.value.shape;
  int64_t n = numElements(local);
  for (int r = 0; r < mesh().numRanks(); ++r) {
    if (!ownsReplica(r, axes) || mesh().coordinate(r, "pp") != p.ppRank)
      continue;
    TensorShard s;
    s.rank = r;
    s.offsets = shardOffsets(local, p.sharding, mesh(), r);
    s.shape = local;
    if (flat) {
      int dp = zero ? mesh().coordinate(r, kDp) : 0;
      s.flatBegin = std::min(n, p.chunk * dp);
      s.flatEnd = std::min(n, s.flatBegin + p.chunk);
      if (s.flatBegin == s.flatEnd)
        continue;
    }
    std::vector<int> coords = mesh().coordinates(r);
    for (size_t i = 0; i < coords.size(); ++i)
      s.coordinates[mesh().axes()[i].name] = coords[i];
    shards.push_back(std::move(s));
  }
  return shards;
}

bool Parallel::writesShard(const ParamSlot &p, bool flat) const {
  for (const TensorShard &s : writtenShards(p, flat))
    if (s.rank == comms->rank())
      return true;
  return false;
}

std::map<std::string, int> Parallel::meshSizes() const {
  std::map<std::string, int> sizes;
  for (const MeshAxis &axis : mesh().axes())
    sizes[axis.name] = axis.size;
  return sizes;
}

Communicator *Parallel::everyone() {
  std::vector<std::string> all;
  for (const MeshAxis &axis : mesh().axes())
    all.push_back(axis.name);
  return comms->group(all);
}

void Parallel::barrier() {
  if (Communicator *all = everyone())
    all->barrier();
}

void Parallel::sumOverRanks(std::vector<int64_t> &values) {
  Communicator *all = everyone();
  if (!all || values.empty())
    return;
  size_t bytes = values.size() * sizeof(int64_t);
  void *buffer = workspace(bytes);
  Stream &stream = device.computeStream();
  device.copyToDevice(buffer, values.data(), bytes, stream);
  all->allReduce(buffer, buffer, values.size(), DType::I64, stream);
  device.copyToHost(values.data(), buffer, bytes, stream);
  stream.synchronize();
}

double Parallel::finishSumOfSquares(double sum, Stream &stream) {
  Communicator *world = everyone();
  if (!world)
    return sum;
  // Communicators sum fp32: the norm only sets the clipping factor and
  // the logged value, where fp32's 1e-7 relative error is immaterial.
  float value = static_cast<float>(sum);
  world->allReduce(&value, &value, 1, DType::F32, stream);
  return value;
}

void Parallel::sumOverShards(const std::vector<const ParamSlot *> &params,
                             std::vector<float> &sums, int width,
                             Stream &stream) {
  // The parameters by the axes their parts lie along; std::map keeps the
  // groups in one order on every rank.
  std::map<std::vector<std::string>, std::vector<size_t>> byAxes;
  for (size_t k = 0; k < params.size(); ++k) {
    std::vector<std::string> axes;
    for (const auto &dim : params[k]->sharding)
      axes.insert(axes.end(), dim.begin(), dim.end());
    if (zero)
      axes.push_back(kDp);
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    byAxes[axes].push_back(k);
  }
  for (const auto &[axes, members] : byAxes) {
    Communicator *c = axes.empty() ? nullptr : comms->group(axes);
    if (!c)
      continue;
    std::vector<float> packed;
    for (size_t k : members)
      packed.insert(packed.end(), sums.begin() + k * width,
                    sums.begin() + (k + 1) * width);
    c->allReduce(packed.data(), packed.data(), packed.size(), DType::F32,
                 stream);
    for (size_t i = 0; i < members.size(); ++i)
      std::copy(packed.begin() + i * width, packed.begin() + (i + 1) * width,
                sums.begin() + members[i] * width);
  }
}

double Parallel::reduceLoss(double loss, const std::vector<std::string> &partial,
                            Stream &stream) {
  std::vector<std::string> axes =
      meshLine ? partial : std::vector<std::string>{kDp};
  Communicator *c = axes.empty() ? nullptr : comms->group(axes);
  if (!c)
    return loss;
  float sum = static_cast<float>(loss);
  c->allReduce(&sum, &sum, 1, DType::F32, stream);
  return meshLine ? double(sum) : double(sum) / double(ranks);
}

void Parallel::gatherOverDp(const ParamSlot &p, const TensorView &flat,
                            const TensorView &shard, Stream &stream) {
  Communicator *dp = zero ? comms->group({kDp}) : nullptr;
  if (!dp) {
    if (shard.data && shard.data != flat.data)
      device.copyOnDevice(flat.data, shard.data,
                          p.length * sizeOf(flat.dtype), stream);
    return;
  }
  size_t chunkBytes = p.chunk * sizeOf(flat.dtype);
  // The gathered chunks, then this rank's own, padded: the last ranks'
  // chunks may reach past the tensor.
  char *gathered =
      static_cast<char *>(workspace(chunkBytes * (dp->size() + 1)));
  char *send = gathered + chunkBytes * dp->size();
  const void *mine = shard.data ? shard.data
                                : static_cast<char *>(flat.data) +
                                      p.begin * sizeOf(flat.dtype);
  size_t length = p.length * sizeOf(flat.dtype);
  device.copyOnDevice(send, mine, length, stream);
  device.fillBytes(send + length, 0, chunkBytes - length, stream);
  timed(*comms, {kDp}, stream, [&] {
    dp->allGather(send, gathered, p.chunk, flat.dtype, stream);
  });
  device.copyOnDevice(flat.data, gathered, flat.bytes(), stream);
}

void GatheredParameters::acquire(Executor &executor, int slot) {
  const ParamSlot &p = *bySlot.at({&executor, slot});
  if (!p.shard.data) {
    executor.bindSlot(slot, p.value.data); // a chunk's copy
    return;
  }
  TensorView full = p.value;
  full.data = device.allocate(full.bytes(), MemoryKind::Parameters);
  parallel.gatherOverDp(p, full, p.shard, executor.stream());
  executor.bindSlot(slot, full.data);
}

void GatheredParameters::release(Executor &executor, int slot) {
  const ParamSlot &p = *bySlot.at({&executor, slot});
  executor.stream().synchronize();
  if (p.shard.data)
    device.deallocate(executor.view(slot).data, p.value.bytes(),
                      MemoryKind::Parameters);
  executor.bindSlot(slot, nullptr);
}

} // namespace bmrt
