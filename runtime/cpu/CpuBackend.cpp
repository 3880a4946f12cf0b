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
  std::vector<double>
  sumsOfSquares(Stream &stream,
                const std::vector<TensorView> &xs) const override {
    std::vector<double> sums;
    for (const TensorView &x : xs)
      sums.push_back(cpu::sumOfSquares(stream, x));
    return sums;
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
  void lambDirection(Stream &stream, const TensorView &param,
                     const TensorView &grad, const TensorView &m,
                     const TensorView &v, const TensorView &direction,
                     const LambConfig &config, int64_t step,
                     float gradScale) const override {
    cpu::lambDirection(stream, param, grad, m, v, direction, config, step,
                       gradScale);
  }
  void axpy(Stream &stream, float alpha, const TensorView &x,
            const TensorView &y) const override {
    cpu::axpy(stream, alpha, x, y);
  }
  void larsUpdate(Stream &stream, const TensorView &param,
                  const TensorView &grad, const TensorView &buffer,
                  const LarsConfig &config, float scaledLr,
                  float gradScale) const override {
    cpu::larsUpdate(stream, param, grad, buffer, config, scaledLr, gradScale);
  }
};

/// options.contractionPrecision is ignored: the CPU is the fp32 reference
/// that every backend is checked against, and computes in fp32 whatever the
/// plan says (the trainer notes it at start-up).
std::unique_ptr<Device> create(const DeviceOptions &options) {
  if (options.threads)
    setThreads(options.threads);
  return createDevice(cpuBackend(), options.threads);
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
