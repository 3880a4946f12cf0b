//===- CpuBackend.cpp - the backend registered as "cpu" -------------------===//
//
// The numerical reference every other backend is checked against (the
// conformance suite, runtime/conformance): OpenBLAS for GEMMs, OpenMP
// loops for the rest.
//
//===----------------------------------------------------------------------===//

#include "CpuBackend.h"
#include "Kernels.h"

namespace bmrt {

const Backend &cpuBackend();

namespace cpu {
namespace {

class CpuTrainerKernels final : public TrainerKernels {
public:
  void add(Stream &stream, const TensorView &a, const TensorView &b,
           const TensorView &out) const override {
    binary(stream, BinaryOp::Add, a, b, out);
  }
  double sumOfSquares(Stream &stream,
                      const std::vector<TensorView> &xs) const override {
    double sum = 0;
    for (const TensorView &x : xs)
      sum += cpu::sumOfSquares(stream, x);
    return sum;
  }
  void adamwUpdate(Stream &stream, const TensorView &param,
                   const TensorView &grad, const TensorView &m,
                   const TensorView &v, const AdamWConfig &config, float lr,
                   int64_t step, float gradScale) const override {
    cpu::adamwUpdate(stream, param, grad, m, v, config, lr, step, gradScale);
  }
  void sgdUpdate(Stream &stream, const TensorView &param,
                 const TensorView &grad, const TensorView &buffer,
                 const SgdConfig &config, float lr, int64_t step,
                 float gradScale) const override {
    cpu::sgdUpdate(stream, param, grad, buffer, config, lr, step, gradScale);
  }
};

/// options.contractionPrecision is ignored: the CPU is the fp32 reference
/// that every backend is checked against, and computes in fp32 whatever the
/// plan says (the trainer notes it at start-up).
std::unique_ptr<Device> create(const DeviceOptions &options) {
  if (options.threads)
    setThreads(options.threads);
  return createDevice(cpuBackend());
}

bool alwaysAvailable() { return true; }

} // namespace
} // namespace cpu

const Backend &cpuBackend() {
  static const cpu::CpuTrainerKernels trainer;
  static const Backend backend{"cpu", cpu::create, cpu::alwaysAvailable,
                               cpu::kernelTable(), trainer};
  return backend;
}

} // namespace bmrt
