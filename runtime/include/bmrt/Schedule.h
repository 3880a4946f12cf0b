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
// ZB-V and DualPipe-V place their two chunks in a V instead (StageLayout).
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
/// it: None (pp = 1, no pipeline), GPipe, 1F1B (PipeDream-Flush),
/// interleaved 1F1B (Narayanan et al. 2021, 2.2), and the zero-bubble
/// schedules that split each backward into B (the gradient of the stage's
/// input, on the critical path) and W (the weights' gradient, which may wait
/// and fill the bubble; Qi et al. 2023, "Zero Bubble Pipeline
/// Parallelism"): ZB-H1 (1F1B's memory), ZB-V (two chunks per rank in a V)
/// and DualPipe-V (DeepSeek-V3's DualPipe folded into a V, as PyTorch's
/// ScheduleDualPipeV runs it).
enum class ScheduleKind {
  None,
  GPipe,
  OneFOneB,
  Interleaved,
  ZeroBubbleH1,
  ZeroBubbleV,
  DualPipeV,
};

/// "none", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v" or
/// "dualpipe-v", the spelling of the planner's --fix, the plan file and
/// trainer.json.
const char *toString(ScheduleKind kind);
/// The kind spelled as toString spells it; nullopt for anything else.
std::optional<ScheduleKind> parseScheduleKind(const std::string &text);

/// Every schedule kind, in the order above.
const std::vector<ScheduleKind> &allScheduleKinds();

/// Whether the schedule runs each backward as B then W (BackwardInput and
/// BackwardWeight actions) instead of one Backward action.
bool splitsBackward(ScheduleKind kind);

/// How virtual stages sit on the ranks. Loop: chunk c of rank r is virtual
/// stage c * pp + r, so a micro-batch goes round the ranks v times
/// (Narayanan et al. 2021, 2.2.2). V (ZB-V, DualPipe-V; two chunks): chunk
/// 0 of rank r is stage r and chunk 1 is stage 2 pp - 1 - r, so the last
/// rank holds the two middle stages (the hop between them stays on the
/// rank) and the first rank the first stage and the last, which computes
/// the loss.
enum class StageLayout { Loop, V };

StageLayout layoutOf(ScheduleKind kind);
/// The virtual stage of `chunk` on `rank` under `layout` with `pp` ranks,
/// and back.
int virtualStageOf(StageLayout layout, int pp, int rank, int chunk);
int rankOfStage(StageLayout layout, int pp, int virtualStage);
int chunkOfStage(StageLayout layout, int pp, int virtualStage);

/// One step's pipeline: which schedule, over how many ranks, with how many
/// model chunks per rank and micro-batches per step.
struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int pp = 1; // pipeline ranks
  int v = 1;  // model chunks per rank (interleaved: >= 2; zb-v and
              // dualpipe-v: 2), else 1
  int m = 1;  // micro-batches per step

  StageLayout layout() const { return layoutOf(kind); }
  bool splitsBackward() const { return bmrt::splitsBackward(kind); }
  int virtualStages() const { return pp * v; }
  int virtualStage(int rank, int chunk) const {
    return virtualStageOf(layout(), pp, rank, chunk);
  }
  int rankOf(int virtualStage) const {
    return rankOfStage(layout(), pp, virtualStage);
  }
  int chunkOf(int virtualStage) const {
    return chunkOfStage(layout(), pp, virtualStage);
  }
};

/// One line saying why no schedule of `spec` exists, or nullopt: a zero
/// size, v > 1 without interleaving (or a V), interleaving with v < 2 or
/// pp < 2, interleaving with m not a multiple of pp (Megatron-LM's
/// condition: micro-batches go round the ranks in groups of pp), a
/// zero-bubble kind with pp < 2, a V (zb-v, dualpipe-v) with v != 2, or
/// dualpipe-v with m < 2 pp (DualPipe's phase counts need it).
std::optional<std::string> scheduleProblem(const ScheduleSpec &spec);
/// Throws bmrt::Error with scheduleProblem's line, if there is one.
void validateSchedule(const ScheduleSpec &spec);

/// Backward is the whole backward of a micro-batch on a chunk. A schedule
/// that splits it (splitsBackward) runs BackwardInput (B: the gradient sent
/// to the previous stage, and everything it depends on) and later
/// BackwardWeight (W: the rest, the weights' gradients) instead.
enum class ActionKind {
  Forward,
  Backward,
  BackwardInput,
  BackwardWeight,
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
/// last backward (its last W where the backward is split), so it can
/// overlap the other chunks' backward. A hop between two virtual stages of
/// one rank (the V layout's middle) has no send or receive: the rank's
/// next step reads what its own step produced.
struct Action {
  ActionKind kind = ActionKind::Forward;
  int microBatch = -1; // -1 for ReduceGradients and OptimizerStep
  int chunk = -1;      // -1 for OptimizerStep
  int peer = -1;       // the other rank of a send or receive, else -1

  static Action forward(int m, int c) { return {ActionKind::Forward, m, c}; }
  static Action backward(int m, int c) { return {ActionKind::Backward, m, c}; }
  static Action backwardInput(int m, int c) {
    return {ActionKind::BackwardInput, m, c};
  }
  static Action backwardWeight(int m, int c) {
    return {ActionKind::BackwardWeight, m, c};
  }
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
    return kind == ActionKind::Forward || kind == ActionKind::Backward ||
           kind == ActionKind::BackwardInput ||
           kind == ActionKind::BackwardWeight;
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
  /// The W part of each backward (the weights' gradients), where a schedule
  /// splits it; B takes the rest. Unset and empty: half the backward (of a
  /// linear layer's two backward GEMMs, one is the weights').
  std::optional<double> backwardWeight;
  std::vector<double> stageBackwardWeight;

  double forwardTime(int virtualStage) const;
  /// The whole backward, B and W together.
  double backwardTime(int virtualStage) const;
  double backwardWeightTime(int virtualStage) const;
  double backwardInputTime(int virtualStage) const {
    return backwardTime(virtualStage) - backwardWeightTime(virtualStage);
  }
};

/// Validates `spec` and `costs` (throws bmrt::Error) and returns one
/// ordered list per pipeline rank. The compute order is the schedule's
/// (GPipe: all forwards then all backwards; 1F1B: pp - rank - 1 warm-up
/// forwards, then one forward one backward; interleaved: Megatron-LM's
/// order over model chunks; ZB-H1: the paper's handcrafted order; ZB-V: a
/// greedy list schedule run under unit times within 1F1B's activation
/// memory; DualPipe-V: the phases of DeepSeek's dualpipev.py, each
/// overlapped F&B pair two consecutive steps). No compute order depends on
/// `costs`, so the planner and the trainer run the same steps in the same
/// order whatever times each passes. Sends and receives are placed by a
/// run of that order under `costs`' forward and backward (B and W) times
/// (each send right after its producer, each receive where its data
/// exists; none for W, nor between two stages of one rank), in one order shared
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
  /// backward, or B where it is split, has not run), counted in chunks.
  std::vector<int> peakActivations;
  /// Per rank: the most W inputs held at once (B run, W not yet), counted
  /// in chunks; zero where no backward is split. What W reads (the
  /// weights' inputs and the output gradients) is kept from B to W.
  std::vector<int> peakWeightInputs;
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
/// rank r is virtualStageOf(layout, pp, r, c) with pp = lists.size()), each
/// rank its actions in order. The deadlock proof and the invariants: a send and
/// the peer's matching receive run together once both ranks have reached
/// them (rendezvous). The times: a send is posted and its rank goes on, the
/// transfer (`costs.transfer`) starts once the receiver has reached its
/// receive, and the receiver waits for its end (or, with
/// `costs.blockingSends`, the rendezvous run's times, where both ranks
/// wait). Never throws on bad lists: deadlocks and broken invariants are
/// reported in the result. Throws bmrt::Error only for costs that do not
/// fit (a per-stage vector of the wrong length, a negative duration).
SimulationResult simulate(const std::vector<RankActions> &lists,
                          const ActionCosts &costs = {},
                          StageLayout layout = StageLayout::Loop);

/// "F3", "B3", "W3" (with the chunk: "F3.1"; B is the whole backward, or
/// its input part where W is apart), "sendA3>1", "recvA3<0", "sendG3>0",
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
