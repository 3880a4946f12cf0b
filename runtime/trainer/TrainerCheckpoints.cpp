//===- TrainerCheckpoints.cpp - saving and resuming the trainer -----------===//
//
// A job without a mesh saves global tensors from rank 0 (Checkpoint.h); a
// job over a mesh saves each rank's shards (ShardedCheckpoint.h). Resuming
// reads either and takes this rank's box of every global tensor, so a
// checkpoint moves between meshes, ZeRO stages and rank counts.
//
//===----------------------------------------------------------------------===//

#include "TrainerLoop.h"

#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <optional>

namespace bmrt {

/// `p`'s whole local tensor of optimizer state `state` (under ZeRO this
/// rank's dp chunk, gathered over dp: collective) on the host.
std::vector<uint8_t> Trainer::localOf(const ParamSlot &p,
                                      const TensorView &state) {
  std::vector<uint8_t> local(p.value.bytes());
  TensorView whole{local.data(), p.value.dtype, p.value.shape};
  if (config.zero && state.data != p.value.data)
    parallel.gatherOverDp(p, whole, state, stream());
  else
    device->copyToHost(local.data(), state.data, whole.bytes(),
                       stream());
  stream().synchronize();
  return local;
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
  if (parallel.hasMesh())
    saveShards(step);
  else
    saveWhole(step);
  lastSaved = step;
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
    add(TensorRole::Parameter, localOf(p, parameterOf(p)));
    if (p.first.data)
      add(TensorRole::FirstMoment, localOf(p, p.first));
    if (p.second.data)
      add(TensorRole::SecondMoment, localOf(p, p.second));
  }
  if (world.rank() == 0)
    saveTrainingState(options.checkpoint, state);
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
      const TensorView &value = role == TensorRole::Parameter ? parameterOf(p)
                                : role == TensorRole::FirstMoment ? p.first
                                                                  : p.second;
      if (parallel.writesShard(p, flat))
        state.addTensor(*device, p.name, role,
                        flat ? Parallel::flatRange(value, 0, p.length) : value);
    }
  saveShardedTrainingState(options.checkpoint, state, world.rank(),
                           parallel.meshSizes(), listed,
                           [&] { parallel.barrier(); });
  parallel.barrier();
}

/// What a checkpoint holds of `p`: its value, and its optimizer state if
/// it is trained.
std::vector<TensorRole> Trainer::rolesOf(const ParamSlot &p) const {
  if (!p.trained)
    return {TensorRole::Parameter};
  if (config.optimizer == "adamw")
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
  TensorView from = chunked ? Parallel::flatRange(local, p.begin, p.length)
                            : local;
  device->copyToDevice(into.data, from.data, from.bytes(), stream());
}

int64_t Trainer::resume() {
  // Rank 0 reads the checkpoint first: a damaged one then ends the job
  // with rank 0's one line, not one line per rank.
  if (world.rank() != 0)
    parallel.barrier();
  std::optional<TrainingState> read;
  try {
    read = loadTrainingState(options.checkpoint, config.model,
                             config.modelHash);
  } catch (const Error &e) {
    failOnRankZero(world, e.what());
  }
  if (world.rank() == 0)
    parallel.barrier();
  TrainingState &state = *read;
  BMRT_CHECK(state.optimizer == config.optimizer,
             "the checkpoint in '" + options.checkpoint + "' was trained with " +
                 state.optimizer + ", this trainer uses " + config.optimizer);
  for (ParamSlot &p : params) {
    loadBox(state, p, TensorRole::Parameter, parameterOf(p));
    if (p.first.data)
      loadBox(state, p, TensorRole::FirstMoment, p.first);
    if (p.second.data)
      loadBox(state, p, TensorRole::SecondMoment, p.second);
  }
  stream().synchronize();
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
