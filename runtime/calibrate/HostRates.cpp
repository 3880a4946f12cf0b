//===- HostRates.cpp - what offloading the optimizer costs ----------------===//
//
// The trainer's optimizer offload (runtime/trainer/OptimizerOffload.h)
// copies gradient ranges from the device to host memory, steps them on the
// host's cores with the CPU backend's kernels, and copies the parameters
// back. The planner prices those three phases with the rates measured
// here: the copy rate in the slower direction, the optimizer step's traffic
// rate on a CPU-backend device (28 bytes per fp32 parameter, as the
// optimizer class of measureKernels counts AdamW), and the host memory each
// rank of this machine has beside its device's.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"

#include "bmrt/Backend.h"
#include "bmrt/Format.h"

#include <algorithm>
#include <deque>
#include <vector>

#include <unistd.h>

namespace bmrt::calibrate {
namespace {

/// The slower direction's copy rate between host memory and the device,
/// bytes/s, from host memory page-locked as the trainer's offload pins its
/// copies (where the device can).
double hostLinkRate(Bench &bench, int64_t bytes) {
  Buffer onDevice(bench.device(), bytes / 4);
  std::vector<float> host(static_cast<size_t>(bytes / 4), 1.f);
  Device &device = bench.device();
  bool pinned = device.pinHostMemory(host.data(), bytes);
  Timing down = bench.measure([&] {
    device.copyToHost(host.data(), onDevice.data(), bytes, bench.stream());
  });
  Timing up = bench.measure([&] {
    device.copyToDevice(onDevice.data(), host.data(), bytes, bench.stream());
  });
  if (pinned)
    device.unpinHostMemory(host.data());
  return double(bytes) / std::max(down.seconds, up.seconds);
}

/// AdamW's step on a CPU-backend device, as the offloaded trainer runs it,
/// bytes/s of traffic.
double hostOptimizerRate(Bench &bench, int64_t floats) {
  std::unique_ptr<Device> host = createDevice("cpu", {bench.options().threads});
  std::deque<Buffer> buffers;
  for (int i = 0; i < 4; ++i) {
    buffers.emplace_back(*host, floats);
    host->fillBytes(buffers.back().data(), 0x3e, floats * 4,
                    host->computeStream());
  }
  const TrainerKernels &kernels = host->backend().trainer;
  Stream &stream = host->computeStream();
  Timing step = bench.measure([&] {
    kernels.adamwUpdate(stream, buffers[0].view({floats}),
                        buffers[1].view({floats}), buffers[2].view({floats}),
                        buffers[3].view({floats}), AdamWConfig{}, 1e-4f, 1,
                        1.f);
    stream.synchronize();
  });
  return 28.0 * double(floats) / step.seconds;
}

} // namespace

void measureHost(Bench &bench, nlohmann::ordered_json &out) {
  int64_t bytes = streamBytes(bench.options());
  double link = hostLinkRate(bench, bytes);
  // The step on buffers of the optimizer kernel class's size: on the CPU
  // backend the host step and the device's are the same kernel on the same
  // memory, and must measure alike.
  double optimizer = hostOptimizerRate(bench, kernelFloats(bench.options()));
  // The host's memory apart from the device's, shared by the ranks on it:
  // none on the CPU backend, whose device memory is host memory (the
  // planner then counts offloaded state against the device's memory).
  // describeMachine counted the hosts.
  double memory = 0;
  if (!bench.device().hostAccessible()) {
    long pages = sysconf(_SC_PHYS_PAGES), pageBytes = sysconf(_SC_PAGESIZE);
    int hosts = std::max(out["machine"].value("hosts", 1), 1);
    double ranksPerHost = std::max(double(bench.world().size()) / hosts, 1.0);
    memory = double(pages) * double(pageBytes) / ranksPerHost;
  }
  out["host_link_gbps"] = link / 1e9;
  out["host_optimizer_gbps"] = optimizer / 1e9;
  out["host_memory_gib"] = memory / double(int64_t(1) << 30);
  bench.progress("host link " + formatRate(link, "B") +
                 ", optimizer step on the host " + formatRate(optimizer, "B"));
}

} // namespace bmrt::calibrate
