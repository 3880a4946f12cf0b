//===- TrainingState.cpp - checkpoints as the trainer sees them -----------===//

#include "TrainingState.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/FileIO.h"
#include "runtime/checkpoint/ShardedCheckpoint.h"

#include "bmrt/Error.h"
#include "bmrt/Optimizer.h"

namespace bmrt {
namespace {

HostTensor copyToHost(Device &device, const std::string &name,
                      const TensorView &value) {
  HostTensor t;
  t.name = name;
  t.dtype = value.dtype;
  t.shape = value.shape;
  t.data.resize(value.bytes());
  device.copyToHost(t.data.data(), value.data, value.bytes(),
                    device.computeStream());
  return t;
}

std::vector<TensorRef> refs(const std::vector<HostTensor> &tensors) {
  std::vector<TensorRef> out;
  for (const HostTensor &t : tensors)
    out.push_back(t.ref());
  return out;
}

} // namespace

/// Optimizer state tensors are named as PyTorch's optimizers name their
/// state, so other tools recognise them.
std::string stateName(const std::string &optimizer, TensorRole role,
                      const std::string &param) {
  if (role == TensorRole::SecondMoment)
    return "exp_avg_sq." + param;
  // SGD and LARS keep a momentum buffer; AdamW and LAMB two moments.
  OptimizerKind kind = OptimizerKind::AdamW;
  parseOptimizer(optimizer, kind);
  return (hasSecondMoment(kind) ? "exp_avg." : "momentum_buffer.") + param;
}

void TrainingState::addTensor(Device &device, const std::string &name,
                              TensorRole role, const TensorView &value) {
  if (role == TensorRole::Parameter)
    parameters.push_back(copyToHost(device, name, value));
  else
    optimizerState.push_back(
        copyToHost(device, stateName(optimizer, role, name), value));
  device.computeStream().synchronize();
}

const HostTensor &TrainingState::tensor(const std::string &name,
                                       TensorRole role, DType dtype,
                                       const Shape &shape,
                                       const Shape &model) const {
  bool param = role == TensorRole::Parameter;
  std::string key = param ? name : stateName(optimizer, role, name);
  TensorView expected{nullptr, dtype, shape};
  return requireTensor(param ? parameters : optimizerState, key, expected,
                       "the checkpoint", model);
}

CheckpointInfo checkpointInfoOf(const TrainingState &state) {
  CheckpointInfo info;
  info.model = state.model;
  info.modelHash = state.modelHash;
  info.modelPath = state.modelPath;
  info.step = state.step;
  info.dataPosition = state.data.position;
  info.rngState = state.data.rngState;
  info.optimizer = state.optimizer;
  if (!state.planFile.empty()) {
    nlohmann::json plan = nlohmann::json::parse(
        readTextFile(state.planFile), nullptr, /*allow_exceptions=*/false);
    if (!plan.is_discarded())
      info.plan = plan;
  }
  return info;
}

void saveTrainingState(const std::string &dir, const TrainingState &state,
                       int64_t keep) {
  saveCheckpoint(dir, checkpointInfoOf(state), refs(state.parameters),
                 refs(state.optimizerState), keep);
}

void saveShardedTrainingState(const std::string &dir,
                              const TrainingState &state,
                              const std::map<std::string, int> &mesh,
                              const std::vector<ShardedTensor> &tensors,
                              const SaveRanks &ranks, int64_t keep) {
  std::vector<TensorRef> mine = refs(state.parameters);
  for (const TensorRef &t : refs(state.optimizerState))
    mine.push_back(t);
  saveShardedCheckpoint(dir, checkpointInfoOf(state), mesh, tensors, mine,
                        ranks, keep);
}

TrainingState loadTrainingState(const CheckpointVersion &version,
                                const std::string &model,
                                const std::string &modelHash) {
  Checkpoint checkpoint = loadCheckpoint(version, model, modelHash);
  TrainingState state;
  state.model = checkpoint.info.model;
  state.modelHash = checkpoint.info.modelHash;
  state.optimizer = checkpoint.info.optimizer;
  state.step = checkpoint.info.step;
  state.data = {checkpoint.info.dataPosition, checkpoint.info.rngState};
  state.parameters = std::move(checkpoint.parameters);
  state.optimizerState = std::move(checkpoint.optimizerState);
  return state;
}

} // namespace bmrt
