//===- Schedule.cpp - per-rank instruction lists of a pipeline schedule ---===//
//
// Two steps. First each rank's compute order (forwards and backwards, or
// forwards, B's and W's where the backward is split; ZeroBubble.cpp builds
// those orders) as the schedule defines it. Then the sends and receives: the
// compute orders are run once with the given forward and backward times and
// instant transfers (the "ideal run"), and every entry of every list is sorted
// by that one clock: a step by when it starts, a transfer by when its data is
// produced. With posted sends the lists then run exactly as fast as the
// ideal run under those times.
//
// The naive places (each send right after its producer, each receive right
// before its consumer) deadlock under blocking rendezvous sends: in 1F1B a
// warm-up rank sends an activation while its neighbour sends a gradient
// back, and under interleaving two ranks can each send a gradient to the
// other. One shared order rules that out for any durations; the simulator
// proves it for every shape the tests sweep.
//
// W has no transfer, and neither has a hop between two virtual stages of
// one rank (the V layout's middle): the consumer reads what its own rank's
// producer left once that has run.
//
//===----------------------------------------------------------------------===//

#include "ScheduleOrder.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <tuple>

namespace bmrt {

/// GPipe (Huang et al. 2019): every forward, then every backward, so each
/// rank holds all m micro-batches' activations at the flush.
static std::vector<Step> gpipeOrder(const ScheduleSpec &spec) {
  std::vector<Step> order;
  for (int i = 0; i < spec.m; ++i)
    order.push_back({Phase::Forward, i, 0});
  for (int i = 0; i < spec.m; ++i)
    order.push_back({Phase::Backward, i, 0});
  return order;
}

/// The k-th forward (or backward) of a rank under 1F1B and its interleaved
/// form (Megatron-LM's order): micro-batches in groups of pp, each group
/// through the chunks in turn, forwards over chunks 0..v-1 and backwards
/// over v-1..0. With one chunk it is simply micro-batch k.
static Step chunkStep(const ScheduleSpec &spec, int k, bool backward) {
  const int group = k / (spec.pp * spec.v), within = k % (spec.pp * spec.v);
  const int chunk = within / spec.pp;
  return Step{backward ? Phase::Backward : Phase::Forward,
              group * spec.pp + within % spec.pp,
              backward ? spec.v - 1 - chunk : chunk};
}

/// 1F1B (PipeDream-Flush, Narayanan et al. 2021, 2.2.1): rank r runs
/// pp - r - 1 forwards ahead, so it holds at most pp - r activations.
/// Interleaved (2.2.2): the warm-up covers the first v - 1 chunks of a
/// group plus two chunk-steps per rank below, so that the input a rank
/// needs next is on its way; rank r holds at most that plus one.
static int warmupOf(const ScheduleSpec &spec, int rank) {
  if (spec.kind == ScheduleKind::OneFOneB)
    return spec.pp - rank - 1;
  return 2 * (spec.pp - rank - 1) + (spec.v - 1) * spec.pp;
}

/// The warm-up forwards, then one forward and one backward in turn, then
/// the backwards left.
static std::vector<Step> oneForwardOneBackward(const ScheduleSpec &spec,
                                               int rank) {
  const int total = spec.m * spec.v;
  const int warmup = std::min(warmupOf(spec, rank), total);
  std::vector<Step> order;
  for (int k = 0; k < warmup; ++k)
    order.push_back(chunkStep(spec, k, false));
  for (int k = 0; k + warmup < total; ++k) {
    order.push_back(chunkStep(spec, k + warmup, false));
    order.push_back(chunkStep(spec, k, true));
  }
  for (int k = total - warmup; k < total; ++k)
    order.push_back(chunkStep(spec, k, true));
  return order;
}

/// Every kind's compute order but ZB-V's, which follows the costs
/// (zeroBubbleVLists).
static ComputeOrders computeOrders(const ScheduleSpec &spec) {
  if (spec.kind == ScheduleKind::DualPipeV)
    return dualPipeVOrders(spec);
  if (spec.kind == ScheduleKind::ZeroBubbleH1)
    return zeroBubbleH1Orders(spec);
  ComputeOrders orders;
  for (int rank = 0; rank < spec.pp; ++rank)
    orders.push_back(spec.kind == ScheduleKind::GPipe
                         ? gpipeOrder(spec)
                         : oneForwardOneBackward(spec, rank));
  return orders;
}

namespace {

/// The compute orders run with the given forward and backward times, free
/// transfers and sends that never wait: when each step starts and ends.
/// These times place the transfers. Where the backward is split, "backward"
/// below is B, the part that produces the gradient sent on.
struct IdealRun {
  const ScheduleSpec &spec;
  const std::vector<std::vector<Step>> &orders;
  std::vector<std::vector<double>> start, end;
  // Indexed by micro-batch * virtualStages + virtualStage.
  std::vector<double> forwardEnd, backwardEnd;
  // Per virtual stage, as the ideal run takes them (see stepTimes).
  std::vector<double> forwardTime, backwardTime, weightTime;

  IdealRun(const ScheduleSpec &spec, const ActionCosts &costs,
           const std::vector<std::vector<Step>> &orders);

  int index(int microBatch, int stage) const {
    return microBatch * spec.virtualStages() + stage;
  }
  int stageOf(int rank, const Step &step) const {
    return spec.virtualStage(rank, step.chunk);
  }
  /// When the data of the transfer into the forward (or backward) of
  /// (microBatch, consumer) is produced.
  double activationTime(int microBatch, int consumer) const {
    return forwardEnd[index(microBatch, consumer - 1)];
  }
  double gradientTime(int microBatch, int consumer) const {
    return backwardEnd[index(microBatch, consumer + 1)];
  }

  /// Whether the transfer between two adjacent virtual stages stays on one
  /// rank (the V layout's middle): then there is none.
  bool sameRank(int stage, int other) const {
    return spec.rankOf(stage) == spec.rankOf(other);
  }

private:
  void stepTimes(const ActionCosts &costs);
  double duration(int stage, Phase phase) const;
  std::vector<double> &endsOf(Phase phase) {
    return phase == Phase::Forward ? forwardEnd : backwardEnd;
  }
  /// The step's input is ready at the returned time, or not yet (< 0).
  double inputReady(int rank, const Step &step) const;
};

} // namespace

IdealRun::IdealRun(const ScheduleSpec &spec, const ActionCosts &costs,
                   const std::vector<std::vector<Step>> &orders)
    : spec(spec), orders(orders) {
  const int stages = spec.virtualStages(), pp = spec.pp;
  stepTimes(costs);
  const size_t cells = static_cast<size_t>(spec.m) * stages;
  forwardEnd.assign(cells, -1);
  backwardEnd.assign(cells, -1);
  start.resize(pp);
  end.resize(pp);
  for (int r = 0; r < pp; ++r) {
    start[r].assign(orders[r].size(), 0);
    end[r].assign(orders[r].size(), 0);
  }
  // Sweep the ranks until every step has run; a sweep without progress
  // means the compute orders themselves wait in a circle, a bug here.
  std::vector<size_t> next(pp, 0);
  std::vector<double> clock(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      for (; next[r] < orders[r].size(); ++next[r]) {
        const Step &s = orders[r][next[r]];
        double ready = inputReady(r, s);
        if (ready < 0)
          break;
        double &begin = start[r][next[r]];
        begin = std::max(clock[r], ready);
        const int stage = stageOf(r, s);
        clock[r] = end[r][next[r]] = begin + duration(stage, s.phase);
        if (s.phase != Phase::Weight)
          endsOf(s.phase)[index(s.microBatch, stage)] = clock[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r)
    if (next[r] < orders[r].size())
      throw std::logic_error("pipeline compute order waits in a circle");
}

/// The costs' times, with a stage that takes no time (an empty trailing
/// stage of the planner's partition) given a sliver: a send must sort
/// after its producer, so the producer has to end after it starts.
void IdealRun::stepTimes(const ActionCosts &costs) {
  double longest = 0;
  for (int stage = 0; stage < spec.virtualStages(); ++stage) {
    forwardTime.push_back(costs.forwardTime(stage));
    const bool split = spec.splitsBackward();
    backwardTime.push_back(split ? costs.backwardInputTime(stage)
                                 : costs.backwardTime(stage));
    weightTime.push_back(split ? costs.backwardWeightTime(stage) : 0);
    longest = std::max(
        {longest, forwardTime.back(), backwardTime.back(), weightTime.back()});
  }
  const double sliver = (longest > 0 ? longest : 1) * 1e-9;
  for (std::vector<double> *times : {&forwardTime, &backwardTime, &weightTime})
    for (double &d : *times)
      d = std::max(d, sliver);
}

double IdealRun::duration(int stage, Phase phase) const {
  switch (phase) {
  case Phase::Forward:
    return forwardTime[stage];
  case Phase::Backward:
    return backwardTime[stage];
  case Phase::Weight:
    return weightTime[stage];
  }
  return 0;
}

double IdealRun::inputReady(int rank, const Step &step) const {
  const int stage = stageOf(rank, step), last = spec.virtualStages() - 1;
  if (step.phase == Phase::Forward)
    return stage == 0 ? 0 : forwardEnd[index(step.microBatch, stage - 1)];
  // W reads what its own B left.
  if (step.phase == Phase::Weight)
    return backwardEnd[index(step.microBatch, stage)];
  // The last stage's backward starts from its own forward's loss.
  return stage == last ? forwardEnd[index(step.microBatch, stage)]
                       : backwardEnd[index(step.microBatch, stage + 1)];
}

namespace {

/// An entry of a rank's list with the key that orders it. A step sorts by
/// when it starts in the ideal run; a transfer by when its data is produced
/// there, before a step starting at that time. Both ends of a transfer
/// compute the same key and the ideal run's times are one clock, so all
/// lists are sorted by one global order, in which a send follows its
/// producer and a receive precedes its consumer. At each transfer in that
/// order both ranks have done everything before it, so no rank can wait
/// for another that waits for it, whatever the durations. A send right
/// after its producer and a receive as soon as the data exists is also what
/// lets a runtime that posts its sends (MPI_Isend) keep the ideal run's
/// times.
struct Keyed {
  Action action;
  double time = 0;
  bool step = false;
  int gradient = 0; // activations first on equal times
  int boundary = 0; // the lower virtual stage of the link
  /// The chunk whose gradients are complete once this entry has run.
  std::optional<int> reduceAfter;

  bool operator<(const Keyed &o) const {
    return std::make_tuple(time, step, gradient, boundary, action.microBatch) <
           std::make_tuple(o.time, o.step, o.gradient, o.boundary,
                           o.action.microBatch);
  }
};

} // namespace

/// The receive that must precede rank `rank`'s step `s`, if it has one.
static std::optional<Keyed> receiveBefore(const IdealRun &run, int rank,
                                          const Step &s) {
  const ScheduleSpec &spec = run.spec;
  const int stage = run.stageOf(rank, s), last = spec.virtualStages() - 1;
  if (s.phase == Phase::Forward && stage > 0 && !run.sameRank(stage, stage - 1))
    return Keyed{
        Action::recvActivation(s.microBatch, s.chunk, spec.rankOf(stage - 1)),
        run.activationTime(s.microBatch, stage), false, 0, stage - 1};
  if (s.phase == Phase::Backward && stage < last &&
      !run.sameRank(stage, stage + 1))
    return Keyed{
        Action::recvGradient(s.microBatch, s.chunk, spec.rankOf(stage + 1)),
        run.gradientTime(s.microBatch, stage), false, 1, stage};
  return std::nullopt;
}

/// The send that must follow rank `rank`'s step `s`, if it has one.
static std::optional<Keyed> sendAfter(const IdealRun &run, int rank,
                                      const Step &s) {
  const ScheduleSpec &spec = run.spec;
  const int stage = run.stageOf(rank, s), last = spec.virtualStages() - 1;
  if (s.phase == Phase::Forward && stage < last &&
      !run.sameRank(stage, stage + 1))
    return Keyed{
        Action::sendActivation(s.microBatch, s.chunk, spec.rankOf(stage + 1)),
        run.activationTime(s.microBatch, stage + 1), false, 0, stage};
  if (s.phase == Phase::Backward && stage > 0 &&
      !run.sameRank(stage, stage - 1))
    return Keyed{
        Action::sendGradient(s.microBatch, s.chunk, spec.rankOf(stage - 1)),
        run.gradientTime(s.microBatch, stage - 1), false, 1, stage - 1};
  return std::nullopt;
}

/// Per chunk, the position of the rank's last backward of it (its last W
/// where the backward is split): the chunk's gradients are then complete
/// and can be reduced over dp.
static std::vector<int> lastBackwards(const std::vector<Step> &order,
                                      int chunks, bool split) {
  const Phase last = split ? Phase::Weight : Phase::Backward;
  std::vector<int> at(chunks, -1);
  for (size_t pos = 0; pos < order.size(); ++pos)
    if (order[pos].phase == last)
      at[order[pos].chunk] = static_cast<int>(pos);
  return at;
}

/// The action that runs step `s`.
static Action actionOf(const Step &s, bool split) {
  switch (s.phase) {
  case Phase::Forward:
    return Action::forward(s.microBatch, s.chunk);
  case Phase::Backward:
    return split ? Action::backwardInput(s.microBatch, s.chunk)
                 : Action::backward(s.microBatch, s.chunk);
  case Phase::Weight:
    break;
  }
  return Action::backwardWeight(s.microBatch, s.chunk);
}

static RankActions rankList(const IdealRun &run, int rank) {
  const std::vector<Step> &order = run.orders[rank];
  const bool split = run.spec.splitsBackward();
  const std::vector<int> last = lastBackwards(order, run.spec.v, split);
  std::vector<Keyed> entries;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const Step &s = order[pos];
    if (auto recv = receiveBefore(run, rank, s))
      entries.push_back(*recv);
    entries.push_back({actionOf(s, split), run.start[rank][pos], true});
    std::optional<Keyed> send = sendAfter(run, rank, s);
    if (send)
      entries.push_back(*send);
    // The reduction goes after the chunk's last gradient has left for the
    // neighbour, so that it never delays the neighbour's backward.
    if (last[s.chunk] == static_cast<int>(pos))
      entries.back().reduceAfter = s.chunk;
  }
  std::stable_sort(entries.begin(), entries.end());
  RankActions list;
  for (const Keyed &e : entries) {
    list.push_back(e.action);
    if (e.reduceAfter)
      list.push_back(Action::reduceGradients(*e.reduceAfter));
  }
  list.push_back(Action::optimizerStep());
  return list;
}

static std::vector<RankActions> listsOf(const ScheduleSpec &spec,
                                        const ActionCosts &costs,
                                        const ComputeOrders &orders) {
  IdealRun run(spec, costs, orders);
  std::vector<RankActions> lists;
  for (int rank = 0; rank < spec.pp; ++rank)
    lists.push_back(rankList(run, rank));
  return lists;
}

/// ZB-V's lists: the fastest, simulated under `costs`, of the greedy order
/// run under equal F, B and W (its transfers placed under equal times, as
/// generateSchedule(spec) places them, and under `costs`) and the greedy
/// order run under `costs`; the first on a tie, so equal costs give the
/// equal-time lists. None wins everywhere: where W is shorter than B the
/// order made for equal times idles more than 1F1B; with transfers to
/// wait for (which the placement's ideal run leaves out), the greedy's
/// myopic picks can cost more than they save.
static std::vector<RankActions> zeroBubbleVLists(const ScheduleSpec &spec,
                                                 const ActionCosts &costs) {
  const std::vector<ComputeOrders> orders = zeroBubbleVCandidates(spec, costs);
  std::vector<std::vector<RankActions>> candidates = {
      listsOf(spec, ActionCosts(), orders[0]), listsOf(spec, costs, orders[0]),
      listsOf(spec, costs, orders[1])};
  size_t best = 0;
  double fastest = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < candidates.size(); ++i) {
    double step = simulate(candidates[i], costs, spec.layout()).stepTime;
    if (step < fastest * (1 - 1e-12)) {
      fastest = step;
      best = i;
    }
  }
  return std::move(candidates[best]);
}

std::vector<RankActions> generateSchedule(const ScheduleSpec &spec,
                                          const ActionCosts &costs) {
  validateSchedule(spec);
  validateCosts(costs, spec.virtualStages());
  if (spec.kind == ScheduleKind::ZeroBubbleV)
    return zeroBubbleVLists(spec, costs);
  return listsOf(spec, costs, computeOrders(spec));
}

} // namespace bmrt
