//===- Simulate.cpp - running every rank's pipeline list together ---------===//
//
// Each rank runs its list in order on its own clock. A local action
// (forward, backward or its B and W, reduction, optimizer step) runs as
// soon as its rank reaches it; a step whose input comes from another
// virtual stage of the same rank (the V layout's middle) finds it there
// once the producer has run, without a transfer. Transfers are simulated
// twice:
//
// - Blocking rendezvous (MPI_Ssend): a send and its receive run together
//   once both ranks have reached them. This is the stricter semantics; lists
//   that finish under it finish with buffered or posted sends too, so this
//   run is the deadlock proof and checks every invariant.
// - Posted sends (MPI_Isend + MPI_Recv), the way the trainer is to run them
//   (PyTorch's pipelining schedules likewise wait on their sends only at
//   the end of the step): the sender posts and goes on; the bytes move once
//   the receiver has reached its receive (no eager buffering) and the
//   receiver waits for them. This run gives the times, unless the costs ask
//   for the blocking run's (ActionCosts::blockingSends).
//
// Both are event driven, not time stepped: a rank advances until it blocks
// on a transfer and is woken when its peer completes or posts it. Times
// therefore do not depend on the order ranks are visited, and the cost is
// linear in the number of actions (the planner simulates thousands of
// micro-batches over dozens of ranks).
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Schedule.h"

#include <algorithm>
#include <deque>

namespace bmrt {

double ActionCosts::forwardTime(int virtualStage) const {
  return stageForward.empty() ? forward : stageForward[virtualStage];
}

double ActionCosts::backwardTime(int virtualStage) const {
  if (!stageBackward.empty())
    return stageBackward[virtualStage];
  if (backward)
    return *backward;
  // With per-stage forwards and no backwards given, keep the 2x default
  // per stage rather than against the uniform forward.
  return 2 * forwardTime(virtualStage);
}

double ActionCosts::backwardWeightTime(int virtualStage) const {
  if (!stageBackwardWeight.empty())
    return stageBackwardWeight[virtualStage];
  if (backwardWeight)
    return *backwardWeight;
  return backwardTime(virtualStage) / 2;
}

void validateCosts(const ActionCosts &costs, int virtualStages) {
  auto check = [&](const std::vector<double> &times, const char *what) {
    BMRT_CHECK(times.empty() || static_cast<int>(times.size()) == virtualStages,
               std::string("the schedule costs give ") + what + " for " +
                   std::to_string(times.size()) + " stages, the pipeline has " +
                   std::to_string(virtualStages) + " virtual stages");
    for (double t : times)
      BMRT_CHECK(t >= 0,
                 std::string("the schedule costs give negative ") + what);
  };
  check(costs.stageForward, "forward times");
  check(costs.stageBackward, "backward times");
  check(costs.stageBackwardWeight, "backward weight times");
  for (double t :
       {costs.forward, costs.backward.value_or(0), costs.transfer, costs.reduce,
        costs.optimizer, costs.backwardWeight.value_or(0)})
    BMRT_CHECK(t >= 0, "the schedule costs give a negative duration");
  // B takes the backward less W, so W cannot be the longer.
  if (costs.backwardWeight || !costs.stageBackwardWeight.empty())
    for (int stage = 0; stage < virtualStages; ++stage)
      BMRT_CHECK(costs.backwardWeightTime(stage) <= costs.backwardTime(stage),
                 "the schedule costs give virtual stage " +
                     std::to_string(stage) +
                     " a W longer than its whole backward");
}

std::string SimulationResult::describe() const {
  bool showChunk = chunks > 1;
  if (!deadlock.empty()) {
    std::string text = "deadlock:";
    for (size_t i = 0; i < deadlock.size(); ++i) {
      const BlockedRank &b = deadlock[i];
      text += (i ? "; rank " : " rank ") + std::to_string(b.rank) +
              " waits at #" + std::to_string(b.index) + " " +
              formatAction(b.action, showChunk);
      int peer = b.action.peer;
      if (peer < 0)
        continue;
      auto it =
          std::find_if(deadlock.begin(), deadlock.end(),
                       [&](const BlockedRank &o) { return o.rank == peer; });
      text += it == deadlock.end()
                  ? " (rank " + std::to_string(peer) + " has finished)"
                  : " (rank " + std::to_string(peer) + " is at " +
                        formatAction(it->action, showChunk) + ")";
    }
    return text;
  }
  if (!violations.empty())
    return violations.front() +
           (violations.size() > 1
                ? " (and " + std::to_string(violations.size() - 1) + " more)"
                : "");
  return "ok";
}

namespace {

enum class Sends { Blocking, Posted };

class Simulator {
public:
  Simulator(const std::vector<RankActions> &lists, const ActionCosts &costs,
            StageLayout layout, Sends sends);
  SimulationResult run();

private:
  int stageOf(int rank, const Action &a) const {
    return virtualStageOf(layout, pp, rank, a.chunk);
  }
  int rankOf(int stage) const { return rankOfStage(layout, pp, stage); }
  /// A hop between adjacent stages of one rank (the V's middle) has no
  /// transfer: the consumer reads what the producer left.
  bool sameRank(int stage, int other) const {
    return rankOf(stage) == rankOf(other);
  }
  size_t cell(int microBatch, int stage) const {
    return static_cast<size_t>(microBatch) * stages + stage;
  }
  std::string name(const Action &a) const {
    return formatAction(a, chunks > 1);
  }
  void violation(std::string text);

  bool checkShape();
  std::string shapeError(int rank, const Action &a) const;

  void advance(int rank, std::deque<int> &woken);
  bool matches(int rank, const Action &a, int peer, const Action &b) const;
  void runLocal(int rank, const Action &a);
  void runPair(int sender, const Action &send, int receiver,
               const Action &recv);
  void post(int rank, const Action &a, std::deque<int> &woken);
  bool receivePosted(int rank, const Action &a);
  size_t messageOf(int rank, const Action &a) const;
  void record(int rank, const Action &a, double start, double end, double busy);
  void checkBeforeLocal(int rank, const Action &a);
  void checkForward(const std::string &who, int rank, const Action &a);
  void checkBackward(const std::string &who, int rank, const Action &a);
  void checkWeight(const std::string &who, int rank, const Action &a);
  bool inputArrived(const Action &a, int stage, int from);
  void checkSend(int rank, const Action &a);
  void checkComplete();
  void summarise();

  const std::vector<RankActions> &lists;
  const ActionCosts &costs;
  const StageLayout layout;
  const Sends sends;
  int pp = 0, chunks = 1, microBatches = 0, stages = 0;
  SimulationResult result;
  std::vector<size_t> next;
  std::vector<double> clock;
  // Per (micro-batch, virtual stage): runs so far, and inputs received but
  // not yet read.
  // Weights counts W's, and whole backwards, which include theirs.
  std::vector<int> forwards, backwards, weights, activationsIn, gradientsIn;
  std::vector<int> live;        // per rank: activations held
  std::vector<int> liveWeights; // per rank: W inputs held (B run, W not)
  std::vector<bool> reduced;    // per virtual stage
  std::vector<bool> stepped;    // per rank
  // Posted sends, by messageOf: when posted (< 0: not yet), and where the
  // send sits in its rank's timeline (its times are known on receipt).
  std::vector<double> postedAt;
  std::vector<size_t> sendEntry;
};

} // namespace

Simulator::Simulator(const std::vector<RankActions> &lists,
                     const ActionCosts &costs, StageLayout layout, Sends sends)
    : lists(lists), costs(costs), layout(layout), sends(sends),
      pp(static_cast<int>(lists.size())) {
  for (const RankActions &list : lists)
    for (const Action &a : list) {
      chunks = std::max(chunks, a.chunk + 1);
      microBatches = std::max(microBatches, a.microBatch + 1);
    }
  stages = pp * chunks;
  result.chunks = chunks;
}

void Simulator::violation(std::string text) {
  // A broken list breaks many invariants at once; the first few name it.
  static constexpr size_t kMaxViolations = 50;
  if (result.violations.size() < kMaxViolations)
    result.violations.push_back(std::move(text));
}

/// Why action `a` of rank `rank` cannot be placed at all (an index out of
/// range, a transfer with a rank that is not the neighbouring stage's),
/// or "" when it is well formed.
std::string Simulator::shapeError(int rank, const Action &a) const {
  const bool needsMicroBatch = a.kind != ActionKind::ReduceGradients &&
                               a.kind != ActionKind::OptimizerStep;
  if (needsMicroBatch && a.microBatch < 0)
    return "has no micro-batch";
  if (a.kind != ActionKind::OptimizerStep && a.chunk < 0)
    return "has no chunk";
  if (!a.isSend() && !a.isRecv())
    return "";
  const int stage = stageOf(rank, a);
  const bool towardsLast = a.kind == ActionKind::SendActivation ||
                           a.kind == ActionKind::RecvGradient;
  const int other = towardsLast ? stage + 1 : stage - 1;
  if (other < 0 || other >= stages)
    return "has no neighbouring stage on that side";
  if (sameRank(stage, other))
    return "crosses to virtual stage " + std::to_string(other) +
           ", which is on the same rank";
  if (a.peer != rankOf(other))
    return "names rank " + std::to_string(a.peer) + ", but virtual stage " +
           std::to_string(other) + " is on rank " +
           std::to_string(rankOf(other));
  return "";
}

bool Simulator::checkShape() {
  for (int r = 0; r < pp; ++r)
    for (size_t i = 0; i < lists[r].size(); ++i) {
      std::string why = shapeError(r, lists[r][i]);
      if (!why.empty())
        violation("rank " + std::to_string(r) + " action #" +
                  std::to_string(i) + " " + name(lists[r][i]) + " " + why);
    }
  return result.violations.empty();
}

bool Simulator::matches(int rank, const Action &a, int peer,
                        const Action &b) const {
  if (b.peer != rank || b.microBatch != a.microBatch)
    return false;
  const int from = stageOf(rank, a), to = stageOf(peer, b);
  switch (a.kind) {
  case ActionKind::SendActivation:
    return b.kind == ActionKind::RecvActivation && to == from + 1;
  case ActionKind::RecvActivation:
    return b.kind == ActionKind::SendActivation && to == from - 1;
  case ActionKind::SendGradient:
    return b.kind == ActionKind::RecvGradient && to == from - 1;
  case ActionKind::RecvGradient:
    return b.kind == ActionKind::SendGradient && to == from + 1;
  default:
    return false;
  }
}

void Simulator::record(int rank, const Action &a, double start, double end,
                       double busy) {
  result.timeline[rank].push_back({a, start, end});
  result.busy[rank] += busy;
  if (a.isCompute())
    result.compute[rank] += end - start;
  clock[rank] = end;
  ++next[rank];
}

/// The invariants of a forward, backward, reduction or optimizer step,
/// checked as it runs; the state it reads is updated here too.
void Simulator::checkBeforeLocal(int rank, const Action &a) {
  const std::string who = "rank " + std::to_string(rank) + " runs ";
  if (stepped[rank])
    violation(who + name(a) + " after the optimizer step");
  if (a.kind == ActionKind::OptimizerStep) {
    for (int c = 0; c < chunks; ++c)
      if (!reduced[virtualStageOf(layout, pp, rank, c)])
        violation(who + "the optimizer step before reducing chunk " +
                  std::to_string(c));
    stepped[rank] = true;
    return;
  }
  const int stage = stageOf(rank, a);
  if (a.kind == ActionKind::ReduceGradients) {
    for (int mb = 0; mb < microBatches; ++mb)
      if (weights[cell(mb, stage)] == 0) {
        violation(who + name(a) + " before " +
                  name(Action::backward(mb, a.chunk)));
        break;
      }
    if (reduced[stage])
      violation(who + name(a) + " twice");
    reduced[stage] = true;
    return;
  }
  if (a.kind == ActionKind::Forward)
    checkForward(who, rank, a);
  else if (a.kind == ActionKind::BackwardWeight)
    checkWeight(who, rank, a);
  else
    checkBackward(who, rank, a);
}

/// Whether the input of `a` on `stage` from the adjacent stage `from` is
/// there: received from another rank, or computed by this one.
bool Simulator::inputArrived(const Action &a, int stage, int from) {
  const bool forward = a.kind == ActionKind::Forward;
  if (sameRank(stage, from)) {
    const std::vector<int> &produced = forward ? forwards : backwards;
    return produced[cell(a.microBatch, from)] > 0;
  }
  std::vector<int> &received = forward ? activationsIn : gradientsIn;
  return received[cell(a.microBatch, stage)]-- > 0;
}

void Simulator::checkForward(const std::string &who, int rank,
                             const Action &a) {
  const int stage = stageOf(rank, a);
  if (forwards[cell(a.microBatch, stage)]++ > 0)
    violation(who + name(a) + " twice");
  // Stage 0 reads the data; every other stage reads what it received.
  if (stage > 0 && !inputArrived(a, stage, stage - 1))
    violation(who + name(a) + " before receiving its input");
  result.peakActivations[rank] =
      std::max(result.peakActivations[rank], ++live[rank]);
}

/// A whole backward, or its B: it frees the forward's activations; a B
/// leaves W's inputs until W.
void Simulator::checkBackward(const std::string &who, int rank,
                              const Action &a) {
  const int stage = stageOf(rank, a);
  const size_t at = cell(a.microBatch, stage);
  if (forwards[at] == 0)
    violation(who + name(a) + " before its forward");
  else
    --live[rank];
  if (backwards[at]++ > 0)
    violation(who + name(a) + " twice");
  if (reduced[stage])
    violation(who + name(a) + " after reducing its chunk's gradients");
  if (stage < stages - 1 && !inputArrived(a, stage, stage + 1))
    violation(who + name(a) + " before receiving its output's gradient");
  if (a.kind == ActionKind::Backward) {
    ++weights[at];
    return;
  }
  result.peakWeightInputs[rank] =
      std::max(result.peakWeightInputs[rank], ++liveWeights[rank]);
}

void Simulator::checkWeight(const std::string &who, int rank, const Action &a) {
  const int stage = stageOf(rank, a);
  const size_t at = cell(a.microBatch, stage);
  if (backwards[at] == 0)
    violation(who + name(a) + " before its B");
  else
    --liveWeights[rank];
  if (weights[at]++ > 0)
    violation(who + name(a) + " twice");
  if (reduced[stage])
    violation(who + name(a) + " after reducing its chunk's gradients");
}

/// A send carries a result its rank has computed.
void Simulator::checkSend(int rank, const Action &a) {
  const size_t at = cell(a.microBatch, stageOf(rank, a));
  const bool ran = a.kind == ActionKind::SendActivation ? forwards[at] > 0
                                                        : backwards[at] > 0;
  if (!ran)
    violation("rank " + std::to_string(rank) + " runs " + name(a) +
              " before computing what it sends");
}

void Simulator::runLocal(int rank, const Action &a) {
  checkBeforeLocal(rank, a);
  double duration = 0;
  switch (a.kind) {
  case ActionKind::Forward:
    duration = costs.forwardTime(stageOf(rank, a));
    break;
  case ActionKind::Backward:
    duration = costs.backwardTime(stageOf(rank, a));
    break;
  case ActionKind::BackwardInput:
    duration = costs.backwardInputTime(stageOf(rank, a));
    break;
  case ActionKind::BackwardWeight:
    duration = costs.backwardWeightTime(stageOf(rank, a));
    break;
  case ActionKind::ReduceGradients:
    duration = costs.reduce;
    break;
  case ActionKind::OptimizerStep:
    duration = costs.optimizer;
    break;
  default:
    break;
  }
  record(rank, a, clock[rank], clock[rank] + duration, duration);
}

void Simulator::runPair(int sender, const Action &send, int receiver,
                        const Action &recv) {
  checkSend(sender, send);
  const size_t at = cell(recv.microBatch, stageOf(receiver, recv));
  ++(recv.kind == ActionKind::RecvActivation ? activationsIn : gradientsIn)[at];
  const double start = std::max(clock[sender], clock[receiver]);
  const double end = start + costs.transfer;
  record(sender, send, start, end, costs.transfer);
  record(receiver, recv, start, end, costs.transfer);
}

/// A message is named by its direction and the (micro-batch, virtual
/// stage) that consumes it, the same from both ends.
size_t Simulator::messageOf(int rank, const Action &a) const {
  const int stage = stageOf(rank, a);
  switch (a.kind) {
  case ActionKind::SendActivation:
    return cell(a.microBatch, stage + 1);
  case ActionKind::SendGradient:
    return forwards.size() + cell(a.microBatch, stage - 1);
  case ActionKind::RecvActivation:
    return cell(a.microBatch, stage);
  default:
    return forwards.size() + cell(a.microBatch, stage);
  }
}

/// Posting takes none of the sender's time; the send's timeline entry is
/// the transfer itself, filled in when the receiver takes it.
void Simulator::post(int rank, const Action &a, std::deque<int> &woken) {
  checkSend(rank, a);
  const size_t message = messageOf(rank, a);
  postedAt[message] = clock[rank];
  sendEntry[message] = result.timeline[rank].size();
  record(rank, a, clock[rank], clock[rank], 0);
  woken.push_back(a.peer);
}

/// The receiver waits for the sender to post, then for the bytes; only the
/// bytes count as busy, the wait is bubble.
bool Simulator::receivePosted(int rank, const Action &a) {
  const size_t message = messageOf(rank, a);
  if (postedAt[message] < 0)
    return false;
  const double start = std::max(postedAt[message], clock[rank]);
  const double end = start + costs.transfer;
  TimedAction &send = result.timeline[a.peer][sendEntry[message]];
  send.start = start;
  send.end = end;
  ++(a.kind == ActionKind::RecvActivation
         ? activationsIn
         : gradientsIn)[cell(a.microBatch, stageOf(rank, a))];
  record(rank, a, clock[rank], end, costs.transfer);
  return true;
}

/// Runs rank `rank` until it finishes or blocks; every peer it completes a
/// transfer with may now go further, so it is queued.
void Simulator::advance(int rank, std::deque<int> &woken) {
  const RankActions &list = lists[rank];
  while (next[rank] < list.size()) {
    const Action &a = list[next[rank]];
    if (!a.isSend() && !a.isRecv()) {
      runLocal(rank, a);
      continue;
    }
    if (sends == Sends::Posted) {
      if (a.isSend())
        post(rank, a, woken);
      else if (!receivePosted(rank, a))
        return; // woken when the sender posts
      continue;
    }
    const int peer = a.peer;
    if (next[peer] >= lists[peer].size())
      return;
    const Action &b = lists[peer][next[peer]];
    if (!matches(rank, a, peer, b))
      return;
    if (a.isSend())
      runPair(rank, a, peer, b);
    else
      runPair(peer, b, rank, a);
    woken.push_back(peer);
  }
}

/// After a run without deadlock: every micro-batch went forward and back
/// through every virtual stage, and every rank reduced and stepped.
void Simulator::checkComplete() {
  for (int mb = 0; mb < microBatches; ++mb)
    for (int s = 0; s < stages; ++s) {
      const std::string where =
          " of micro-batch " + std::to_string(mb) + " on virtual stage " +
          std::to_string(s) + " (rank " + std::to_string(rankOf(s)) +
          ", chunk " + std::to_string(chunkOfStage(layout, pp, s)) + ")";
      if (forwards[cell(mb, s)] == 0)
        violation("no forward" + where);
      if (backwards[cell(mb, s)] == 0)
        violation("no backward" + where);
      else if (weights[cell(mb, s)] == 0)
        violation("no W" + where);
    }
  for (int s = 0; s < stages; ++s)
    if (!reduced[s])
      violation("rank " + std::to_string(rankOf(s)) + " never reduces chunk " +
                std::to_string(chunkOfStage(layout, pp, s)));
  for (int r = 0; r < pp; ++r)
    if (!stepped[r])
      violation("rank " + std::to_string(r) + " never steps the optimizer");
}

void Simulator::summarise() {
  for (const auto &rank : result.timeline)
    for (const TimedAction &t : rank)
      result.stepTime = std::max(result.stepTime, t.end);
  if (pp == 0)
    return;
  const int critical = static_cast<int>(
      std::max_element(result.busy.begin(), result.busy.end()) -
      result.busy.begin());
  result.bubble = result.stepTime - result.busy[critical];
  result.bubbleFraction = result.compute[critical] > 0
                              ? result.bubble / result.compute[critical]
                              : 0;
}

SimulationResult Simulator::run() {
  validateCosts(costs, stages);
  result.timeline.resize(pp);
  result.busy.assign(pp, 0);
  result.compute.assign(pp, 0);
  result.peakActivations.assign(pp, 0);
  result.peakWeightInputs.assign(pp, 0);
  if (!checkShape())
    return result;
  const size_t cells = static_cast<size_t>(microBatches) * stages;
  forwards.assign(cells, 0);
  backwards.assign(cells, 0);
  weights.assign(cells, 0);
  activationsIn.assign(cells, 0);
  gradientsIn.assign(cells, 0);
  live.assign(pp, 0);
  liveWeights.assign(pp, 0);
  reduced.assign(stages, false);
  stepped.assign(pp, false);
  postedAt.assign(2 * cells, -1);
  sendEntry.assign(2 * cells, 0);
  next.assign(pp, 0);
  clock.assign(pp, 0);

  std::deque<int> woken;
  for (int r = 0; r < pp; ++r)
    woken.push_back(r);
  while (!woken.empty()) {
    int rank = woken.front();
    woken.pop_front();
    advance(rank, woken);
  }
  for (int r = 0; r < pp; ++r)
    if (next[r] < lists[r].size())
      result.deadlock.push_back({r, next[r], lists[r][next[r]]});
  if (result.deadlock.empty())
    checkComplete();
  summarise();
  return std::move(result);
}

SimulationResult simulate(const std::vector<RankActions> &lists,
                          const ActionCosts &costs, StageLayout layout) {
  SimulationResult proof =
      Simulator(lists, costs, layout, Sends::Blocking).run();
  if (!proof.ok() || costs.blockingSends)
    return proof;
  SimulationResult timed = Simulator(lists, costs, layout, Sends::Posted).run();
  proof.timeline = std::move(timed.timeline);
  proof.busy = std::move(timed.busy);
  proof.compute = std::move(timed.compute);
  proof.stepTime = timed.stepTime;
  proof.bubble = timed.bubble;
  proof.bubbleFraction = timed.bubbleFraction;
  return proof;
}

} // namespace bmrt
