//===- OptimizerOffload.cpp - the optimizer step on the host --------------===//

#include "OptimizerOffload.h"
#include "Clock.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <utility>

namespace bmrt {

OptimizerOffload::OptimizerOffload(Device &device, int threads)
    : device(device), hostDevice(createDevice("cpu", {threads})) {}

OptimizerOffload::~OptimizerOffload() {
  if (worker.joinable()) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      progressed.wait(lock, [&] { return !behind || finished; });
      ending = true;
    }
    handed.notify_one();
    worker.join();
  }
  for (void *host : pinned)
    device.unpinHostMemory(host);
}

/// Host memory for a copy of `like`, page-locked for the device's copies
/// where it can be.
TensorView OptimizerOffload::hostCopy(const TensorView &like, MemoryKind kind) {
  TensorView copy = like;
  size_t bytes = std::max<size_t>(like.bytes(), 1);
  copy.data = hostDevice->allocate(bytes, kind);
  if (device.pinHostMemory(copy.data, bytes))
    pinned.push_back(copy.data);
  return copy;
}

void OptimizerOffload::hold(const std::vector<TensorUpdate> &ranges) {
  BMRT_CHECK(copies.empty(), "the offloaded optimizer's copies are held");
  for (const TensorUpdate &r : ranges) {
    copies.push_back({hostCopy(r.value, MemoryKind::Parameters),
                      hostCopy(r.grad, MemoryKind::Gradients), r.first,
                      r.second});
    upEvents.push_back(device.createEvent());
  }
  upStream = device.createStream();
  downStream = device.createStream();
  gradientsWritten = device.createEvent();
}

void OptimizerOffload::checkHeld(
    const std::vector<TensorUpdate> &ranges) const {
  BMRT_CHECK(copies.size() == ranges.size(),
             "the offloaded optimizer was given " +
                 std::to_string(ranges.size()) + " ranges, it holds " +
                 std::to_string(copies.size()));
  for (size_t k = 0; k < ranges.size(); ++k)
    BMRT_CHECK(copies[k].value.bytes() == ranges[k].value.bytes() &&
                   copies[k].grad.bytes() == ranges[k].grad.bytes(),
               "the offloaded optimizer's range " + std::to_string(k) +
                   " changed size");
}

/// Range k's gradient, and its parameter where `parameters`, copied into
/// the host's copies on `stream`.
void OptimizerOffload::copyRangeDown(size_t k, const TensorUpdate &range,
                                     bool parameters, Stream &stream) {
  device.copyToHost(copies[k].grad.data, range.grad.data, range.grad.bytes(),
                    stream);
  if (parameters)
    device.copyToHost(copies[k].value.data, range.value.data,
                      range.value.bytes(), stream);
}

/// Range k's stepped parameter copied back onto the device on `stream`.
void OptimizerOffload::copyRangeUp(size_t k, const TensorUpdate &range,
                                   Stream &stream) {
  device.copyToDevice(range.value.data, copies[k].value.data,
                      range.value.bytes(), stream);
}

const std::vector<TensorUpdate> &
OptimizerOffload::copyDown(const std::vector<TensorUpdate> &ranges,
                           Stream &stream) {
  checkHeld(ranges);
  BMRT_CHECK(!behind, "the offloaded optimizer's last step has not settled");
  auto start = std::chrono::steady_clock::now();
  for (size_t k = 0; k < ranges.size(); ++k)
    copyRangeDown(k, ranges[k], stale, stream);
  stream.synchronize();
  stale = false;
  times["copy_down"] += secondsSince(start);
  downEnded = std::chrono::steady_clock::now();
  return copies;
}

void OptimizerOffload::copyUp(const std::vector<TensorUpdate> &ranges,
                              Stream &stream) {
  hostStream().synchronize();
  times["host_step"] += secondsSince(downEnded);
  auto start = std::chrono::steady_clock::now();
  for (size_t k = 0; k < ranges.size(); ++k)
    copyRangeUp(k, ranges[k], stream);
  stream.synchronize();
  times["copy_up"] += secondsSince(start);
}

void OptimizerOffload::stepBehind(const std::vector<TensorUpdate> &ranges,
                                  Stream &stream, std::vector<size_t> stepOrder,
                                  RangeStep step, Landed onLanded) {
  checkHeld(ranges);
  BMRT_CHECK(!behind, "the offloaded optimizer's last step has not settled");
  BMRT_CHECK(stepOrder.size() == ranges.size(),
             "the offloaded optimizer's order lists " +
                 std::to_string(stepOrder.size()) + " of " +
                 std::to_string(ranges.size()) + " ranges");
  if (ranges.empty())
    return;
  order = std::move(stepOrder);
  landed = std::move(onLanded);
  reported = 0;
  // The copies down start after the work that wrote the gradients.
  gradientsWritten->record(stream);
  {
    std::lock_guard<std::mutex> lock(mutex);
    job = Job{ranges, std::exchange(stale, false), std::move(step)};
    done = 0;
    finished = false;
    error = nullptr;
  }
  behind = true;
  handed.notify_one();
  if (!worker.joinable())
    worker = std::thread(&OptimizerOffload::workerLoop, this);
}

/// The worker thread: bound to both devices once, then one step behind at
/// a time until the offload ends.
void OptimizerOffload::workerLoop() {
  std::exception_ptr bindError;
  try {
    device.bindCallingThread();
    hostDevice->bindCallingThread();
  } catch (...) {
    bindError = std::current_exception();
  }
  for (;;) {
    Job next;
    {
      std::unique_lock<std::mutex> lock(mutex);
      handed.wait(lock, [&] { return job.has_value() || ending; });
      if (!job)
        return;
      next = std::move(*job);
      job.reset();
    }
    Phases spent;
    std::exception_ptr failure = bindError;
    if (!failure) {
      try {
        runBehind(next, spent);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(mutex);
    error = failure;
    done = order.size();
    finished = true;
    workerSpent = spent;
    progressed.notify_all();
  }
}

/// One step behind: each range's gradient (and, when the host's copy is
/// stale, its parameter) copied down, stepped on the host, and its
/// parameter copied up with the copy's event recorded, before the next one
/// starts.
void OptimizerOffload::runBehind(const Job &job, Phases &spent) {
  downStream->waitFor(*gradientsWritten);
  for (size_t position = 0; position < order.size(); ++position) {
    size_t k = order[position];
    const TensorUpdate &range = job.ranges[k];
    auto start = std::chrono::steady_clock::now();
    copyRangeDown(k, range, job.readParameters, *downStream);
    downStream->synchronize();
    spent.down += secondsSince(start);
    start = std::chrono::steady_clock::now();
    job.step(copies[k]);
    hostStream().synchronize();
    spent.step += secondsSince(start);
    start = std::chrono::steady_clock::now();
    copyRangeUp(k, range, *upStream);
    upEvents[k]->record(*upStream);
    spent.up += secondsSince(start);
    std::lock_guard<std::mutex> lock(mutex);
    done = position + 1;
    progressed.notify_all();
  }
  auto start = std::chrono::steady_clock::now();
  upStream->synchronize();
  spent.up += secondsSince(start);
}

void OptimizerOffload::finishStep() {
  std::exception_ptr failure;
  {
    std::unique_lock<std::mutex> lock(mutex);
    progressed.wait(lock, [&] { return finished; });
    times["copy_down"] += workerSpent.down;
    times["host_step"] += workerSpent.step;
    times["copy_up"] += workerSpent.up;
    workerSpent = {};
    failure = std::exchange(error, nullptr);
  }
  behind = false;
  if (failure)
    std::rethrow_exception(failure);
}

void OptimizerOffload::awaitUpTo(size_t position, Stream &stream) {
  if (!behind || position < reported)
    return;
  position = std::min(position, order.size() - 1);
  auto start = std::chrono::steady_clock::now();
  bool failed;
  {
    std::unique_lock<std::mutex> lock(mutex);
    progressed.wait(lock, [&] { return done > position; });
    failed = error != nullptr;
  }
  times["wait"] += secondsSince(start);
  if (failed)
    finishStep(); // rethrows
  for (; reported <= position; ++reported) {
    stream.waitFor(*upEvents[order[reported]]);
    landed(order[reported]);
  }
  if (reported == order.size())
    finishStep();
}

void OptimizerOffload::settle(Stream &stream) {
  if (behind)
    awaitUpTo(order.size() - 1, stream);
}

std::map<std::string, double> OptimizerOffload::takeTimes() {
  return std::exchange(times, {});
}

} // namespace bmrt
