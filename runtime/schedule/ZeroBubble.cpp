//===- ZeroBubble.cpp - compute orders of the zero-bubble schedules -------===//
//
// The schedules that split each backward into B (the input's gradient, on
// the critical path) and W (the weights' gradient, which can wait; Qi et
// al. 2023, "Zero Bubble Pipeline Parallelism").
//
// ZB-H1 is the paper's handcrafted order (its steady state in closed
// form), whatever the costs. ZB-V comes from a deterministic greedy list
// scheduler: whenever a rank is free it runs the first of a B whose
// gradient is there, an F within the rank's memory limits, a deferred W.
// It runs under equal F, B and W and under the plan's costs, and
// generateSchedule keeps the faster; the trainer reads the plan's costs
// from trainer.json, so it runs the order the planner priced.
//
// The greedy was tried for ZB-H1 too (B > F > W, each micro-batch counted
// from F until W against 1F1B's pp - rank): that forces the last rank into
// F B W cycles, and no order can then beat a bubble of 2 (pp - 1) units,
// two thirds of 1F1B's. The paper bounds the activations (F to B) by
// pp - rank instead, and lets W lag pp - 1 micro-batches behind F.
//
// DualPipe-V follows the phases of DeepSeek's dualpipev.py (the V folding
// of DeepSeek-V3's DualPipe, run by PyTorch as ScheduleDualPipeV).
//
//===----------------------------------------------------------------------===//

#include "ScheduleOrder.h"

#include <deque>
#include <optional>
#include <set>
#include <stdexcept>

namespace bmrt {

namespace {

/// One rank's progress in ZB-V's greedy: per chunk the next micro-batch to
/// run forward and B, the W's waiting (oldest first), the chunk
/// activations held (F run, B not yet) and the chunks in flight (F run, W
/// not yet). Each chunk-0 forward also reserves a slot
/// for the same micro-batch's chunk-1 forward, so a rank can never fill
/// its memory with chunk-0 activations that need a chunk-1 forward to
/// drain.
struct GreedyRank {
  std::vector<int> nextForward, nextBackward;
  std::deque<Step> weights;
  int activations = 0;
  int inFlight = 0;
  int reserved = 0;
};

class Greedy {
public:
  Greedy(const ScheduleSpec &spec, const ActionCosts &costs);
  ComputeOrders run();

private:
  size_t cell(int microBatch, int stage) const {
    return static_cast<size_t>(microBatch) * spec.virtualStages() + stage;
  }
  int activationLimit() const;
  int inFlightLimit() const;
  /// When the input of `stage`'s next step arrives from `from`'s result
  /// ending at `end` (< 0: not yet run): a transfer later between ranks.
  double arrival(double end, int from, int stage) const;
  bool forwardReady(int rank, int chunk, double t) const;
  bool forwardFits(int rank, int chunk) const;
  bool backwardReady(int rank, int chunk, double t) const;
  std::optional<Step> pick(int rank, double t) const;
  double duration(int rank, const Step &s) const;
  void runStep(int rank, const Step &s, double t);
  bool finished(int rank) const;
  /// The next time after `t` at which a waiting rank may find work.
  std::optional<double> nextEvent(double t) const;

  const ScheduleSpec &spec;
  const ActionCosts &costs;
  std::vector<double> forwardEnd, backwardEnd; // per cell; -1: not yet run
  std::vector<double> clock;                   // per rank: free from then
  std::set<double> arrivals; // when results end and transfers arrive
  std::vector<GreedyRank> ranks;
  ComputeOrders orders;
};

} // namespace

Greedy::Greedy(const ScheduleSpec &spec, const ActionCosts &costs)
    : spec(spec), costs(costs) {
  const size_t cells = static_cast<size_t>(spec.m) * spec.virtualStages();
  forwardEnd.assign(cells, -1);
  backwardEnd.assign(cells, -1);
  clock.assign(spec.pp, 0);
  ranks.resize(spec.pp);
  for (GreedyRank &r : ranks) {
    r.nextForward.assign(spec.v, 0);
    r.nextBackward.assign(spec.v, 0);
  }
  orders.resize(spec.pp);
}

/// The memory limits of ZB-V, as the paper sets them: a forward's
/// activations are held until its B (W keeps only the smaller part it
/// reads: the layers' inputs and the output gradients), and every rank
/// holds at most 1F1B's peak, pp micro-batches of a whole stage, which is
/// 2 pp chunks. W inputs are bounded too: at most 3 pp chunks between F and
/// W. 2 pp there would be the strict "memory until W" reading, but it
/// starves the greedy (bubbles up to 11 instead of 7 at pp=8 under equal
/// times); 3 pp is the smallest multiple of pp that reaches the lower
/// bound, pp - 1 chunk forwards (the last rank cannot start earlier), for
/// every m >= 2 pp the tests sweep.
int Greedy::activationLimit() const { return 2 * spec.pp; }

int Greedy::inFlightLimit() const { return 3 * spec.pp; }

double Greedy::arrival(double end, int from, int stage) const {
  if (end < 0)
    return -1;
  return spec.rankOf(from) == spec.rankOf(stage) ? end : end + costs.transfer;
}

bool Greedy::forwardReady(int rank, int chunk, double t) const {
  const int mb = ranks[rank].nextForward[chunk];
  const int stage = spec.virtualStage(rank, chunk);
  if (mb >= spec.m)
    return false;
  if (stage == 0)
    return true;
  double ready = arrival(forwardEnd[cell(mb, stage - 1)], stage - 1, stage);
  return ready >= 0 && ready <= t;
}

bool Greedy::forwardFits(int rank, int chunk) const {
  const GreedyRank &r = ranks[rank];
  // Chunk 1 uses the slot its chunk-0 forward reserved.
  return chunk == 1 || (r.activations + r.reserved + 2 <= activationLimit() &&
                        r.inFlight + r.reserved + 2 <= inFlightLimit());
}

bool Greedy::backwardReady(int rank, int chunk, double t) const {
  const int mb = ranks[rank].nextBackward[chunk];
  const int stage = spec.virtualStage(rank, chunk);
  if (mb >= spec.m)
    return false;
  double ready =
      stage == spec.virtualStages() - 1
          ? forwardEnd[cell(mb, stage)]
          : arrival(backwardEnd[cell(mb, stage + 1)], stage + 1, stage);
  return ready >= 0 && ready <= t;
}

/// B first (it is on the critical path), the deepest chunk first; then F,
/// the deepest chunk first (it brings a micro-batch nearer its loss and
/// its memory nearer release); then the oldest W.
std::optional<Step> Greedy::pick(int rank, double t) const {
  const GreedyRank &r = ranks[rank];
  for (int c = spec.v - 1; c >= 0; --c)
    if (backwardReady(rank, c, t))
      return Step{Phase::Backward, r.nextBackward[c], c};
  for (int c = spec.v - 1; c >= 0; --c)
    if (forwardReady(rank, c, t) && forwardFits(rank, c))
      return Step{Phase::Forward, r.nextForward[c], c};
  if (!r.weights.empty())
    return r.weights.front();
  return std::nullopt;
}

double Greedy::duration(int rank, const Step &s) const {
  const int stage = spec.virtualStage(rank, s.chunk);
  switch (s.phase) {
  case Phase::Forward:
    return costs.forwardTime(stage);
  case Phase::Backward:
    return costs.backwardInputTime(stage);
  case Phase::Weight:
    return costs.backwardWeightTime(stage);
  }
  return 0;
}

void Greedy::runStep(int rank, const Step &s, double t) {
  GreedyRank &r = ranks[rank];
  const size_t at = cell(s.microBatch, spec.virtualStage(rank, s.chunk));
  const double end = t + duration(rank, s);
  switch (s.phase) {
  case Phase::Forward:
    forwardEnd[at] = end;
    ++r.nextForward[s.chunk];
    ++r.activations;
    ++r.inFlight;
    r.reserved += s.chunk == 0 ? 1 : -1;
    break;
  case Phase::Backward:
    backwardEnd[at] = end;
    ++r.nextBackward[s.chunk];
    --r.activations;
    r.weights.push_back({Phase::Weight, s.microBatch, s.chunk});
    break;
  case Phase::Weight:
    r.weights.pop_front();
    --r.inFlight;
    break;
  }
  clock[rank] = end;
  arrivals.insert(end);
  arrivals.insert(end + costs.transfer);
  orders[rank].push_back(s);
}

bool Greedy::finished(int rank) const {
  const GreedyRank &r = ranks[rank];
  for (int c = 0; c < spec.v; ++c)
    if (r.nextBackward[c] < spec.m)
      return false;
  return r.weights.empty();
}

std::optional<double> Greedy::nextEvent(double t) const {
  std::optional<double> next;
  auto after = arrivals.upper_bound(t);
  if (after != arrivals.end())
    next = *after;
  for (int rank = 0; rank < spec.pp; ++rank)
    if (!finished(rank) && clock[rank] > t && (!next || clock[rank] < *next))
      next = clock[rank];
  return next;
}

/// Event by event: at time t every free rank (its clock at t or before)
/// runs its pick, in rank order, until none can start (a step of no
/// duration may let another start at t); then time moves to the next
/// result that ends or arrives, or rank that comes free. A choice at t
/// reads only results that end by t, so no later one changes it. Under
/// unit times this is a time-stepped run, unit by unit.
ComputeOrders Greedy::run() {
  for (double t = 0;;) {
    for (bool ran = true; ran;) {
      ran = false;
      for (int rank = 0; rank < spec.pp; ++rank)
        if (!finished(rank) && clock[rank] <= t)
          if (std::optional<Step> s = pick(rank, t)) {
            runStep(rank, *s, t);
            ran = true;
          }
    }
    bool done = true;
    for (int rank = 0; rank < spec.pp; ++rank)
      done = done && finished(rank);
    if (done)
      return std::move(orders);
    std::optional<double> next = nextEvent(t);
    // Nothing ends later that could unblock a rank.
    if (!next)
      throw std::logic_error("zero-bubble greedy schedule is stuck");
    t = *next;
  }
}

/// ZB-H1 as the paper draws it (its figure 3; the steady state of rank r
/// runs F(x), B(x - (pp-1-r)), W(x - (pp-1)) for x = 0, 1, ...): the same
/// order with the micro-batches out of range left out gives the warm-up
/// (pp-1-r forwards, then r F B pairs) and the cool-down (pp-1-r B W
/// pairs, then r W's). Rank r holds 1F1B's pp - r activations (F to B) and
/// at most pp micro-batches between F and W.
static std::vector<Step> zeroBubbleH1Order(const ScheduleSpec &spec, int rank) {
  const int pp = spec.pp, m = spec.m;
  std::vector<Step> order;
  auto add = [&](Phase phase, int mb) {
    if (mb >= 0 && mb < m)
      order.push_back({phase, mb, 0});
  };
  for (int x = 0; x < m + pp - 1; ++x) {
    add(Phase::Forward, x);
    add(Phase::Backward, x - (pp - 1 - rank));
    add(Phase::Weight, x - (pp - 1));
  }
  return order;
}

// The default costs are equal F, B and W with free transfers: the times
// the paper's ZB-V is made for.
std::vector<ComputeOrders> zeroBubbleVCandidates(const ScheduleSpec &spec,
                                                 const ActionCosts &costs) {
  return {Greedy(spec, ActionCosts()).run(), Greedy(spec, costs).run()};
}

ComputeOrders zeroBubbleH1Orders(const ScheduleSpec &spec) {
  ComputeOrders orders;
  for (int rank = 0; rank < spec.pp; ++rank)
    orders.push_back(zeroBubbleH1Order(spec, rank));
  return orders;
}

namespace {

/// One rank's DualPipe-V order as it is built: per chunk the next
/// micro-batch of F and of B (each chunk takes its micro-batches in order),
/// and the W's a zero-bubble B left for later, oldest first.
class DualPipeVRank {
public:
  explicit DualPipeVRank(std::vector<Step> &order) : order(order) {}

  void forward(int chunk) {
    order.push_back({Phase::Forward, nextForward[chunk]++, chunk});
  }
  /// B, and W either right after it (a full backward) or later (weight()).
  void backward(int chunk, bool deferWeight) {
    const int mb = nextBackward[chunk]++;
    order.push_back({Phase::Backward, mb, chunk});
    Step w{Phase::Weight, mb, chunk};
    if (deferWeight)
      weights.push_back(w);
    else
      order.push_back(w);
  }
  void weight() {
    order.push_back(weights.front());
    weights.pop_front();
  }
  /// DualPipe's overlapped pair: the forward of one micro-batch on one
  /// chunk and the full backward of another on the other chunk, computed
  /// together so that one's communication hides behind the other's
  /// compute. On one stream (and here) they are two consecutive steps.
  void forwardBackward(int forwardChunk, int backwardChunk) {
    forward(forwardChunk);
    backward(backwardChunk, false);
  }

private:
  std::vector<Step> &order;
  int nextForward[2] = {0, 0}, nextBackward[2] = {0, 0};
  std::deque<Step> weights;
};

/// The cool-down's B1 B0 pairs: the second half of them defer their W's
/// (which then fill the last phases), the odd ranks from a B1, the even
/// ranks from a B0, so that every rank defers exactly rank + 1 of them.
void dualPipeVCoolDown(DualPipeVRank &r, int rank) {
  const int pairs = rank + 1;
  bool defer = false;
  for (int i = 0; i < pairs; ++i) {
    if (i == pairs / 2 && rank % 2 == 1)
      defer = true;
    r.backward(1, defer);
    if (i == pairs / 2 && rank % 2 == 0)
      defer = true;
    r.backward(0, defer);
  }
}

/// Rank `rank`'s phases (dualpipev.py's eight steps). The counts need
/// m >= 2 pp (scheduleProblem says so): the main phase runs
/// m - 2 pp + rank + 1 times.
std::vector<Step> dualPipeVRankOrder(const ScheduleSpec &spec, int rank) {
  const int pp = spec.pp, m = spec.m, below = pp - rank - 1;
  std::vector<Step> order;
  DualPipeVRank r(order);
  for (int i = 0; i < 2 * below; ++i) // warm-up: chunk 0 forwards
    r.forward(0);
  for (int i = 0; i <= rank; ++i) { // F0 F1 alternate
    r.forward(0);
    r.forward(1);
  }
  for (int i = 0; i < below; ++i) { // B1 W1 F1
    r.backward(1, true);
    r.weight();
    r.forward(1);
  }
  for (int i = 0; i < m - 2 * pp + rank + 1; ++i) { // main: two pairs
    r.forwardBackward(0, 1);
    r.forwardBackward(1, 0);
  }
  for (int i = 0; i < below; ++i) { // B1, then an F1 B0 pair
    r.backward(1, false);
    r.forwardBackward(1, 0);
  }
  dualPipeVCoolDown(r, rank);
  for (int i = 0; i < below; ++i) { // W, B0
    r.weight();
    r.backward(0, true);
  }
  for (int i = 0; i <= rank; ++i) // the W's left
    r.weight();
  return order;
}

} // namespace

ComputeOrders dualPipeVOrders(const ScheduleSpec &spec) {
  ComputeOrders orders;
  for (int rank = 0; rank < spec.pp; ++rank)
    orders.push_back(dualPipeVRankOrder(spec, rank));
  return orders;
}

} // namespace bmrt
