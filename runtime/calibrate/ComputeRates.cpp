//===- ComputeRates.cpp - GEMM grid, memory copy, memory-bound kernels ----===//
//
// Each rate is of a kernel of the device's backend as the trainer's
// instructions run it (one-instruction programs, bmrt/SingleOp.h), on fp32
// data: matmul for the GEMM grid, the copy kernel for memory bandwidth, and
// one or two kernels per memory-bound class the planner maps its ops to
// (calib-schema.md). Timed calls are enqueued and waited for once per
// sample, as a step's instructions are.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"

#include "bmrt/Format.h"
#include "bmrt/SingleOp.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>

namespace bmrt::calibrate {
namespace {

/// One list of sizes for m, n and k. The planner interpolates in log2 over
/// the grid and clamps at its edges, so the grid spans what transformer
/// blocks from tiny ones to GPT-2 small use: m up to the tokens of a
/// micro-batch (~2048), n and k up to 4 x hidden (3072).
const std::vector<int64_t> kGemmSizes = {16, 64, 256, 1024, 3072};
const std::vector<int64_t> kQuickGemmSizes = {16, 64, 256};

/// Floats per kernel buffer: 32 MiB, the size of a GPT-2 small activation
/// of a 2 x 1024-token micro-batch ([2048, 768] is 1.5 M floats; its MLP's
/// [2048, 3072] is 6 M).
constexpr int64_t kKernelFloats = int64_t(1) << 23;
constexpr int64_t kQuickKernelFloats = int64_t(1) << 20;
/// The hidden size of the [rows, hidden] inputs of normalisation, softmax
/// and reduction (GPT-2 small's).
constexpr int64_t kHidden = 768;

/// The size in bytes of one instance of the last-level cache, from sysfs
/// ("32768K"), as lscpu reports it; 0 when it does not say. (glibc's
/// sysconf can report the whole package's L3 instead: 384 MiB on a VM
/// whose cache instance holds 32 MiB.)
int64_t lastLevelCacheBytes() {
  int64_t bytes = 0;
  int level = 0;
  for (int index = 0;; ++index) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" +
                      std::to_string(index) + "/";
    std::ifstream levelFile(dir + "level"), sizeFile(dir + "size");
    int thisLevel = 0;
    int64_t size = 0;
    std::string unit;
    if (!(levelFile >> thisLevel) || !(sizeFile >> size))
      return bytes;
    sizeFile >> unit;
    size <<= unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : 0;
    if (thisLevel >= level) {
      level = thisLevel;
      bytes = size;
    }
  }
}

/// An F32 tensor type.
TensorType f32(Shape shape) { return {DType::F32, std::move(shape)}; }

Attr intAttr(int64_t value) {
  Attr attr;
  attr.i = value;
  return attr;
}

Attr intsAttr(std::vector<int64_t> values) {
  Attr attr;
  attr.kind = Attr::Kind::Ints;
  attr.ints = std::move(values);
  return attr;
}

Attr floatAttr(double value) {
  Attr attr;
  attr.kind = Attr::Kind::Float;
  attr.f = value;
  return attr;
}

/// Sets every byte of `op`'s operands: the kernels then read ordinary
/// floats (0x3e3e3e3e is 0.186), not zeros, which some GPUs multiply
/// faster.
void fillOperands(Device &device, SingleOp &op, size_t operands) {
  for (size_t i = 0; i < operands; ++i)
    device.fillBytes(op.operand(i).data, 0x3e, op.operand(i).bytes(),
                     device.computeStream());
}

/// One timed kernel of a memory-bound class: an instruction, or a trainer
/// kernel (AdamW) where the class is the optimizer's.
struct KernelRun {
  const char *kernelClass;
  std::string kernel; // what it runs, for people
  double bytes;       // read + written per call
  std::unique_ptr<SingleOp> op;
  std::function<void()> run;
};

/// `signature` loaded on the bench's device, its operands filled, run by
/// enqueueing it.
KernelRun instruction(Bench &bench, const char *kernelClass,
                      std::string kernel, double bytes,
                      const OpSignature &signature) {
  auto op = std::make_unique<SingleOp>(bench.device(), signature,
                                       "calibration " + signature.op);
  fillOperands(bench.device(), *op, signature.operands.size());
  SingleOp *raw = op.get();
  return {kernelClass, std::move(kernel), bytes, std::move(op),
          [raw] { raw->enqueue(); }};
}

std::vector<KernelRun> memoryBoundKernels(Bench &bench,
                                          const std::deque<Buffer> &buffers,
                                          int64_t floats) {
  int64_t rows = floats / kHidden;
  Shape table = {rows, kHidden};
  double n = double(floats), tableFloats = double(rows * kHidden);
  // An attention layout change: [batch, seq, heads, head_dim] ->
  // [batch, heads, seq, head_dim].
  Shape bySeq = {floats >> 20, 1024, 16, 64},
        byHead = {floats >> 20, 16, 1024, 64};
  std::string shape = "[" + std::to_string(rows) + "," +
                      std::to_string(kHidden) + "]";
  std::vector<KernelRun> runs;
  runs.push_back(instruction(
      bench, "data_movement",
      "transpose [" + std::to_string(bySeq[0]) + ",1024,16,64] perm 0,2,1,3",
      8 * n,
      {"transpose", {{"permutation", intsAttr({0, 2, 1, 3})}}, {f32(bySeq)},
       {f32(byHead)}, {}}));
  runs.push_back(instruction(bench, "elementwise", "add", 12 * n,
                             {"add", {}, {f32({floats}), f32({floats})},
                              {f32({floats})}, {}}));
  // GPT-2's GELU, which bm-fuse-gelu makes one bm.gelu: a transcendental
  // elementwise kernel beside the add's pure traffic.
  runs.push_back(instruction(bench, "elementwise", "gelu_tanh", 8 * n,
                             {"gelu", {{"tanh_approximation", intAttr(1)}},
                              {f32({floats})}, {f32({floats})}, {}}));
  runs.push_back(instruction(
      bench, "normalization", "layer_norm " + shape,
      8 * tableFloats + 8 * kHidden,
      {"layer_norm",
       {{"axis", intAttr(1)}, {"epsilon", floatAttr(1e-5)}},
       {f32(table), f32({kHidden}), f32({kHidden})},
       {f32(table)},
       {}}));
  // Reads parameter, gradient, both moments; writes all but the gradient
  // back: 28 bytes per fp32 parameter. A trainer kernel, not an op.
  TensorView a = buffers[0].view({floats}), b = buffers[1].view({floats}),
             c = buffers[2].view({floats}), d = buffers[3].view({floats});
  const TrainerKernels &trainer = bench.device().backend().trainer;
  Stream &stream = bench.stream();
  runs.push_back({"optimizer", "adamw", 28 * n, nullptr, [=, &trainer,
                                                          &stream] {
                    trainer.adamwUpdate(stream, a, b, c, d, AdamWConfig{},
                                        1e-4f, 1, 1.f);
                  }});
  runs.push_back(instruction(bench, "reduction",
                             "reduce_sum " + shape + " axis 1",
                             4 * tableFloats + 4 * double(rows),
                             {"reduce_sum", {{"axes", intsAttr({1})}},
                              {f32(table)}, {f32({rows})}, {}}));
  runs.push_back(instruction(bench, "softmax", "softmax " + shape,
                             8 * tableFloats,
                             {"softmax", {{"axis", intAttr(1)}}, {f32(table)},
                              {f32(table)}, {}}));
  return runs;
}

/// Adds one class's entry: the kernels' bytes and seconds summed. A class
/// of two kernels gets the rate of running both once: the bytes-weighted
/// harmonic mean of their rates, the one rate that predicts the time of
/// both (an arithmetic mean would take a slow kernel for a fast one), and
/// the larger spread of the two: the class is as unsteady as its worst
/// kernel.
void addClass(nlohmann::ordered_json &kernels, const std::string &kernelClass,
              std::string kernel, double bytes, Timing timing) {
  double seconds = timing.seconds, spread = timing.spread;
  if (!kernels.empty() && kernels.back()["class"] == kernelClass) {
    nlohmann::ordered_json &last = kernels.back();
    kernel = last["kernel"].get<std::string>() + ", " + kernel;
    bytes += last["bytes"].get<double>();
    seconds += last["seconds"].get<double>();
    spread = std::max(spread, last["spread"].get<double>());
    kernels.erase(kernels.size() - 1);
  }
  kernels.push_back({{"class", kernelClass},
                     {"kernel", kernel},
                     {"bytes", bytes},
                     {"seconds", seconds},
                     {"bytes_per_second", bytes / seconds},
                     {"spread", spread}});
}

} // namespace

void measureGemm(Bench &bench, nlohmann::ordered_json &out) {
  const std::vector<int64_t> &sizes =
      bench.options().quick ? kQuickGemmSizes : kGemmSizes;
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  size_t total = sizes.size() * sizes.size() * sizes.size();
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes) {
        SingleOp matmul(bench.device(),
                        {"matmul", {}, {f32({m, k}), f32({k, n})},
                         {f32({m, n})}, {}},
                        "calibration gemm");
        fillOperands(bench.device(), matmul, 2);
        Timing timing = bench.measure([&] { matmul.enqueue(); });
        double seconds = timing.seconds;
        double flops = 2.0 * double(m) * double(n) * double(k);
        points.push_back({{"m", m},
                          {"n", n},
                          {"k", k},
                          {"seconds", seconds},
                          {"flops_per_second", flops / seconds},
                          {"spread", timing.spread}});
        bench.progress("gemm " + std::to_string(points.size()) + "/" +
                       std::to_string(total) + " (m=" + std::to_string(m) +
                       " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                       ": " + formatRate(flops / seconds, "FLOP") + ")");
      }
  out["gemm"] = std::move(points);
}

// Four times the last-level cache (shared by the ranks of this machine),
// so that a copy streams from memory; quick runs settle for less.
int64_t streamBytes(const Options &options) {
  return options.quick ? int64_t(16) << 20
                       : std::max(4 * lastLevelCacheBytes(), int64_t(64) << 20);
}

void measureMemory(Bench &bench, nlohmann::ordered_json &out) {
  int64_t bytes = streamBytes(bench.options());
  int64_t floats = bytes / 4;
  SingleOp copy(bench.device(),
                {"copy", {}, {f32({floats})}, {f32({floats})}, {}},
                "calibration copy");
  fillOperands(bench.device(), copy, 1);
  Timing timing = bench.measure([&] { copy.enqueue(); });
  double rate = 2.0 * double(bytes) / timing.seconds;
  out["memory"] = {{"stream_copy_bytes_per_second", rate},
                   {"stream_copy_spread", timing.spread}};
  bench.progress("memory stream copy " +
                 formatBytes(double(bytes), BytesDigits::Shortest) + ": " +
                 formatRate(rate, "B"));
}

int64_t kernelFloats(const Options &options) {
  return options.quick ? kQuickKernelFloats : kKernelFloats;
}

void measureKernels(Bench &bench, nlohmann::ordered_json &out) {
  int64_t floats = kernelFloats(bench.options());
  std::deque<Buffer> buffers;
  for (int i = 0; i < 4; ++i) {
    buffers.emplace_back(bench.device(), floats);
    bench.device().fillBytes(buffers.back().data(), 0x3e, floats * 4,
                             bench.stream());
  }
  nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
  for (const KernelRun &kernel :
       memoryBoundKernels(bench, buffers, floats)) {
    Timing timing = bench.measure(kernel.run);
    addClass(kernels, kernel.kernelClass, kernel.kernel, kernel.bytes, timing);
    bench.progress(std::string("kernel ") + kernel.kernelClass + " (" +
                   kernel.kernel +
                   "): " + formatRate(kernel.bytes / timing.seconds, "B"));
  }
  out["kernels"] = std::move(kernels);
}

std::string formatRate(double perSecond, const char *unit) {
  char text[64];
  std::snprintf(text, sizeof text, "%.1f G%s/s", perSecond / 1e9, unit);
  return text;
}

} // namespace bmrt::calibrate
