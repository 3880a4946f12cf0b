//===- Pipeline.h - one step of a pipeline schedule on this rank -*- C++ -*-===//
//
// Runs this rank's instruction list of the plan's schedule (Schedule.h:
// forward and backward of micro-batch m on chunk c, or its B and W apart,
// sends and receives of activations and gradients between neighbouring
// stages) over this rank's stage programs. Each forward reads the values it
// sends off the device at once and keeps those its backward reads per
// micro-batch (Executor::stash) until its backward; a split backward's B
// keeps what its W reads (Executor::stashWeightInputs) until W. A hop
// between two stages of this rank (the V layout's middle) moves the
// buffers without a transfer;
// each received transfer (all the values crossing a boundary, or all their
// gradients) waits in its own buffers until the compute that reads it. The
// lists finish under blocking sends (generateSchedule's guarantee, checked
// by simulate before the run), so each send and receive runs as it comes.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_PIPELINE_H
#define BMRT_TRAINER_PIPELINE_H

#include "Feeder.h"

#include "bmrt/Collectives.h"
#include "bmrt/Comm.h"
#include "bmrt/Executor.h"
#include "bmrt/Schedule.h"

#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace bmrt {

/// The values of one transfer between stages (all of a boundary's
/// activations, or all their gradients), in position order.
using Transfer = std::vector<std::vector<uint8_t>>;

/// One step program this rank runs: the whole step, or one virtual stage
/// (model chunk) of a pipeline.
struct Stage {
  Program program;
  std::unique_ptr<Executor> executor;
  /// Fills the stage's inputs and labels; null when it reads no data.
  std::unique_ptr<Feeder> feeder;
  int virtualStage = 0;
};

class Pipeline {
public:
  /// `stages[c]` is this rank's chunk c.
  /// Sends are timed as communication over pp in `collectives`.
  /// The lists are generated with `costs` (the plan's stage times), as
  /// the planner generated the ones it priced.
  Pipeline(const ScheduleSpec &spec, const ActionCosts &costs, int ppRank,
           std::vector<Stage> &stages, Collectives &collectives);
  ~Pipeline();

  /// Runs one step's list; before each backward (W, where the schedule
  /// splits it) calls `beforeBackward(chunk, microBatch)` (arming the
  /// gradient buckets), after it `afterBackward(chunk, microBatch)`
  /// (gradient accumulation).
  /// Returns the sum of the last stage's losses over the micro-batches (0
  /// on other ranks).
  double runStep(const std::function<void(int, int)> &beforeBackward,
                 const std::function<void(int, int)> &afterBackward);
  /// Seconds of the last step this rank waited in pipeline receives: its
  /// bubble (with the transfers themselves, which are small beside it).
  double bubbleSeconds() const { return waited; }

private:
  void forward(const Action &a);
  /// A whole backward, or B of a split one (its W inputs then stashed).
  void backward(const Action &a);
  void backwardWeight(const Action &a);
  void handOverLocally(ActionKind sent, const Action &a, int to);
  /// Posts the run of transfers starting at action `first` as one group;
  /// returns the index after it.
  size_t transferRun(size_t first);
  void post(const Action &a);
  /// The buffers of a transfer of activations or gradients in flight.
  Transfer &buffer(ActionKind kind, int microBatch, int chunk);

  ScheduleSpec spec;
  int ppRank;
  std::vector<Stage> &stages;
  Communicator *pp;
  Collectives &collectives;
  RankActions actions;
  double waited = 0;
  double loss = 0;
  std::map<std::tuple<int, int, int>, Transfer> inFlight;
  /// What a micro-batch keeps between two steps of a chunk: the values
  /// its backward reads from the forward (Executor::stash), or those W
  /// reads from B (Executor::stashWeightInputs).
  enum class Kept { ForBackward, ForWeight };
  struct Held {
    void *data = nullptr;
    size_t bytes = 0;
  };
  void keep(Kept what, const Action &a);
  void restore(Kept what, const Action &a);
  /// Keyed by (what, chunk, micro-batch): device memory counted as
  /// activations, so that the peak shows the schedule's micro-batches in
  /// flight.
  std::map<std::tuple<int, int, int>, Held> kept;
};

} // namespace bmrt

#endif // BMRT_TRAINER_PIPELINE_H
