//===- ScheduleTest.cpp - pipeline schedules, their simulator and printer -===//
//
// Every schedule the runtime can be asked for is generated and simulated:
// no deadlock, every ordering invariant, the activation memory each schedule
// promises, and the bubble the planner's formulas predict.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Schedule.h"
#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

using namespace bmrt;

namespace {

/// The kinds with one whole backward; the split kinds (zero bubble) have a
/// sweep of their own, splitSpecs below.
constexpr ScheduleKind kKinds[] = {ScheduleKind::None, ScheduleKind::GPipe,
                                   ScheduleKind::OneFOneB,
                                   ScheduleKind::Interleaved};

/// Every (kind, pp, v, m) of the sweep that validateSchedule accepts.
std::vector<ScheduleSpec> validSpecs() {
  std::vector<ScheduleSpec> specs;
  for (ScheduleKind kind : kKinds)
    for (int pp = 1; pp <= 8; ++pp)
      for (int v = 1; v <= 4; ++v)
        for (int m = 1; m <= 32; ++m) {
          ScheduleSpec spec{kind, pp, v, m};
          try {
            validateSchedule(spec);
          } catch (const Error &) {
            continue;
          }
          specs.push_back(spec);
        }
  return specs;
}

std::string nameOf(const ScheduleSpec &s) {
  return std::string(toString(s.kind)) + " pp=" + std::to_string(s.pp) +
         " v=" + std::to_string(s.v) + " m=" + std::to_string(s.m);
}

/// The bubble fraction of cost::pipelineBubbleFraction.
double formulaBubble(const ScheduleSpec &s) {
  return static_cast<double>(s.pp - 1) / (s.m * s.v);
}

/// Megatron-LM's warm-up plus the one forward of the steady state: the
/// chunk activations rank r holds at its peak.
int expectedPeak(const ScheduleSpec &s, int rank) {
  switch (s.kind) {
  case ScheduleKind::None: // one rank: each forward's backward comes next
    return std::min(s.m, 1);
  case ScheduleKind::GPipe:
    return s.m;
  case ScheduleKind::OneFOneB:
    return std::min(s.m, s.pp - rank);
  case ScheduleKind::Interleaved:
    return std::min(s.m * s.v, 2 * (s.pp - rank - 1) + (s.v - 1) * s.pp + 1);
  case ScheduleKind::ZeroBubbleH1: // the split kinds' peaks have own tests
  case ScheduleKind::ZeroBubbleV:
  case ScheduleKind::DualPipeV:
    break;
  }
  return 0;
}

/// Start and end of each forward or backward by (backward, micro-batch,
/// virtual stage).
using Times = std::map<std::tuple<bool, int, int>, std::pair<double, double>>;

Times computeTimes(const SimulationResult &r, int pp) {
  Times times;
  for (int rank = 0; rank < pp; ++rank)
    for (const TimedAction &t : r.timeline[rank])
      if (t.action.isCompute())
        times[{t.action.kind == ActionKind::Backward, t.action.microBatch,
               t.action.chunk * pp + rank}] = {t.start, t.end};
  return times;
}

std::string errorOf(const ScheduleSpec &spec) {
  try {
    generateSchedule(spec);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(Schedule, KindNamesRoundTrip) {
  ASSERT_EQ(allScheduleKinds().size(), 7u);
  for (ScheduleKind kind : allScheduleKinds())
    EXPECT_EQ(parseScheduleKind(toString(kind)), kind);
  EXPECT_EQ(parseScheduleKind("zb-h1"), ScheduleKind::ZeroBubbleH1);
  EXPECT_EQ(parseScheduleKind("zb-v"), ScheduleKind::ZeroBubbleV);
  EXPECT_EQ(parseScheduleKind("dualpipe-v"), ScheduleKind::DualPipeV);
  EXPECT_FALSE(parseScheduleKind("zero-bubble"));
  EXPECT_FALSE(parseScheduleKind("ZB-H1"));
}

TEST(Schedule, ImpossibleSpecsAreOneLineErrors) {
  using K = ScheduleKind;
  const std::pair<ScheduleSpec, std::string> cases[] = {
      {{K::OneFOneB, 0, 1, 4}, "at least one stage, got pp=0"},
      {{K::None, 2, 1, 4}, "schedule none runs no pipeline, got pp=2"},
      {{K::GPipe, 2, 1, 0}, "at least one micro-batch, got m=0"},
      {{K::Interleaved, 2, 0, 4}, "at least one model chunk, got v=0"},
      {{K::OneFOneB, 4, 2, 8},
       "v=2 model chunks per rank need the "
       "interleaved schedule, not 1f1b"},
      {{K::GPipe, 4, 3, 8}, "need the interleaved schedule, not gpipe"},
      {{K::Interleaved, 4, 1, 8},
       "needs v >= 2 model chunks per rank, "
       "got v=1 (that is 1f1b)"},
      {{K::Interleaved, 1, 2, 4}, "needs pp >= 2 ranks, got pp=1"},
      {{K::Interleaved, 4, 2, 6},
       "the micro-batches (m=6) to be a multiple of pp=4"},
      {{K::ZeroBubbleH1, 1, 1, 4},
       "the zb-h1 schedule needs pp >= 2 ranks, got pp=1"},
      {{K::ZeroBubbleH1, 4, 2, 8},
       "v=2 model chunks per rank need the interleaved schedule, not zb-h1"},
      {{K::ZeroBubbleV, 1, 2, 4},
       "the zb-v schedule needs pp >= 2 ranks, got pp=1"},
      {{K::ZeroBubbleV, 4, 1, 8},
       "the zb-v schedule needs v=2 model chunks per rank (a V), got v=1"},
      {{K::DualPipeV, 4, 3, 8},
       "the dualpipe-v schedule needs v=2 model chunks per rank (a V), got "
       "v=3"},
      {{K::DualPipeV, 4, 2, 7},
       "the dualpipe-v schedule needs m >= 2 pp micro-batches, got m=7 with "
       "pp=4"},
  };
  for (const auto &[spec, expected] : cases) {
    std::string error = errorOf(spec);
    EXPECT_NE(error.find(expected), std::string::npos)
        << nameOf(spec) << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(Schedule, SweepCoversEveryKind) {
  std::map<ScheduleKind, int> count;
  for (const ScheduleSpec &s : validSpecs())
    ++count[s.kind];
  EXPECT_EQ(count[ScheduleKind::GPipe], 8 * 32);
  EXPECT_EQ(count[ScheduleKind::OneFOneB], 8 * 32);
  // pp 2..8, v 2..4, m the multiples of pp up to 32.
  int interleaved = 0;
  for (int pp = 2; pp <= 8; ++pp)
    interleaved += 3 * (32 / pp);
  EXPECT_EQ(count[ScheduleKind::Interleaved], interleaved);
}

// Each rank runs each of its micro-batch x chunk forwards and backwards once
// and closes with its reductions and the optimizer step.
TEST(Schedule, ListsHoldEveryStepOnce) {
  for (const ScheduleSpec &s : validSpecs()) {
    std::vector<RankActions> lists = generateSchedule(s);
    ASSERT_EQ(lists.size(), static_cast<size_t>(s.pp)) << nameOf(s);
    for (const RankActions &list : lists) {
      std::map<ActionKind, int> kinds;
      for (const Action &a : list)
        ++kinds[a.kind];
      EXPECT_EQ(kinds[ActionKind::Forward], s.m * s.v) << nameOf(s);
      EXPECT_EQ(kinds[ActionKind::Backward], s.m * s.v) << nameOf(s);
      EXPECT_EQ(kinds[ActionKind::ReduceGradients], s.v) << nameOf(s);
      EXPECT_EQ(kinds[ActionKind::OptimizerStep], 1) << nameOf(s);
      EXPECT_EQ(list.back(), Action::optimizerStep()) << nameOf(s);
    }
  }
}

TEST(Schedule, EveryShapeRunsWithoutDeadlock) {
  for (const ScheduleSpec &s : validSpecs()) {
    SimulationResult r = simulate(generateSchedule(s));
    ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
  }
}

// What the simulator checks, checked again from its timeline: micro-batches
// visit the virtual stages in order forwards and backwards, and each
// backward starts after its forward ended.
TEST(Schedule, TimelineKeepsDataDependences) {
  for (const ScheduleSpec &s : validSpecs()) {
    SimulationResult r = simulate(generateSchedule(s));
    Times t = computeTimes(r, s.pp);
    const int stages = s.virtualStages();
    ASSERT_EQ(t.size(), static_cast<size_t>(2 * s.m * stages)) << nameOf(s);
    for (int mb = 0; mb < s.m; ++mb)
      for (int st = 0; st < stages; ++st) {
        auto f = t[{false, mb, st}], b = t[{true, mb, st}];
        EXPECT_GE(b.first, f.second) << nameOf(s);
        if (st > 0) {
          EXPECT_GE(f.first, (t[{false, mb, st - 1}].second)) << nameOf(s);
        }
        if (st + 1 < stages) {
          EXPECT_GE(b.first, (t[{true, mb, st + 1}].second)) << nameOf(s);
        }
      }
  }
}

TEST(Schedule, PeakActivationsPerRank) {
  for (const ScheduleSpec &s : validSpecs()) {
    SimulationResult r = simulate(generateSchedule(s));
    for (int rank = 0; rank < s.pp; ++rank)
      EXPECT_EQ(r.peakActivations[rank], expectedPeak(s, rank))
          << nameOf(s) << " rank " << rank;
  }
}

// Equal stages, free transfers, backward = 2 x forward: the simulated
// bubble is the planner's (p-1)/m, or (p-1)/(v m) interleaved, and the step
// is (m v + p - 1) chunk forward-backward pairs.
TEST(Schedule, BubbleMatchesTheFormulas) {
  for (const ScheduleSpec &s : validSpecs()) {
    SimulationResult r = simulate(generateSchedule(s));
    EXPECT_NEAR(r.bubbleFraction, formulaBubble(s), 1e-9) << nameOf(s);
    EXPECT_NEAR(r.stepTime, 3.0 * (s.m * s.v + s.pp - 1), 1e-9) << nameOf(s);
  }
}

// Seconds instead of units scale the timeline, not the fraction.
TEST(Schedule, BubbleIsScaleFree) {
  ScheduleSpec s{ScheduleKind::Interleaved, 4, 2, 8};
  ActionCosts c;
  c.forward = 0.003;
  c.backward = 0.006;
  SimulationResult r = simulate(generateSchedule(s), c);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_NEAR(r.bubbleFraction, 3.0 / 16, 1e-9);
  EXPECT_NEAR(r.bubble, 3 * 0.009, 1e-12);
}

// Deadlock freedom does not depend on durations: unequal stages, transfers
// that cost time, reductions and an optimizer step that cost time.
TEST(Schedule, ArbitraryCostsNeverDeadlock) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> duration(0.1, 3);
  for (const ScheduleSpec &s : validSpecs()) {
    if (s.m % 3 != 0 && s.m != 1)
      continue; // a third of the sweep is plenty here
    ActionCosts c;
    for (int st = 0; st < s.virtualStages(); ++st) {
      c.stageForward.push_back(duration(random));
      c.stageBackward.push_back(duration(random));
    }
    c.transfer = duration(random);
    c.reduce = duration(random);
    c.optimizer = duration(random);
    SimulationResult r = simulate(generateSchedule(s), c);
    ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
    EXPECT_GE(r.stepTime, *std::max_element(r.busy.begin(), r.busy.end()));
  }
}

// pp=2, m=1, transfers of 0.5, sends posted: F on rank 0 [0,1], the
// activation [1,1.5], F and B on rank 1 [1.5,4.5], the gradient [4.5,5], B
// on rank 0 [5,7]. Each rank waits for the bytes it receives (busy) and not
// for those it sends.
TEST(Schedule, TransfersTakeTimeOnTheReceiver) {
  ActionCosts c;
  c.transfer = 0.5;
  SimulationResult r =
      simulate(generateSchedule({ScheduleKind::OneFOneB, 2, 1, 1}), c);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_DOUBLE_EQ(r.stepTime, 7);
  EXPECT_DOUBLE_EQ(r.busy[0], 3.5);
  EXPECT_DOUBLE_EQ(r.busy[1], 3.5);
  EXPECT_DOUBLE_EQ(r.bubble, 3.5);
  // rank 0: F0 sendA0>1 recvG0<1 B0 reduce step
  ASSERT_EQ(r.timeline[0].size(), 6u);
  EXPECT_EQ(r.timeline[0][1].action, Action::sendActivation(0, 0, 1));
  EXPECT_DOUBLE_EQ(r.timeline[0][1].start, 1);
  EXPECT_DOUBLE_EQ(r.timeline[0][1].end, 1.5);
  EXPECT_DOUBLE_EQ(r.timeline[0][2].start, 1); // waits from F0's end
  EXPECT_DOUBLE_EQ(r.timeline[0][2].end, 5);
}

// The same with blocking sends: the transfers are busy time on both ranks.
TEST(Schedule, BlockingTransfersTakeTimeOnBothRanks) {
  ActionCosts c;
  c.transfer = 0.5;
  c.blockingSends = true;
  SimulationResult r =
      simulate(generateSchedule({ScheduleKind::OneFOneB, 2, 1, 1}), c);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_DOUBLE_EQ(r.stepTime, 7);
  EXPECT_DOUBLE_EQ(r.busy[0], 4);
  EXPECT_DOUBLE_EQ(r.busy[1], 4);
  EXPECT_DOUBLE_EQ(r.bubble, 3);
}

// Blocking sends cost GPipe and 1F1B nothing; under interleaving a rank
// would have to send while computing, so the trainer posts its sends.
TEST(Schedule, BlockingSendsOnlyCostInterleaving) {
  ActionCosts blocking;
  blocking.blockingSends = true;
  for (const ScheduleSpec &s : validSpecs()) {
    SimulationResult r = simulate(generateSchedule(s), blocking);
    ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
    if (s.kind == ScheduleKind::Interleaved)
      EXPECT_GE(r.bubbleFraction, formulaBubble(s) - 1e-9) << nameOf(s);
    else
      EXPECT_NEAR(r.bubbleFraction, formulaBubble(s), 1e-9) << nameOf(s);
  }
  SimulationResult r = simulate(
      generateSchedule({ScheduleKind::Interleaved, 2, 2, 4}), blocking);
  EXPECT_GT(r.stepTime, 27);
}

namespace {

/// The compute orders of `lists` run with each step starting once its rank
/// is free and its input computed: the fastest any placement of the
/// transfers could run them (free transfers).
double computeOrderTime(const std::vector<RankActions> &lists,
                        const ActionCosts &c, int microBatches) {
  const int pp = static_cast<int>(lists.size());
  int chunks = 1;
  for (const RankActions &list : lists)
    for (const Action &a : list)
      chunks = std::max(chunks, a.chunk + 1);
  const int stages = pp * chunks;
  std::vector<double> forwardEnd(microBatches * stages, -1),
      backwardEnd(microBatches * stages, -1), clock(pp, 0);
  std::vector<size_t> next(pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r)
      for (; next[r] < lists[r].size(); ++next[r]) {
        const Action &a = lists[r][next[r]];
        if (!a.isCompute())
          continue;
        const int s = a.chunk * pp + r, i = a.microBatch * stages + s;
        const bool forward = a.kind == ActionKind::Forward;
        double ready =
            forward ? (s == 0 ? 0 : forwardEnd[i - 1])
                    : (s == stages - 1 ? forwardEnd[i] : backwardEnd[i + 1]);
        if (ready < 0)
          break;
        clock[r] = std::max(clock[r], ready) +
                   (forward ? c.forwardTime(s) : c.backwardTime(s));
        (forward ? forwardEnd : backwardEnd)[i] = clock[r];
        progress = true;
      }
  }
  return *std::max_element(clock.begin(), clock.end());
}

} // namespace

// Lists generated for unequal stages and another backward/forward ratio
// run, with posted sends, exactly as fast as their compute order allows:
// no rank ever waits in a receive for data that exists.
TEST(Schedule, ListsForGivenCostsLoseNothing) {
  std::mt19937 random(11);
  std::uniform_real_distribution<double> spread(0.7, 1.3);
  for (double ratio : {1.0, 2.0, 3.0})
    for (const ScheduleSpec &s : validSpecs()) {
      if (s.m % 4 != 0 && s.m > 3)
        continue;
      ActionCosts c;
      for (int st = 0; st < s.virtualStages(); ++st) {
        c.stageForward.push_back(spread(random));
        c.stageBackward.push_back(ratio * c.stageForward.back() *
                                  spread(random));
      }
      std::vector<RankActions> lists = generateSchedule(s, c);
      SimulationResult r = simulate(lists, c);
      ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
      EXPECT_NEAR(r.stepTime, computeOrderTime(lists, c, s.m), 1e-9)
          << nameOf(s) << " ratio " << ratio;
    }
}

// The planner's partition may leave a trailing stage empty: a stage that
// takes no time still gets its sends after its steps.
TEST(Schedule, StagesWithoutTimeStillOrder) {
  ActionCosts c;
  c.stageForward = {1, 1, 0};
  c.stageBackward = {2, 2, 0};
  for (int m : {1, 3, 6}) {
    ScheduleSpec s{ScheduleKind::OneFOneB, 3, 1, m};
    std::vector<RankActions> lists = generateSchedule(s, c);
    SimulationResult r = simulate(lists, c);
    ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
    EXPECT_NEAR(r.stepTime, computeOrderTime(lists, c, m), 1e-6) << nameOf(s);
  }
}

TEST(Schedule, PerStageCostsMustFitTheLists) {
  ActionCosts c;
  c.stageForward = {1, 2, 3};
  try {
    simulate(generateSchedule({ScheduleKind::GPipe, 2, 1, 2}), c);
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "the schedule costs give forward times for 3 "
                           "stages, the pipeline has 2 virtual stages");
  }
}

// The backward defaults to twice each stage's own forward.
TEST(Schedule, BackwardDefaultsToTwiceForward) {
  ActionCosts c;
  c.stageForward = {1, 3};
  EXPECT_DOUBLE_EQ(c.backwardTime(0), 2);
  EXPECT_DOUBLE_EQ(c.backwardTime(1), 6);
  c.backward = 5;
  EXPECT_DOUBLE_EQ(c.backwardTime(1), 5);
}

namespace {

/// The position of `a` in `list`.
size_t find(const RankActions &list, const Action &a) {
  auto it = std::find(list.begin(), list.end(), a);
  EXPECT_NE(it, list.end()) << formatAction(a, false);
  return it - list.begin();
}

const BlockedRank *blockedRank(const SimulationResult &r, int rank) {
  for (const BlockedRank &b : r.deadlock)
    if (b.rank == rank)
      return &b;
  return nullptr;
}

} // namespace

// Rank 0 never sends micro-batch 1's activation: rank 1 waits for it and
// rank 0 for a gradient rank 1 can no longer send.
TEST(Schedule, ReceiveWithoutSendIsADeadlock) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::OneFOneB, 2, 1, 2});
  lists[0].erase(lists[0].begin() +
                 find(lists[0], Action::sendActivation(1, 0, 1)));
  SimulationResult r = simulate(lists);
  ASSERT_EQ(r.deadlock.size(), 2u) << r.describe();
  const BlockedRank *one = blockedRank(r, 1);
  ASSERT_TRUE(one);
  EXPECT_EQ(one->action, Action::recvActivation(1, 0, 0));
  ASSERT_TRUE(blockedRank(r, 0));
  EXPECT_EQ(blockedRank(r, 0)->action, Action::recvGradient(0, 0, 1));
  // rank 0: F0 sendA0>1 F1 recvG0<1 ...; rank 1: recvA0<0 F0 recvA1<0 ...
  EXPECT_EQ(r.describe(),
            "deadlock: rank 0 waits at #3 recvG0<1 (rank 1 is at recvA1<0); "
            "rank 1 waits at #2 recvA1<0 (rank 0 is at recvG0<1)");
}

// Rank 0 waits for a gradient before sending the activation that rank 1
// waits for before its backward: both block in a receive.
TEST(Schedule, SwappedReceiveIsADeadlock) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::OneFOneB, 2, 1, 2});
  size_t send = find(lists[0], Action::sendActivation(1, 0, 1));
  size_t recv = find(lists[0], Action::recvGradient(0, 0, 1));
  ASSERT_EQ(send + 1, recv);
  std::swap(lists[0][send], lists[0][recv]);
  SimulationResult r = simulate(lists);
  ASSERT_EQ(r.deadlock.size(), 2u) << r.describe();
  EXPECT_EQ(blockedRank(r, 0)->action, Action::recvGradient(0, 0, 1));
  EXPECT_EQ(blockedRank(r, 1)->action, Action::recvActivation(1, 0, 0));
}

// Rank 1 in the naive order, receiving the next activation only after
// sending its gradient back, while rank 0 sends that activation before
// receiving the gradient: under rendezvous both block in a send, the
// deadlock of naive blocking 1F1B.
TEST(Schedule, NaiveBlocking1F1BIsADeadlock) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::OneFOneB, 2, 1, 2});
  RankActions &one = lists[1];
  size_t recv = find(one, Action::recvActivation(1, 0, 0));
  Action moved = one[recv];
  one.erase(one.begin() + recv);
  one.insert(one.begin() + find(one, Action::sendGradient(0, 0, 0)) + 1, moved);
  SimulationResult r = simulate(lists);
  ASSERT_FALSE(r.ok());
  ASSERT_TRUE(blockedRank(r, 0));
  ASSERT_TRUE(blockedRank(r, 1));
  EXPECT_EQ(blockedRank(r, 0)->action, Action::sendActivation(1, 0, 1));
  EXPECT_EQ(blockedRank(r, 1)->action, Action::sendGradient(0, 0, 0));
  EXPECT_EQ(r.describe(),
            "deadlock: rank 0 waits at #3 sendA1>1 (rank 1 is at sendG0>0); "
            "rank 1 waits at #3 sendG0>0 (rank 0 is at sendA1>1)");
}

// An interleaved list whose last rank sends chunk 0 to the wrong rank.
TEST(Schedule, TransferToTheWrongRankIsReported) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::Interleaved, 3, 2, 3});
  size_t at = find(lists[2], Action::sendActivation(0, 0, 0));
  lists[2][at].peer = 1;
  SimulationResult r = simulate(lists);
  ASSERT_EQ(r.violations.size(), 1u) << r.describe();
  EXPECT_EQ(r.violations[0],
            "rank 2 action #" + std::to_string(at) +
                " sendA0.0>1 names rank 1, but virtual stage 3 is on rank 0");
}

TEST(Schedule, BackwardBeforeForwardIsAViolation) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::GPipe, 1, 1, 2});
  // rank 0: F0 F1 B0 B1 reduce step
  std::swap(lists[0][0], lists[0][2]);
  SimulationResult r = simulate(lists);
  EXPECT_TRUE(r.deadlock.empty());
  ASSERT_FALSE(r.violations.empty());
  EXPECT_EQ(r.violations[0], "rank 0 runs B0 before its forward");
}

TEST(Schedule, MissingStepsAndReductionsAreViolations) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::OneFOneB, 1, 1, 3});
  // rank 0: F0 B0 F1 B1 F2 B2 reduce step; drop F1 B1, then the reduction.
  lists[0].erase(lists[0].begin() + 2, lists[0].begin() + 4);
  lists[0].erase(lists[0].end() - 2);
  SimulationResult r = simulate(lists);
  std::vector<std::string> expected = {
      "rank 0 runs the optimizer step before reducing chunk 0",
      "no forward of micro-batch 1 on virtual stage 0 (rank 0, chunk 0)",
      "no backward of micro-batch 1 on virtual stage 0 (rank 0, chunk 0)",
      "rank 0 never reduces chunk 0"};
  EXPECT_EQ(r.violations, expected);
}

TEST(Schedule, ForwardBeforeItsInputIsAViolation) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::GPipe, 2, 1, 1});
  // rank 1: recvA0<0 F0 B0 sendG0>0 reduce step; run F0 first.
  std::swap(lists[1][0], lists[1][1]);
  SimulationResult r = simulate(lists);
  EXPECT_TRUE(r.deadlock.empty()) << r.describe();
  ASSERT_FALSE(r.violations.empty());
  EXPECT_EQ(r.violations[0], "rank 1 runs F0 before receiving its input");
}

TEST(Schedule, ActionNames) {
  EXPECT_EQ(formatAction(Action::forward(3, 1), true), "F3.1");
  EXPECT_EQ(formatAction(Action::forward(3, 0), false), "F3");
  EXPECT_EQ(formatAction(Action::backward(12, 0), false), "B12");
  EXPECT_EQ(formatAction(Action::sendActivation(3, 0, 1), false), "sendA3>1");
  EXPECT_EQ(formatAction(Action::recvActivation(3, 1, 0), true), "recvA3.1<0");
  EXPECT_EQ(formatAction(Action::sendGradient(3, 0, 0), false), "sendG3>0");
  EXPECT_EQ(formatAction(Action::recvGradient(3, 0, 1), false), "recvG3<1");
  EXPECT_EQ(formatAction(Action::reduceGradients(1), true), "reduce.1");
  EXPECT_EQ(formatAction(Action::optimizerStep(), false), "step");
}

// 1F1B over two ranks and three micro-batches, every step one unit: rank 0
// runs one forward ahead and waits twice for gradients.
TEST(Schedule, PrintsTheGrid) {
  ScheduleSpec s{ScheduleKind::OneFOneB, 2, 1, 3};
  ActionCosts unit;
  unit.backward = 1;
  std::vector<RankActions> lists = generateSchedule(s, unit);
  SimulationResult r = simulate(lists, unit);
  EXPECT_EQ(formatTimelineGrid(r, false), "time   | 0  1  2  3  4  5  6  7\n"
                                          "rank 0 | F0 F1 .  B0 F2 B1 .  B2\n"
                                          "rank 1 | .  F0 B0 F1 B1 F2 B2 .\n");
  EXPECT_EQ(formatActionLists(lists, false),
            "rank 0: F0 sendA0>1 F1 sendA1>1 recvG0<1 B0 F2 sendA2>1 "
            "recvG1<1 B1 recvG2<1 B2 reduce step\n"
            "rank 1: recvA0<0 F0 recvA1<0 B0 sendG0>0 F1 B1 recvA2<0 "
            "sendG1>0 F2 B2 sendG2>0 reduce step\n");
}

// Backwards twice as long continue with "-"; chunks are printed.
TEST(Schedule, PrintsLongActionsAndChunks) {
  ScheduleSpec s{ScheduleKind::Interleaved, 2, 2, 2};
  SimulationResult r = simulate(generateSchedule(s));
  std::string grid = formatTimelineGrid(r, true);
  EXPECT_EQ(grid.substr(0, grid.find('\n')),
            "time   | 0    1    2    3    4    5    6    7    8    9    10   "
            "11   12   13   14");
  EXPECT_NE(grid.find("rank 0 | F0.0 F1.0 F0.1 F1.1"), std::string::npos)
      << grid;
  EXPECT_NE(grid.find("B0.1 -"), std::string::npos) << grid;
}

// A step too long for the width wraps into bands, each with its own time
// row and every rank.
TEST(Schedule, WideGridsWrap) {
  ScheduleSpec s{ScheduleKind::OneFOneB, 8, 1, 16};
  SimulationResult r = simulate(generateSchedule(s));
  ASSERT_DOUBLE_EQ(r.stepTime, 69);
  std::string grid = formatTimelineGrid(r, false, 1, 100);
  size_t lines = 0, longest = 0, bands = 0;
  for (size_t at = 0; at < grid.size();) {
    size_t end = grid.find('\n', at);
    longest = std::max(longest, end - at);
    if (grid.compare(at, 4, "time") == 0)
      ++bands;
    lines += end > at;
    at = end + 1;
  }
  EXPECT_LE(longest, 100u);
  // Columns of 4 characters after "rank 8 |": 23 a band, 69 in 3 bands.
  EXPECT_EQ(bands, 3u);
  EXPECT_EQ(lines, 3u * 9);
  EXPECT_EQ(formatTimelineGrid(r, false, 1, 0).find("\n\n"), std::string::npos);
}

TEST(Schedule, PrintScheduleNamesTheShape) {
  std::string text = printSchedule({ScheduleKind::GPipe, 4, 1, 8});
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "schedule gpipe: pp=4 v=1 m=8 (no deadlock)");
  EXPECT_NE(text.find("step 33, bubble 0.375 of the compute ((p-1)/(v m) = "
                      "0.375); peak activations per rank: 8 8 8 8\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("instructions:\nrank 0: F0 sendA0>1"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// The zero-bubble schedules: ZB-H1, ZB-V and DualPipe-V, which split each
// backward into B and W.
//===----------------------------------------------------------------------===//

namespace {

/// Every split-kind shape the tests sweep: pp in {2, 3, 4, 8}, m up to
/// 3 pp where the kind allows it.
std::vector<ScheduleSpec> splitSpecs() {
  std::vector<ScheduleSpec> specs;
  for (ScheduleKind kind : allScheduleKinds()) {
    if (!splitsBackward(kind))
      continue;
    const int v = layoutOf(kind) == StageLayout::V ? 2 : 1;
    for (int pp : {2, 3, 4, 8})
      for (int m = 1; m <= 3 * pp; ++m) {
        ScheduleSpec spec{kind, pp, v, m};
        if (!scheduleProblem(spec))
          specs.push_back(spec);
      }
  }
  return specs;
}

SimulationResult simulateSpec(const ScheduleSpec &s,
                              const ActionCosts &c = {}) {
  return simulate(generateSchedule(s, c), c, s.layout());
}

/// Random per-stage times with W a random part of each backward, transfers,
/// reductions and an optimizer step that cost time.
ActionCosts randomCosts(const ScheduleSpec &s, std::mt19937 &random) {
  std::uniform_real_distribution<double> duration(0.1, 3), part(0.2, 0.8);
  ActionCosts c;
  for (int st = 0; st < s.virtualStages(); ++st) {
    c.stageForward.push_back(duration(random));
    c.stageBackward.push_back(duration(random));
    c.stageBackwardWeight.push_back(part(random) * c.stageBackward.back());
  }
  c.transfer = duration(random);
  c.reduce = duration(random);
  c.optimizer = duration(random);
  return c;
}

/// Each rank's forwards, B's and W's, in list order.
std::vector<RankActions> computeOnly(const std::vector<RankActions> &lists) {
  std::vector<RankActions> steps(lists.size());
  for (size_t r = 0; r < lists.size(); ++r)
    for (const Action &a : lists[r])
      if (a.isCompute())
        steps[r].push_back(a);
  return steps;
}

/// The most chunk steps `list` holds between a forward and its W.
int peakInFlight(const RankActions &list) {
  int live = 0, peak = 0;
  for (const Action &a : list) {
    if (a.kind == ActionKind::Forward)
      peak = std::max(peak, ++live);
    if (a.kind == ActionKind::BackwardWeight)
      --live;
  }
  return peak;
}

/// Start and end of each compute action by (kind, micro-batch, virtual
/// stage), through the spec's stage layout.
using SplitTimes =
    std::map<std::tuple<ActionKind, int, int>, std::pair<double, double>>;

SplitTimes splitTimes(const SimulationResult &r, const ScheduleSpec &s) {
  SplitTimes times;
  for (int rank = 0; rank < s.pp; ++rank)
    for (const TimedAction &t : r.timeline[rank])
      if (t.action.isCompute())
        times[{t.action.kind, t.action.microBatch,
               s.virtualStage(rank, t.action.chunk)}] = {t.start, t.end};
  return times;
}

/// computeOrderTime for the split kinds: every step as soon as its rank is
/// free and its input computed, on the spec's stage layout.
double splitComputeOrderTime(const std::vector<RankActions> &lists,
                             const ActionCosts &c, const ScheduleSpec &s) {
  const int last = s.virtualStages() - 1;
  std::map<std::tuple<ActionKind, int, int>, double> ends;
  auto ended = [&](ActionKind kind, int mb, int st) {
    auto it = ends.find({kind, mb, st});
    return it == ends.end() ? -1.0 : it->second;
  };
  std::vector<double> clock(s.pp, 0);
  std::vector<size_t> next(s.pp, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < s.pp; ++r)
      for (; next[r] < lists[r].size(); ++next[r]) {
        const Action &a = lists[r][next[r]];
        if (!a.isCompute())
          continue;
        const int st = s.virtualStage(r, a.chunk), mb = a.microBatch;
        double ready = 0, time = c.forwardTime(st);
        if (a.kind == ActionKind::Forward) {
          ready = st == 0 ? 0 : ended(ActionKind::Forward, mb, st - 1);
        } else if (a.kind == ActionKind::BackwardInput) {
          ready = st == last ? ended(ActionKind::Forward, mb, st)
                             : ended(ActionKind::BackwardInput, mb, st + 1);
          time = c.backwardInputTime(st);
        } else {
          ready = ended(ActionKind::BackwardInput, mb, st);
          time = c.backwardWeightTime(st);
        }
        if (ready < 0)
          break;
        clock[r] = std::max(clock[r], ready) + time;
        ends[{a.kind, mb, st}] = clock[r];
        progress = true;
      }
  }
  return *std::max_element(clock.begin(), clock.end());
}

} // namespace

TEST(ZeroBubble, SweepCoversEveryKind) {
  std::map<ScheduleKind, int> count;
  for (const ScheduleSpec &s : splitSpecs())
    ++count[s.kind];
  EXPECT_EQ(count[ScheduleKind::ZeroBubbleH1], 3 * (2 + 3 + 4 + 8));
  EXPECT_EQ(count[ScheduleKind::ZeroBubbleV], 3 * (2 + 3 + 4 + 8));
  // m = 2 pp .. 3 pp.
  EXPECT_EQ(count[ScheduleKind::DualPipeV], 3 + 4 + 5 + 9);
}

// Chunk 0 of rank r is stage r; chunk 1 is stage 2 pp - 1 - r.
TEST(ZeroBubble, StageLayoutsRoundTrip) {
  for (int pp = 1; pp <= 8; ++pp) {
    for (int st = 0; st < 2 * pp; ++st) {
      const int rank = rankOfStage(StageLayout::V, pp, st);
      const int chunk = chunkOfStage(StageLayout::V, pp, st);
      EXPECT_EQ(virtualStageOf(StageLayout::V, pp, rank, chunk), st);
      EXPECT_EQ(chunk, st < pp ? 0 : 1);
    }
    for (int st = 0; st < 4 * pp; ++st)
      EXPECT_EQ(virtualStageOf(StageLayout::Loop, pp,
                               rankOfStage(StageLayout::Loop, pp, st),
                               chunkOfStage(StageLayout::Loop, pp, st)),
                st);
  }
  EXPECT_EQ(virtualStageOf(StageLayout::V, 4, 0, 1), 7);
  EXPECT_EQ(virtualStageOf(StageLayout::V, 4, 3, 1), 4);
  EXPECT_EQ(virtualStageOf(StageLayout::Loop, 4, 3, 1), 7);
  ScheduleSpec s{ScheduleKind::ZeroBubbleV, 4, 2, 8};
  EXPECT_EQ(s.virtualStage(3, 1), 4);
  EXPECT_EQ(s.rankOf(5), 2);
  EXPECT_EQ(s.chunkOf(5), 1);
  EXPECT_EQ(layoutOf(ScheduleKind::DualPipeV), StageLayout::V);
  EXPECT_EQ(layoutOf(ScheduleKind::ZeroBubbleH1), StageLayout::Loop);
  EXPECT_TRUE(splitsBackward(ScheduleKind::ZeroBubbleH1));
  EXPECT_FALSE(splitsBackward(ScheduleKind::Interleaved));
}

// Each (micro-batch, virtual stage) has one F, one B and one W, on the
// stage's rank; each chunk is reduced once, after its last W.
TEST(ZeroBubble, ListsHoldEveryStepOnce) {
  for (const ScheduleSpec &s : splitSpecs()) {
    std::vector<RankActions> lists = generateSchedule(s);
    ASSERT_EQ(lists.size(), static_cast<size_t>(s.pp)) << nameOf(s);
    std::map<std::tuple<ActionKind, int, int>, int> steps;
    for (int rank = 0; rank < s.pp; ++rank) {
      const RankActions &list = lists[rank];
      std::vector<size_t> lastWeight(s.v, 0), reduce(s.v, 0);
      for (size_t i = 0; i < list.size(); ++i) {
        const Action &a = list[i];
        EXPECT_NE(a.kind, ActionKind::Backward) << nameOf(s);
        if (a.isCompute())
          ++steps[{a.kind, a.microBatch, s.virtualStage(rank, a.chunk)}];
        if (a.kind == ActionKind::BackwardWeight)
          lastWeight[a.chunk] = i;
        if (a.kind == ActionKind::ReduceGradients)
          reduce[a.chunk] = i;
      }
      for (int c = 0; c < s.v; ++c)
        EXPECT_EQ(reduce[c], lastWeight[c] + 1) << nameOf(s);
      EXPECT_EQ(list.back(), Action::optimizerStep()) << nameOf(s);
    }
    EXPECT_EQ(steps.size(), static_cast<size_t>(3 * s.m * s.virtualStages()))
        << nameOf(s);
    for (const auto &[step, count] : steps)
      EXPECT_EQ(count, 1) << nameOf(s);
  }
}

TEST(ZeroBubble, EveryShapeRunsWithoutDeadlock) {
  std::mt19937 random(5);
  ActionCosts blocking;
  blocking.blockingSends = true;
  for (const ScheduleSpec &s : splitSpecs()) {
    for (const ActionCosts &c :
         {ActionCosts{}, blocking, randomCosts(s, random)}) {
      SimulationResult r = simulateSpec(s, c);
      ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
      EXPECT_GE(r.stepTime, *std::max_element(r.busy.begin(), r.busy.end()));
    }
  }
}

// From the timeline: forwards visit the stages in order, B's in reverse,
// each B after its forward and each W after its B.
TEST(ZeroBubble, TimelineKeepsDataDependences) {
  using K = ActionKind;
  std::mt19937 random(3);
  for (const ScheduleSpec &s : splitSpecs()) {
    SimulationResult r = simulateSpec(s, randomCosts(s, random));
    SplitTimes t = splitTimes(r, s);
    const int stages = s.virtualStages();
    ASSERT_EQ(t.size(), static_cast<size_t>(3 * s.m * stages)) << nameOf(s);
    for (int mb = 0; mb < s.m; ++mb)
      for (int st = 0; st < stages; ++st) {
        auto f = t[{K::Forward, mb, st}], b = t[{K::BackwardInput, mb, st}];
        EXPECT_GE(b.first, f.second) << nameOf(s);
        EXPECT_GE((t[{K::BackwardWeight, mb, st}].first), b.second)
            << nameOf(s);
        if (st > 0) {
          EXPECT_GE(f.first, (t[{K::Forward, mb, st - 1}].second)) << nameOf(s);
        }
        if (st + 1 < stages) {
          EXPECT_GE(b.first, (t[{K::BackwardInput, mb, st + 1}].second))
              << nameOf(s);
        }
      }
  }
}

// A gradient is received before the B that reads it and sent after that B,
// before its W: W never delays the neighbour. The V's middle hop (rank
// pp - 1, stage pp - 1 to pp and back) has no transfer at all.
TEST(ZeroBubble, GradientsLeaveAfterBNotW) {
  for (const ScheduleSpec &s : splitSpecs()) {
    std::vector<RankActions> lists = generateSchedule(s);
    for (int rank = 0; rank < s.pp; ++rank) {
      const RankActions &list = lists[rank];
      for (size_t i = 0; i < list.size(); ++i) {
        const Action &a = list[i];
        EXPECT_NE(a.peer, rank) << nameOf(s) << " " << formatAction(a, true);
        const Action b = Action::backwardInput(a.microBatch, a.chunk);
        const Action w = Action::backwardWeight(a.microBatch, a.chunk);
        if (a.kind == ActionKind::SendGradient) {
          EXPECT_LT(find(list, b), i) << nameOf(s);
          EXPECT_GT(find(list, w), i) << nameOf(s);
        }
        if (a.kind == ActionKind::RecvGradient) {
          EXPECT_GT(find(list, b), i) << nameOf(s);
        }
      }
    }
    if (s.layout() == StageLayout::V) {
      const RankActions &middle = lists[s.pp - 1];
      EXPECT_EQ(std::count(middle.begin(), middle.end(),
                           Action::sendActivation(0, 0, s.pp - 1)),
                0);
    }
  }
}

// The planner and the trainer pass different costs and must run the same
// steps in the same order.
// ZB-H1's and DualPipe-V's compute orders are fixed; ZB-V's is the faster
// under the costs of its greedy run under equal times and under the costs,
// so it is never slower than the equal-time order and, with equal costs,
// is that order.
TEST(ZeroBubble, ComputeOrdersDoNotDependOnCosts) {
  std::mt19937 random(13);
  for (const ScheduleSpec &s : splitSpecs()) {
    ActionCosts c = randomCosts(s, random);
    if (s.kind != ScheduleKind::ZeroBubbleV) {
      EXPECT_EQ(computeOnly(generateSchedule(s)),
                computeOnly(generateSchedule(s, c)))
          << nameOf(s);
      continue;
    }
    ActionCosts equal;
    equal.forward = 3;
    equal.backward = 6;
    equal.backwardWeight = 3;
    EXPECT_EQ(computeOnly(generateSchedule(s)),
              computeOnly(generateSchedule(s, equal)))
        << nameOf(s);
    // The equal-time order's lists, timed under c.
    std::vector<RankActions> equalOrder = generateSchedule(s);
    double chosen = simulate(generateSchedule(s, c), c, s.layout()).stepTime;
    double fixed = simulate(equalOrder, c, s.layout()).stepTime;
    EXPECT_LE(chosen, fixed * (1 + 1e-9)) << nameOf(s);
  }
}

// Where W is a third of B, ZB-V's order made for the costs idles less than
// the equal-time one, and less than 1F1B (per rank's share: forward 1, B
// 1.5, W 0.5, transfers 0.05; pp=8, m=32: 21.8 against 53.8 and 23.3 time
// units).
TEST(ZeroBubble, VOrderFollowsTheCosts) {
  ActionCosts c;
  c.forward = 0.5;
  c.backward = 1;
  c.backwardWeight = 0.25;
  c.transfer = 0.05;
  ScheduleSpec v{ScheduleKind::ZeroBubbleV, 8, 2, 32};
  double chosen = simulate(generateSchedule(v, c), c, v.layout()).bubble;
  double fixed = simulate(generateSchedule(v), c, v.layout()).bubble;
  ActionCosts whole = c;
  whole.forward = 1;
  whole.backward = 2;
  whole.backwardWeight = 0.5;
  ScheduleSpec oneF{ScheduleKind::OneFOneB, 8, 1, 32};
  double oneFOneB = simulate(generateSchedule(oneF, whole), whole).bubble;
  EXPECT_LT(chosen, fixed / 2);
  EXPECT_LT(chosen, oneFOneB);
}

// Lists generated for given costs run, with posted sends, exactly as fast
// as their compute order allows.
TEST(ZeroBubble, ListsForGivenCostsLoseNothing) {
  std::mt19937 random(17);
  std::uniform_real_distribution<double> spread(0.7, 1.3), part(0.3, 0.7);
  for (double ratio : {1.0, 2.0, 3.0})
    for (const ScheduleSpec &s : splitSpecs()) {
      ActionCosts c;
      for (int st = 0; st < s.virtualStages(); ++st) {
        c.stageForward.push_back(spread(random));
        c.stageBackward.push_back(ratio * c.stageForward.back() *
                                  spread(random));
        c.stageBackwardWeight.push_back(part(random) * c.stageBackward.back());
      }
      std::vector<RankActions> lists = generateSchedule(s, c);
      SimulationResult r = simulate(lists, c, s.layout());
      ASSERT_TRUE(r.ok()) << nameOf(s) << ": " << r.describe();
      EXPECT_NEAR(r.stepTime, splitComputeOrderTime(lists, c, s), 1e-9)
          << nameOf(s) << " ratio " << ratio;
    }
}

// ZB-H1 holds 1F1B's activations on every rank (F to B: pp - rank), and no
// rank more than pp micro-batches between F and W (the paper's steady
// state: W lags pp - 1 micro-batches behind F).
TEST(ZeroBubble, H1KeepsOneFOneBsMemory) {
  for (const ScheduleSpec &s : splitSpecs()) {
    if (s.kind != ScheduleKind::ZeroBubbleH1)
      continue;
    std::vector<RankActions> lists = generateSchedule(s);
    SimulationResult zb = simulate(lists);
    SimulationResult oneF =
        simulate(generateSchedule({ScheduleKind::OneFOneB, s.pp, 1, s.m}));
    for (int rank = 0; rank < s.pp; ++rank) {
      EXPECT_LE(zb.peakActivations[rank], oneF.peakActivations[rank])
          << nameOf(s) << " rank " << rank;
      EXPECT_LE(peakInFlight(lists[rank]), std::min(s.m, s.pp)) << nameOf(s);
    }
  }
}

// ZB-V holds at most 1F1B's first-rank peak, pp micro-batches of a whole
// stage, 2 pp chunks, from F to B on every rank, and at most 3 pp chunks
// from F to W. DualPipe-V holds one chunk more on every rank: the F of an
// F&B pair starts before the B of the pair frees its activations.
TEST(ZeroBubble, VKeepsOneFOneBsPeak) {
  for (const ScheduleSpec &s : splitSpecs()) {
    if (s.layout() != StageLayout::V)
      continue;
    std::vector<RankActions> lists = generateSchedule(s);
    SimulationResult r = simulate(lists, {}, StageLayout::V);
    const bool dualPipe = s.kind == ScheduleKind::DualPipeV;
    for (int rank = 0; rank < s.pp; ++rank) {
      EXPECT_LE(r.peakActivations[rank], 2 * s.pp + (dualPipe ? 1 : 0))
          << nameOf(s);
      if (!dualPipe) {
        EXPECT_LE(peakInFlight(lists[rank]), 3 * s.pp) << nameOf(s);
      }
    }
  }
}

// F = B = W = 1, free transfers. 1F1B's bubble is (p-1)(F+B+W) = 3 (p-1);
// ZB-H1's is the paper's (p-1)(F+B-W) = p-1 exactly once m >= p, a third.
TEST(ZeroBubble, H1BubbleIsAThirdOfOneFOneBs) {
  for (int pp = 2; pp <= 8; ++pp)
    for (int m = pp; m <= 3 * pp; ++m) {
      ScheduleSpec s{ScheduleKind::ZeroBubbleH1, pp, 1, m};
      SimulationResult zb = simulateSpec(s);
      SimulationResult oneF =
          simulate(generateSchedule({ScheduleKind::OneFOneB, pp, 1, m}));
      ASSERT_TRUE(zb.ok()) << nameOf(s);
      EXPECT_NEAR(zb.bubble, (pp - 1) * (1 + 1 - 1), 1e-9) << nameOf(s);
      EXPECT_NEAR(oneF.bubble, 3 * (pp - 1), 1e-9) << nameOf(s);
      EXPECT_NEAR(zb.stepTime, 3 * m + pp - 1, 1e-9) << nameOf(s);
    }
}

// The V schedules reach the lower bound once m >= 2 pp: the last rank
// cannot start before pp - 1 chunk forwards, and every rank has the same
// work, so the bubble is at least pp - 1 units. That is half ZB-H1's
// fraction and a sixth of 1F1B's at pp=4, m=8.
TEST(ZeroBubble, VBubbleIsTheLastRanksStart) {
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV})
    for (int pp = 2; pp <= 8; ++pp)
      for (int m = 2 * pp; m <= 3 * pp; ++m) {
        ScheduleSpec s{kind, pp, 2, m};
        SimulationResult r = simulateSpec(s);
        ASSERT_TRUE(r.ok()) << nameOf(s);
        EXPECT_NEAR(r.bubble, pp - 1, 1e-9) << nameOf(s);
      }
  auto fraction = [](ScheduleKind kind, int v) {
    return simulateSpec({kind, 4, v, 8}).bubbleFraction;
  };
  EXPECT_NEAR(fraction(ScheduleKind::OneFOneB, 1), 3.0 / 8, 1e-9);
  EXPECT_NEAR(fraction(ScheduleKind::Interleaved, 2), 3.0 / 16, 1e-9);
  EXPECT_NEAR(fraction(ScheduleKind::ZeroBubbleH1, 1), 3.0 / 24, 1e-9);
  EXPECT_NEAR(fraction(ScheduleKind::ZeroBubbleV, 2), 3.0 / 48, 1e-9);
  EXPECT_NEAR(fraction(ScheduleKind::DualPipeV, 2), 3.0 / 48, 1e-9);
}

// DualPipe-V's phases on the first rank of pp=2, m=4: two warm-up F0's,
// F0 F1, B1 W1 F1, the main phase's F&B pairs (each B a whole backward,
// B then W), B1 and an F1 B0 pair, then the cool-down with a deferred W.
TEST(ZeroBubble, DualPipeVPhases) {
  std::vector<RankActions> lists =
      computeOnly(generateSchedule({ScheduleKind::DualPipeV, 2, 2, 4}));
  std::string order;
  for (const Action &a : lists[0])
    order += formatAction(a, true) + " ";
  EXPECT_EQ(order, "F0.0 F1.0 F2.0 F0.1 B0.1 W0.1 F1.1 F3.0 B1.1 W1.1 F2.1 "
                   "B0.0 W0.0 B2.1 W2.1 F3.1 B1.0 W1.0 B3.1 W3.1 B2.0 W2.0 "
                   "B3.0 W3.0 ");
}

TEST(ZeroBubble, WeightBeforeItsBIsAViolation) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::ZeroBubbleH1, 2, 1, 2});
  std::swap(lists[0][find(lists[0], Action::backwardInput(0, 0))],
            lists[0][find(lists[0], Action::backwardWeight(0, 0))]);
  SimulationResult r = simulate(lists);
  ASSERT_FALSE(r.violations.empty()) << r.describe();
  EXPECT_EQ(r.violations[0], "rank 0 runs W0 before its B");
}

// Rank 1 of a pp=2 V holds stages 1 and 2: a transfer between them is
// reported, not run.
TEST(ZeroBubble, TransferWithinARankIsReported) {
  std::vector<RankActions> lists =
      generateSchedule({ScheduleKind::ZeroBubbleV, 2, 2, 2});
  lists[1].insert(lists[1].begin() + 1, Action::sendActivation(0, 0, 1));
  SimulationResult r = simulate(lists, {}, StageLayout::V);
  ASSERT_EQ(r.violations.size(), 1u) << r.describe();
  EXPECT_EQ(r.violations[0], "rank 1 action #1 sendA0.0>1 crosses to virtual "
                             "stage 2, which is on the same rank");
}

TEST(ZeroBubble, WeightMustFitItsBackward) {
  ActionCosts c;
  c.backwardWeight = 3;
  EXPECT_THROW(generateSchedule({ScheduleKind::ZeroBubbleH1, 2, 1, 2}, c),
               Error);
  c.backwardWeight = 0.5;
  EXPECT_DOUBLE_EQ(c.backwardInputTime(0), 1.5);
  ActionCosts d;
  EXPECT_DOUBLE_EQ(d.backwardWeightTime(0), 1);
  EXPECT_DOUBLE_EQ(d.backwardInputTime(0), 1);
}

TEST(ZeroBubble, ActionNames) {
  EXPECT_EQ(formatAction(Action::backwardInput(3, 0), false), "B3");
  EXPECT_EQ(formatAction(Action::backwardWeight(3, 0), false), "W3");
  EXPECT_EQ(formatAction(Action::backwardWeight(3, 1), true), "W3.1");
}

// ZB-H1 at pp=2, m=2: the grid shows W's with their own letter, and the
// header gives the simulated bubble with the schedule's name.
TEST(ZeroBubble, PrintsSplitSchedules) {
  std::string text = printSchedule({ScheduleKind::ZeroBubbleH1, 2, 1, 2});
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "schedule zb-h1: pp=2 v=1 m=2 (no deadlock)");
  EXPECT_NE(text.find("rank 0 | F0 F1 .  B0 W0 B1 W1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("rank 1 | .  F0 B0 F1 B1 W0 W1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("step 7, bubble 0.167 of the compute (simulated zb-h1, "
                      "B and W apart); peak activations per rank: 2 1\n"
                      "peak W inputs per rank: 1 2\n"),
            std::string::npos)
      << text;
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV})
    EXPECT_NE(printSchedule({kind, 4, 2, 8}).find("no deadlock"),
              std::string::npos);
}
