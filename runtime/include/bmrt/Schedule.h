//===- Schedule.h - pipeline schedules as instruction lists -----*- C++ -*-===//
//
// The pipeline schedule is data (DESIGN.md section 5). One description
// (kind, pp ranks, v model chunks per rank, m micro-batches) generates each
// pipeline rank's ordered instruction list: forward and backward of
// micro-batch m on chunk c, sends and receives of activations and gradients
// to the neighbouring stages, the data-parallel gradient reduction and the
// optimizer step. The planner's bubble cost, the report's timeline and the
// trainer all come from these lists, so they cannot disagree.
//
// simulate() runs every rank's list together before anything runs for real:
// it proves that no rank waits forever, checks that each micro-batch visits
// every virtual stage in order and each forward precedes its backward, and
// times every action under given durations. The proof takes sends to be
// blocking rendezvous (a send completes only together with its matching
// receive, like MPI_Ssend or MPI_Send of a large message), the stricter of
// the blocking semantics: lists that finish under it finish under buffered
// or posted sends too. The times take sends to be posted (MPI_Isend), as
// the trainer runs them: under blocking sends a sender would idle until its
// receiver is free, and interleaving could not reach its (p-1)/(v m).
//
// Virtual stages: chunk c of rank r is virtual stage c * pp + r, so with one
// chunk per rank virtual stage k is rank k, and under interleaving a
// micro-batch goes round the ranks v times (Narayanan et al. 2021, 2.2.2).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_SCHEDULE_H
#define BMRT_SCHEDULE_H

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace bmrt {

/// The pipeline schedule, as the planner chooses it and the trainer runs
/// it: None (pp = 1, no pipeline), GPipe, 1F1B (PipeDream-Flush) and
/// interleaved 1F1B (Narayanan et al. 2021, 2.2).
enum class ScheduleKind { None, GPipe, OneFOneB, Interleaved };

/// "none", "gpipe", "1f1b" or "interleaved", the spelling of the planner's
/// --fix, the plan file and trainer.json.
const char *toString(ScheduleKind kind);
/// The kind spelled as toString spells it; nullopt for anything else.
std::optional<ScheduleKind> parseScheduleKind(const std::string &text);

/// One step's pipeline: which schedule, over how many ranks, with how many
/// model chunks per rank and micro-batches per step.
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int pp = 1; // pipeline ranks
  int v = 1;  // model chunks per rank (interleaved only), else 1
  int m = 1;  // micro-batches per step

  int virtualStages() const { return pp * v; }
  int virtualStage(int rank, int chunk) const { return chunk * pp + rank; }
  int rankOf(int virtualStage) const { return virtualStage % pp; }
  int chunkOf(int virtualStage) const { return virtualStage / pp; }
};

/// One line saying why no schedule of `spec` exists, or nullopt: a zero
/// size, v > 1 without interleaving, interleaving with v < 2 or pp < 2, or
/// interleaving with m not a multiple of pp (Megatron-LM's condition:
/// micro-batches go round the ranks in groups of pp).
std::optional<std::string> scheduleProblem(const ScheduleSpec &spec);
/// Throws bmrt::Error with scheduleProblem's line, if there is one.
void validateSchedule(const ScheduleSpec &spec);

enum class ActionKind {
  Forward,
  Backward,
  SendActivation,
  RecvActivation,
  SendGradient,
  RecvGradient,
  ReduceGradients,
  OptimizerStep,
};

/// One instruction of a rank's list. `chunk` is always the executing rank's
/// own chunk: SendActivation(m, c) sends the output of Forward(m, c) to the
/// next virtual stage, RecvActivation(m, c) receives the input of
/// Forward(m, c) from the previous one; the gradient pair mirrors that
/// backwards. The data-parallel reduction is per chunk, after the chunk's
/// last backward, so it can overlap the other chunks' backward.
struct Action {
  ActionKind kind = ActionKind::Forward;
  int microBatch = -1; // -1 for ReduceGradients and OptimizerStep
  int chunk = -1;      // -1 for OptimizerStep
  int peer = -1;       // the other rank of a send or receive, else -1

  static Action forward(int m, int c) { return {ActionKind::Forward, m, c}; }
  static Action backward(int m, int c) { return {ActionKind::Backward, m, c}; }
  static Action sendActivation(int m, int c, int to) {
    return {ActionKind::SendActivation, m, c, to};
  }
  static Action recvActivation(int m, int c, int from) {
    return {ActionKind::RecvActivation, m, c, from};
  }
  static Action sendGradient(int m, int c, int to) {
    return {ActionKind::SendGradient, m, c, to};
  }
  static Action recvGradient(int m, int c, int from) {
    return {ActionKind::RecvGradient, m, c, from};
  }
  static Action reduceGradients(int c) {
    return {ActionKind::ReduceGradients, -1, c};
  }
  static Action optimizerStep() { return {ActionKind::OptimizerStep}; }

  bool isCompute() const {
    return kind == ActionKind::Forward || kind == ActionKind::Backward;
  }
  bool isSend() const {
    return kind == ActionKind::SendActivation ||
           kind == ActionKind::SendGradient;
  }
  bool isRecv() const {
    return kind == ActionKind::RecvActivation ||
           kind == ActionKind::RecvGradient;
  }
  bool operator==(const Action &o) const {
    return kind == o.kind && microBatch == o.microBatch && chunk == o.chunk &&
           peer == o.peer;
  }
  bool operator!=(const Action &o) const { return !(*this == o); }
};

using RankActions = std::vector<Action>;

/// Durations of the actions, in any unit (seconds for the planner): what
/// a schedule is timed with, not a model of the hardware (the planner's
/// cost::CostModel derives them).
struct ActionCosts {
  /// Forward of one micro-batch on one chunk.
  double forward = 1;
  /// Backward of the same; unset means twice the forward (its two GEMMs per
  /// forward GEMM).
  std::optional<double> backward;
  /// One activation or gradient transfer between neighbouring stages.
  double transfer = 0;
  /// ReduceGradients of one chunk, and the optimizer step.
  double reduce = 0;
  double optimizer = 0;
  /// Time the blocking rendezvous run (a sender waits for its receiver)
  /// instead of posted sends. Deadlock freedom is proven under blocking
  /// sends either way.
  bool blockingSends = false;
  /// Per virtual stage, when the stages differ: empty means `forward` and
  /// `backward` everywhere; otherwise one entry per virtual stage.
  std::vector<double> stageForward;
  std::vector<double> stageBackward;

  double forwardTime(int virtualStage) const;
  double backwardTime(int virtualStage) const;
};

/// Validates `spec` and `costs` (throws bmrt::Error) and returns one
/// ordered list per pipeline rank. The compute order is the schedule's
/// (GPipe: all forwards then all backwards; 1F1B: pp - rank - 1 warm-up
/// forwards, then one forward one backward; interleaved: Megatron-LM's
/// order over model chunks). Sends and receives are placed by a run of that
/// order under `costs`' forward and backward times (each send right after
/// its producer, each receive where its data exists), in one order shared
/// by all ranks, so that the lists finish under rendezvous sends for any
/// durations (simulate() checks it) and, with posted sends, take exactly
/// the compute order's ideal time under `costs`. The planner, the report
/// and the trainer must pass the same costs to get the same lists; the
/// default (forward 1, backward 2) suits equal stages.
std::vector<RankActions> generateSchedule(const ScheduleSpec &spec,
                                          const ActionCosts &costs = {});

/// Throws bmrt::Error with one line unless the per-stage vectors of
/// `costs` are empty or have one entry per virtual stage and no duration
/// is negative.
void validateCosts(const ActionCosts &costs, int virtualStages);

/// One action as it ran: [start, end) on its rank's clock. A receive spans
/// the wait for its data and the transfer; a posted send spans only the
/// transfer, on the rank's communication lane beside its compute.
struct TimedAction {
  Action action;
  double start = 0;
  double end = 0;
};

/// Where a rank stopped when the lists deadlock.
struct BlockedRank {
  int rank = 0;
  size_t index = 0; // position of the blocking action in the rank's list
  Action action;
};

struct SimulationResult {
  /// Per rank, the actions that ran, in list order. Complete unless the
  /// lists deadlocked.
  std::vector<std::vector<TimedAction>> timeline;
  /// Every rank that could not finish, at the action it waits on; empty
  /// when every action completed.
  std::vector<BlockedRank> deadlock;
  /// Broken invariants, one line each (a backward before its forward, a
  /// forward before its input arrived, a stage never run, ...).
  std::vector<std::string> violations;

  /// The step: from the first action's start to the last action's end.
  double stepTime = 0;
  /// Per rank: time inside actions (computing, reducing, transfers it
  /// waits for: a receive's bytes, and with blocking sends a send's),
  /// without waiting for a peer.
  std::vector<double> busy;
  /// Per rank: time inside forwards and backwards.
  std::vector<double> compute;
  /// Per rank: the most forward activations held at once (forwards whose
  /// backward has not run), counted in chunks.
  std::vector<int> peakActivations;
  /// The busiest rank's idle time (stepTime minus its busy time): what the
  /// planner's step time calls the bubble.
  double bubble = 0;
  /// bubble / the busiest rank's compute: (p-1)/m for GPipe and 1F1B and
  /// (p-1)/(v m) for interleaving when the stages are equal and transfers
  /// free.
  double bubbleFraction = 0;
  /// Model chunks per rank seen in the lists (for printing).
  int chunks = 1;

  bool ok() const { return deadlock.empty() && violations.empty(); }
  /// One line: the deadlock (each blocked rank, its action and what its
  /// peer waits on), else the first violation, else "ok".
  std::string describe() const;
};

/// Runs all ranks' lists together (rank r is pipeline rank r; chunk c of
/// rank r is virtual stage c * pp + r with pp = lists.size()), each rank
/// its actions in order. The deadlock proof and the invariants: a send and
/// the peer's matching receive run together once both ranks have reached
/// them (rendezvous). The times: a send is posted and its rank goes on, the
/// transfer (`costs.transfer`) starts once the receiver has reached its
/// receive, and the receiver waits for its end (or, with
/// `costs.blockingSends`, the rendezvous run's times, where both ranks
/// wait). Never throws on bad lists: deadlocks and broken invariants are
/// reported in the result. Throws bmrt::Error only for costs that do not
/// fit (a per-stage vector of the wrong length, a negative duration).
SimulationResult simulate(const std::vector<RankActions> &lists,
                          const ActionCosts &costs = {});

/// "F3", "B3" (with the chunk: "F3.1"), "sendA3>1", "recvA3<0", "sendG3>0",
/// "recvG3<1", "reduce" ("reduce.1"), "step".
std::string formatAction(const Action &action, bool showChunk);
/// Each rank's list on one line: "rank 0: F0 sendA0>1 F1 ...".
std::string formatActionLists(const std::vector<RankActions> &lists,
                              bool showChunk);
/// A rank x time grid of the forwards and backwards of a simulated step:
/// one row per rank, one column per `slot` of time, "." where the rank
/// computes nothing; an action longer than a slot continues with "-". Rows
/// longer than `maxWidth` characters wrap into bands of columns (0: never).
std::string formatTimelineGrid(const SimulationResult &result, bool showChunk,
                               double slot = 1, size_t maxWidth = 120);
/// What `trainer --print-schedule` prints: a header naming the schedule
/// and whether it deadlocks, the grid of the step simulated under `costs`
/// (one column per shortest forward), the bubble beside (p-1)/(v m), the
/// peak activations per rank, and each rank's list.
std::string printSchedule(const ScheduleSpec &spec,
                          const ActionCosts &costs = {});

} // namespace bmrt

#endif // BMRT_SCHEDULE_H
