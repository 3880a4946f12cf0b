//===- TrainerCheckpoints.cpp - saving and resuming the trainer -----------===//
//
// A job without a mesh saves global tensors from rank 0 (Checkpoint.h); a
// job over a mesh saves each rank's shards (ShardedCheckpoint.h). Resuming
// reads either and takes this rank's box of every global tensor, so a
// checkpoint moves between meshes, ZeRO stages and rank counts.
//
//===----------------------------------------------------------------------===//

#include "TrainerLoop.h"

#include "runtime/checkpoint/CheckpointVersions.h"

#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include <unistd.h>

namespace bmrt {

/// `p`'s whole local tensor of `role` (under ZeRO this rank's dp chunk,
/// gathered over dp: collective) on the host.
std::vector<uint8_t> Trainer::localOf(const ParamSlot &p, TensorRole role) {
  const TensorView &state = valueOf(p, role);
  std::vector<uint8_t> local(p.value.bytes());
  TensorView whole{local.data(), p.value.dtype, p.value.shape};
  if (!config.zero || state.data == p.value.data) {
    holderOf(role).copyToHost(local.data(), state.data, whole.bytes(),
                              stream());
  } else if (&holderOf(role) == device.get()) {
    parallel.gatherOverDp(p, whole, state, stream());
  } else {
    // Offloaded state: its dp chunk goes through the device, where the
    // communicators gather.
    TensorView chunk = Parallel::flatRange(state, 0, p.length);
    chunk.data = device->allocate(chunk.bytes(), MemoryKind::Workspace);
    device->copyToDevice(chunk.data, state.data, chunk.bytes(), stream());
    parallel.gatherOverDp(p, whole, chunk, stream());
    stream().synchronize();
    device->deallocate(chunk.data, chunk.bytes(), MemoryKind::Workspace);
  }
  stream().synchronize();
  return local;
}

/// `p`'s tensor of `role`: its value where it is kept between steps, or
/// its optimizer state.
const TensorView &Trainer::valueOf(const ParamSlot &p, TensorRole role) const {
  return role == TensorRole::Parameter     ? parameterOf(p)
         : role == TensorRole::FirstMoment ? p.first
                                           : p.second;
}

/// The device holding tensors of `role`: the host for offloaded optimizer
/// state.
Device &Trainer::holderOf(TensorRole role) {
  return role == TensorRole::Parameter ? *device : stateDevice();
}

/// Where `p`'s value is kept between steps: its dp shard under ZeRO 3.
const TensorView &Trainer::parameterOf(const ParamSlot &p) const {
  return p.shard.data ? p.shard : p.value;
}

TrainingState Trainer::stateAt(int64_t step) const {
  TrainingState state;
  state.model = config.model;
  state.modelHash = config.modelHash;
  state.modelPath = config.modelPath;
  state.step = step;
  state.optimizer = config.optimizer;
  if (Feeder *feeder = dataFeeder())
    state.data = feeder->state();
  state.planFile = config.plan;
  return state;
}

void Trainer::save(int64_t step) {
  // The parameters and state of the step's update, whole.
  if (offload)
    offload->settle(stream());
  if (parallel.hasMesh())
    saveShards(step);
  else
    saveWhole(step);
  lastSaved = step;
}

/// What a failed run leaves for --resume, as its last line says it.
std::string Trainer::keptCheckpoint() const {
  if (options.checkpoint.empty())
    return "";
  if (lastSaved < 0)
    return " (no checkpoint was written yet)";
  return " (the checkpoint of step " + std::to_string(lastSaved) + " in '" +
         options.checkpoint + "' is kept)";
}

/// Weights that are not finite are never saved as a state to go on from:
/// every rank checks the parameters it is about to write (the host copies
/// the save makes anyway; together the ranks write every element once),
/// and the job ends naming the first such parameter, the last good
/// checkpoint kept. Collective.
void Trainer::checkFiniteParameters(const TrainingState &state) {
  std::vector<int64_t> bad(everyParam.size(), 0);
  for (const HostTensor &t : state.parameters) {
    if (firstNonFinite(t.data.data(), t.dtype, numElements(t.shape)) < 0)
      continue;
    for (size_t i = 0; i < everyParam.size(); ++i)
      bad[i] |= everyParam[i].name == t.name;
  }
  parallel.sumOverRanks(bad);
  auto first =
      std::find_if(bad.begin(), bad.end(), [](int64_t n) { return n; });
  if (first == bad.end())
    return;
  failOnRankZero(
      world, "after step " + std::to_string(state.step) + " parameter '" +
                 everyParam[first - bad.begin()].name +
                 "' holds a NaN or infinity; not saving it" + keptCheckpoint());
}

/// The loss of `step` is not finite. If the last checkpoint holds the very
/// weights that gave it (saved or resumed at the step before), it is no
/// state to go on from: a resume reads the same batch with the same weights
/// and fails alike. Rank 0 withdraws it, back to the version before, while
/// the others wait; then the job ends with one line saying what is left.
void Trainer::stopOnNonFiniteLoss(int64_t step, double loss) {
  std::string what = "the loss is " +
                     std::string(std::isnan(loss) ? "NaN" : "infinite") +
                     " at step " + std::to_string(step) + "; stopping";
  if (options.checkpoint.empty() || lastSaved != step - 1)
    failOnRankZero(world, what + keptCheckpoint());
  int64_t previous = -1;
  if (world.rank() == 0)
    previous = withdrawVersion(options.checkpoint, lastSaved,
                               std::to_string(::getpid()));
  parallel.barrier();
  std::string bad = "the checkpoint of step " + std::to_string(lastSaved) +
                    " in '" + options.checkpoint + "' holds the weights that " +
                    "gave it, ";
  failOnRankZero(world, what + " (" + bad +
                            (previous >= 0
                                 ? "so it was withdrawn: the folder is back at "
                                   "step " +
                                       std::to_string(previous) + ")"
                                 : "and there is no older one: resuming from "
                                   "it fails the same way)"));
}

/// A data-parallel job without a mesh: rank 0 writes the global tensors
/// (under ZeRO gathered over dp), the others wait, so that no rank runs
/// ahead of a save that might fail.
void Trainer::saveWhole(int64_t step) {
  TrainingState state = stateAt(step);
  for (ParamSlot &p : params) {
    auto add = [&](TensorRole role, std::vector<uint8_t> bytes) {
      if (world.rank() == 0)
        state.addTensor(*device, p.name, role,
                        hostView(bytes, p.value.dtype, p.global));
    };
    for (TensorRole role : rolesOf(p))
      add(role, localOf(p, role));
  }
  checkFiniteParameters(state);
  if (world.rank() == 0)
    saveTrainingState(options.checkpoint, state, options.keep);
  parallel.barrier();
}

/// A job over a mesh: every rank writes the shards it is the replica of
/// that counts, rank 0 the manifest (ShardedCheckpoint.h). ZeRO's shards
/// (optimizer state; parameters under ZeRO 3) are written flat, each dp
/// rank its own range.
void Trainer::saveShards(int64_t step) {
  // Rank 0 lists every stage's tensors, held here or not.
  std::vector<ShardedTensor> listed;
  for (const ParamSlot &p : everyParam)
    for (TensorRole role : rolesOf(p)) {
      ShardedTensor t;
      t.name = role == TensorRole::Parameter
                   ? p.name
                   : stateName(config.optimizer, role, p.name);
      t.kind = role == TensorRole::Parameter ? TensorKind::Parameter
                                             : TensorKind::OptimizerState;
      t.dtype = p.value.dtype;
      t.global = p.global;
      t.shards = parallel.writtenShards(p, isFlat(p, role));
      listed.push_back(std::move(t));
    }
  TrainingState state = stateAt(step);
  for (ParamSlot &p : params)
    for (TensorRole role : rolesOf(p)) {
      bool flat = isFlat(p, role);
      const TensorView &value = valueOf(p, role);
      if (parallel.writesShard(p, flat))
        state.addTensor(holderOf(role), p.name, role,
                        flat ? Parallel::flatRange(value, 0, p.length) : value);
    }
  checkFiniteParameters(state);
  SaveRanks ranks{world.rank(), world.size(),
                  [&](std::vector<int64_t> &v) { parallel.sumOverRanks(v); }};
  saveShardedTrainingState(options.checkpoint, state, parallel.meshSizes(),
                           listed, ranks, options.keep);
  parallel.barrier();
}

/// What a checkpoint holds of `p`: its value, and its optimizer state if
/// it is trained.
std::vector<TensorRole> Trainer::rolesOf(const ParamSlot &p) const {
  if (!p.trained)
    return {TensorRole::Parameter};
  if (hasSecondMoment(config.optimizerKind))
    return {TensorRole::Parameter, TensorRole::FirstMoment,
            TensorRole::SecondMoment};
  return {TensorRole::Parameter, TensorRole::FirstMoment};
}

/// ZeRO's shards are flat: optimizer state, and trained parameters under
/// ZeRO 3.
bool Trainer::isFlat(const ParamSlot &p, TensorRole role) const {
  return role == TensorRole::Parameter ? config.zero >= 3 && p.trained
                                       : config.zero > 0;
}

/// Copies this rank's box of the checkpoint's global tensor into `into`
/// (under ZeRO, for optimizer state, its dp chunk of the box).
void Trainer::loadBox(const TrainingState &state, const ParamSlot &p,
                      TensorRole role, const TensorView &into) {
  const HostTensor &t =
      state.tensor(p.name, role, p.value.dtype, p.global, p.model);
  std::vector<uint8_t> box;
  TensorView local = hostView(box, p.value.dtype, p.value.shape);
  copyBox(t.data.data(), p.global, p.offsets, local.data, local.shape,
          Shape(local.shape.size(), 0), local.shape, sizeOf(local.dtype));
  bool chunked = config.zero && (role != TensorRole::Parameter || p.shard.data);
  TensorView from =
      chunked ? Parallel::flatRange(local, p.begin, p.length) : local;
  holderOf(role).copyToDevice(into.data, from.data, from.bytes(), stream());
}

/// Rank 0 speaks for the job: it locks --checkpoint (a second job on the
/// folder ends there), then removes what crashed saves left in it.
void Trainer::takeCheckpointFolder() {
  if (options.checkpoint.empty() || world.rank() != 0)
    return;
  // Before the lock would create the folder a mistyped --resume names.
  BMRT_CHECK(!options.resume || checkpointExists(options.checkpoint),
             "--resume: there is no checkpoint in '" + options.checkpoint +
                 "'");
  checkpointLock = std::make_unique<CheckpointLock>(options.checkpoint);
  removeCheckpointLeftovers(options.checkpoint);
}

/// Rank 0 resolves the folder's pointer and reads that version first: a
/// damaged one then ends the job with rank 0's one line. The others read
/// the version rank 0 read, by its step, never their own reading of the
/// pointer: all ranks resume from one version.
TrainingState Trainer::readCheckpoint() {
  auto read = [&](const std::function<CheckpointVersion()> &version) {
    try {
      return loadTrainingState(version(), config.model, config.modelHash);
    } catch (const Error &e) {
      failOnRankZero(world, e.what());
    }
  };
  std::vector<int64_t> step = {0};
  std::optional<TrainingState> state;
  if (world.rank() == 0)
    state = read([&] {
      CheckpointVersion version = resolveCheckpoint(options.checkpoint);
      step[0] = version.step;
      return version;
    });
  parallel.sumOverRanks(step);
  if (world.rank() != 0)
    state =
        read([&] { return checkpointVersionAt(options.checkpoint, step[0]); });
  return std::move(*state);
}

int64_t Trainer::resume() {
  TrainingState state = readCheckpoint();
  BMRT_CHECK(state.optimizer == config.optimizer,
             "the checkpoint in '" + options.checkpoint +
                 "' was trained with " + state.optimizer +
                 ", this trainer uses " + config.optimizer);
  for (ParamSlot &p : params)
    for (TensorRole role : rolesOf(p))
      loadBox(state, p, role, valueOf(p, role));
  stream().synchronize();
  if (offload)
    offload->parametersChanged();
  for (Stage &stage : stages)
    if (stage.feeder)
      stage.feeder->restore(state.data);
  BMRT_CHECK(state.step < options.steps,
             "the checkpoint in '" + options.checkpoint + "' is at step " +
                 std::to_string(state.step) + ", not before --steps " +
                 std::to_string(options.steps) + ": nothing to do");
  lastSaved = state.step;
  return state.step;
}

} // namespace bmrt
