//===- OptimizerOffload.cpp - the optimizer step on the host --------------===//

#include "OptimizerOffload.h"
#include "Clock.h"

#include "bmrt/Error.h"

#include <utility>

namespace bmrt {

OptimizerOffload::OptimizerOffload(Device &device, int threads)
    : device(device), hostDevice(createDevice("cpu", {threads})) {}

TensorView OptimizerOffload::hostCopy(const TensorView &like, MemoryKind kind) {
  TensorView copy = like;
  copy.data = hostDevice->allocate(std::max<size_t>(like.bytes(), 1), kind);
  return copy;
}

void OptimizerOffload::hold(const std::vector<TensorUpdate> &ranges) {
  BMRT_CHECK(copies.empty(), "the offloaded optimizer's copies are held");
  for (const TensorUpdate &r : ranges)
    copies.push_back({hostCopy(r.value, MemoryKind::Parameters),
                      hostCopy(r.grad, MemoryKind::Gradients), r.first,
                      r.second});
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

const std::vector<TensorUpdate> &
OptimizerOffload::copyDown(const std::vector<TensorUpdate> &ranges,
                           Stream &stream) {
  checkHeld(ranges);
  auto start = std::chrono::steady_clock::now();
  for (size_t k = 0; k < ranges.size(); ++k) {
    device.copyToHost(copies[k].grad.data, ranges[k].grad.data,
                      ranges[k].grad.bytes(), stream);
    if (stale)
      device.copyToHost(copies[k].value.data, ranges[k].value.data,
                        ranges[k].value.bytes(), stream);
  }
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
    device.copyToDevice(ranges[k].value.data, copies[k].value.data,
                        ranges[k].value.bytes(), stream);
  stream.synchronize();
  times["copy_up"] += secondsSince(start);
}

std::map<std::string, double> OptimizerOffload::takeTimes() {
  return std::exchange(times, {});
}

} // namespace bmrt
