//===- ScheduleOrder.h - each rank's compute order --------------*- C++ -*-===//
//
// Private to the schedule library: one rank's compute order is a list of
// steps (forward, backward, and where the schedule splits the backward its
// input part B and weight part W). Schedule.cpp turns the orders into
// instruction lists; ZeroBubble.cpp builds the zero-bubble kinds' orders.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_SCHEDULE_SCHEDULEORDER_H
#define BMRT_SCHEDULE_SCHEDULEORDER_H

#include "bmrt/Schedule.h"

#include <vector>

namespace bmrt {

/// Backward is the whole backward, or B where the schedule splits it;
/// Weight is W.
enum class Phase { Forward, Backward, Weight };

/// A forward, backward or weight step of one micro-batch on one chunk of a
/// rank.
struct Step {
  Phase phase = Phase::Forward;
  int microBatch = 0;
  int chunk = 0;
};

using ComputeOrders = std::vector<std::vector<Step>>;

/// ZB-H1's (the paper's closed form).
ComputeOrders zeroBubbleH1Orders(const ScheduleSpec &spec);
/// ZB-V's greedy run under equal F, B and W, and under `costs`: the
/// generator keeps whichever is faster under `costs`.
std::vector<ComputeOrders> zeroBubbleVCandidates(const ScheduleSpec &spec,
                                                 const ActionCosts &costs);
/// DualPipe-V's phases.
ComputeOrders dualPipeVOrders(const ScheduleSpec &spec);

} // namespace bmrt

#endif // BMRT_SCHEDULE_SCHEDULEORDER_H
