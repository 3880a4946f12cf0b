//===- Pipeline.cpp - one step of a pipeline schedule on this rank --------===//

#include "Pipeline.h"
#include "Clock.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <chrono>

namespace bmrt {

namespace {

/// Copies the slots' bytes off the device into `out`, one buffer each.
void read(Executor &e, const std::vector<int> &slots, Transfer &out) {
  out.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorView &v = e.view(slots[i]);
    out[i].resize(v.bytes());
    e.device().copyToHost(out[i].data(), v.data, v.bytes(), e.stream());
  }
  e.stream().synchronize();
}

/// Copies a received transfer into the slots, by position.
void write(Executor &e, const std::vector<int> &slots, const Transfer &in) {
  BMRT_CHECK(in.size() == slots.size(),
             "a pipeline stage received " + std::to_string(in.size()) +
                 " values for " + std::to_string(slots.size()) + " slots");
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorView &v = e.view(slots[i]);
    BMRT_CHECK(in[i].size() == v.bytes(),
               "a pipeline stage received " + std::to_string(in[i].size()) +
                   " bytes for a slot of " + std::to_string(v.bytes()));
    e.device().copyToDevice(v.data, in[i].data(), v.bytes(), e.stream());
  }
}

/// The slots a stage receives a transfer of `kind` in.
std::vector<int> receivingSlots(const Program &program, ActionKind kind) {
  return program.slotsOf(kind == ActionKind::RecvActivation
                             ? SlotKind::Activation
                             : SlotKind::ActivationGrad);
}

} // namespace

Pipeline::Pipeline(const ScheduleSpec &spec, const ActionCosts &costs,
                   int ppRank, std::vector<Stage> &stages,
                   Collectives &collectives)
    : spec(spec), ppRank(ppRank), stages(stages), pp(collectives.group({"pp"})),
      collectives(collectives) {
  std::vector<RankActions> lists = generateSchedule(spec, costs);
  SimulationResult check = simulate(lists, costs, spec.layout());
  BMRT_CHECK(check.deadlock.empty() && check.violations.empty(),
             "the " + std::string(toString(spec.kind)) +
                 " schedule does not run to its end: " + check.describe());
  actions = lists.at(ppRank);
}

Pipeline::~Pipeline() {
  for (auto &[key, held] : kept)
    stages.at(std::get<1>(key))
        .executor->device()
        .deallocate(held.data, held.bytes, MemoryKind::Activations);
}

Transfer &Pipeline::buffer(ActionKind kind, int microBatch, int chunk) {
  return inFlight[{static_cast<int>(kind), microBatch, chunk}];
}

double Pipeline::runStep(const std::function<void(int, int)> &beforeBackward,
                         const std::function<void(int, int)> &afterBackward) {
  loss = 0;
  waited = 0;
  for (size_t i = 0; i < actions.size();) {
    const Action &a = actions[i];
    if (a.isSend() || a.isRecv()) {
      i = transferRun(i);
      continue;
    }
    // The gradient hooks go round what writes the gradients: the whole
    // backward, or W where it is apart.
    if (a.kind == ActionKind::Forward) {
      forward(a);
    } else if (a.kind == ActionKind::Backward) {
      beforeBackward(a.chunk, a.microBatch);
      backward(a);
      afterBackward(a.chunk, a.microBatch);
    } else if (a.kind == ActionKind::BackwardInput) {
      backward(a);
    } else if (a.kind == ActionKind::BackwardWeight) {
      beforeBackward(a.chunk, a.microBatch);
      backwardWeight(a);
      afterBackward(a.chunk, a.microBatch);
    }
    // ReduceGradients and OptimizerStep: the trainer's, after the list.
    ++i;
  }
  return loss;
}

/// The transfers from `first` up to the next compute action, posted
/// together (as Megatron's batched send / receive pairs): between
/// groupStart and groupEnd they are all non-blocking, and complete at
/// groupEnd, so two neighbours that both send before they receive cannot
/// wait on each other. Send buffers are freed once all are complete.
size_t Pipeline::transferRun(size_t first) {
  BMRT_CHECK(pp, "a pipeline transfer without a pp communicator");
  size_t end = first;
  while (end < actions.size() &&
         (actions[end].isSend() || actions[end].isRecv()))
    ++end;
  auto begin = std::chrono::steady_clock::now();
  bool receives = false;
  pp->groupStart();
  for (size_t i = first; i < end; ++i) {
    post(actions[i]);
    receives |= actions[i].isRecv();
  }
  pp->groupEnd();
  double seconds = secondsSince(begin);
  // Time in a run with a receive is waiting for the neighbour: the bubble
  // (and the transfers, small beside it); a run of sends is communication.
  if (receives)
    waited += seconds;
  else
    collectives.addTime("pp", seconds);
  for (size_t i = first; i < end; ++i)
    if (actions[i].isSend())
      inFlight.erase(
          {int(actions[i].kind), actions[i].microBatch, actions[i].chunk});
  return end;
}

void Pipeline::forward(const Action &a) {
  Stage &stage = stages.at(a.chunk);
  Executor &e = *stage.executor;
  if (stage.feeder)
    stage.feeder->fill();
  std::vector<int> in = stage.program.slotsOf(SlotKind::Activation);
  if (!in.empty()) {
    write(e, in, buffer(ActionKind::RecvActivation, a.microBatch, a.chunk));
    inFlight.erase({int(ActionKind::RecvActivation), a.microBatch, a.chunk});
  }
  e.runForward();
  if (stage.program.loss >= 0) {
    float value = 0;
    e.device().copyToHost(&value, e.view(stage.program.loss).data,
                          sizeof value, e.stream());
    e.stream().synchronize();
    loss += value;
  }
  if (!stage.program.sends.empty()) {
    read(e, stage.program.sends,
         buffer(ActionKind::SendActivation, a.microBatch, a.chunk));
    handOverLocally(ActionKind::SendActivation, a, stage.virtualStage + 1);
  }
  keep(Kept::ForBackward, a);
}

/// Copies what `a`'s micro-batch keeps until a later step of its chunk out
/// of the executor's arena, into device memory of its own (never empty).
void Pipeline::keep(Kept what, const Action &a) {
  Executor &e = *stages.at(a.chunk).executor;
  const bool forBackward = what == Kept::ForBackward;
  Held held;
  held.bytes =
      std::max<size_t>(forBackward ? e.stashBytes() : e.weightStashBytes(), 1);
  held.data = e.device().allocate(held.bytes, MemoryKind::Activations);
  if (forBackward)
    e.stash(held.data);
  else
    e.stashWeightInputs(held.data);
  kept[{static_cast<int>(what), a.chunk, a.microBatch}] = held;
}

/// Copies it back for the step that reads it, and frees it.
void Pipeline::restore(Kept what, const Action &a) {
  Executor &e = *stages.at(a.chunk).executor;
  const bool forBackward = what == Kept::ForBackward;
  auto it = kept.find({static_cast<int>(what), a.chunk, a.microBatch});
  BMRT_CHECK(it != kept.end(),
             std::string("the schedule runs ") +
                 (forBackward ? "the backward" : "W") + " of micro-batch " +
                 std::to_string(a.microBatch) + " before its " +
                 (forBackward ? "forward" : "B"));
  if (forBackward)
    e.unstash(it->second.data);
  else
    e.unstashWeightInputs(it->second.data);
  e.device().deallocate(it->second.data, it->second.bytes,
                        MemoryKind::Activations);
  kept.erase(it);
}

void Pipeline::backward(const Action &a) {
  Stage &stage = stages.at(a.chunk);
  Executor &e = *stage.executor;
  restore(Kept::ForBackward, a);
  std::vector<int> in = stage.program.slotsOf(SlotKind::ActivationGrad);
  if (!in.empty()) {
    write(e, in, buffer(ActionKind::RecvGradient, a.microBatch, a.chunk));
    inFlight.erase({int(ActionKind::RecvGradient), a.microBatch, a.chunk});
  }
  if (a.kind == ActionKind::Backward) {
    e.runBackward();
  } else {
    e.runBackwardInput();
    keep(Kept::ForWeight, a);
  }
  if (!stage.program.sendGrads.empty()) {
    read(e, stage.program.sendGrads,
         buffer(ActionKind::SendGradient, a.microBatch, a.chunk));
    handOverLocally(ActionKind::SendGradient, a, stage.virtualStage - 1);
  }
}

void Pipeline::backwardWeight(const Action &a) {
  restore(Kept::ForWeight, a);
  stages.at(a.chunk).executor->runBackwardWeight();
}

/// Where the neighbouring virtual stage `to` is this rank's own (the V
/// layout's middle), the schedule has no transfer for the hop: what was
/// read off for sending becomes that chunk's received buffer.
void Pipeline::handOverLocally(ActionKind sent, const Action &a, int to) {
  if (to < 0 || to >= spec.virtualStages() || spec.rankOf(to) != ppRank)
    return;
  ActionKind received = sent == ActionKind::SendActivation
                            ? ActionKind::RecvActivation
                            : ActionKind::RecvGradient;
  buffer(received, a.microBatch, spec.chunkOf(to)) =
      std::move(buffer(sent, a.microBatch, a.chunk));
  inFlight.erase({int(sent), a.microBatch, a.chunk});
}

/// One message per value of the transfer, in position order on both
/// sides (MPI and NCCL keep the order of messages between two ranks), all
/// within the caller's group.
void Pipeline::post(const Action &a) {
  const Program &program = stages.at(a.chunk).program;
  Stream &stream = stages.at(a.chunk).executor->stream();
  Transfer &data = buffer(a.kind, a.microBatch, a.chunk);
  if (a.isSend()) {
    for (std::vector<uint8_t> &value : data)
      pp->send(value.data(), value.size(), DType::Bool, a.peer, stream);
    return;
  }
  std::vector<int> slots = receivingSlots(program, a.kind);
  BMRT_CHECK(!slots.empty(),
             "stage " + std::to_string(stages.at(a.chunk).virtualStage) +
                 " receives, but its program has no " +
                 nameOf(a.kind == ActionKind::RecvActivation
                            ? SlotKind::Activation
                            : SlotKind::ActivationGrad) +
                 " slot");
  data.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    data[i].resize(program.slots[slots[i]].bytes());
    pp->recv(data[i].data(), data[i].size(), DType::Bool, a.peer, stream);
  }
}

} // namespace bmrt
