//===- Backend.h - device backends and their kernel tables ------*- C++ -*-===//
//
// DESIGN.md section 5: a backend is a folder (runtime/cpu, runtime/cuda)
// that registers, under its name, a device and two sets of kernels: the
// kernel table of every op a step program may name (OpSpec.h lists them)
// and the trainer's own kernels (gradient sums, clipping norms, optimizer
// steps). Nothing outside a backend names one: the executor asks its
// device's backend for kernels, and the trainer picks a backend by the name
// in trainer.json or --device.
//
// The backends built into this binary are listed at build time
// (BuiltinBackends.def, written by CMake), as LLVM lists its targets.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_BACKEND_H
#define BMRT_BACKEND_H

#include "bmrt/Device.h"
#include "bmrt/Optimizer.h"
#include "bmrt/Tensor.h"

#include <memory>
#include <string>
#include <vector>

namespace bmrt {

class Executor;
struct Instr;

/// Runs one instruction's kernel on the executor's device.
using KernelLauncher = void (*)(Executor &executor, const Instr &instr);

/// A backend's launchers by op name: an alphabetical array, looked up by
/// binary search.
class KernelTable {
public:
  struct Entry {
    const char *op;
    KernelLauncher launch;
  };
  /// `entries` must be sorted by name and outlive the table.
  template <size_t N>
  constexpr explicit KernelTable(const Entry (&entries)[N])
      : first(entries), count(N) {}
  KernelTable(const Entry *entries, size_t count)
      : first(entries), count(count) {}

  /// The launcher of `op`, or null.
  KernelLauncher find(const std::string &op) const;
  /// Every op name, sorted.
  std::vector<std::string> names() const;

private:
  const Entry *first;
  size_t count;
};

/// The kernels the trainer runs outside the step program, on tensors in the
/// device's memory, enqueued on `stream`.
class TrainerKernels {
public:
  virtual ~TrainerKernels();
  /// out = a + b, element by element (one shape, F32); out may be a or b.
  virtual void add(Stream &stream, const TensorView &a, const TensorView &b,
                   const TensorView &out) const = 0;
  /// sum(x^2) of each F32 tensor, accumulated in double, on the host:
  /// global norm clipping and LAMB / LARS need them there. Synchronises the
  /// stream once for all of them (a GPU paid one synchronisation per
  /// tensor, 7.8 ms of GPT-2 medium's step, before).
  virtual std::vector<double>
  sumsOfSquares(Stream &stream, const std::vector<TensorView> &xs) const = 0;
  /// Their total, each tensor's sum added in the order given.
  double sumOfSquares(Stream &stream, const std::vector<TensorView> &xs) const;
  /// One AdamW / SGD step on one fp32 tensor (bmrt/Optimizer.h).
  virtual void adamwUpdate(Stream &stream, const TensorView &param,
                           const TensorView &grad, const TensorView &m,
                           const TensorView &v, const AdamWConfig &config,
                           float lr, int64_t step, float gradScale) const = 0;
  virtual void sgdUpdate(Stream &stream, const TensorView &param,
                         const TensorView &grad, const TensorView &buffer,
                         const SgdConfig &config, float lr, int64_t step,
                         float gradScale) const = 0;
  /// LAMB's first phase on one tensor (bmrt/Optimizer.h): updates m and v
  /// and writes the direction u into `direction` (which may be `grad`).
  virtual void lambDirection(Stream &stream, const TensorView &param,
                             const TensorView &grad, const TensorView &m,
                             const TensorView &v, const TensorView &direction,
                             const LambConfig &config, int64_t step,
                             float gradScale) const = 0;
  /// y += alpha x (one shape, F32).
  virtual void axpy(Stream &stream, float alpha, const TensorView &x,
                    const TensorView &y) const = 0;
  /// LARS's step on one tensor (bmrt/Optimizer.h), `scaledLr` being the
  /// learning rate times the tensor's local rate.
  virtual void larsUpdate(Stream &stream, const TensorView &param,
                          const TensorView &grad, const TensorView &buffer,
                          const LarsConfig &config, float scaledLr,
                          float gradScale) const = 0;
};

/// How a device is set up.
struct DeviceOptions {
  /// Host threads for the backend's own work (0: the library's default).
  int threads = 0;
  /// Which device of the machine (a GPU's ordinal); -1: the process's
  /// local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK)
  /// modulo the devices present.
  int ordinal = -1;
  /// What GEMMs read their operands in (Device.h): the plan's precision,
  /// or the trainer's --precision. The CPU backend ignores it (the fp32
  /// reference); the CUDA backend computes in fp32 or bf16 and refuses fp16.
  ContractionPrecision contractionPrecision = ContractionPrecision::F32;
  /// Bytes the device may hold in all (0: its own size):
  /// Device::setMemoryLimit.
  size_t memoryLimit = 0;
};

struct Backend {
  /// "cpu", "cuda": what trainer.json and --device name.
  const char *name;
  /// The device, set up; throws bmrt::Error where none is present.
  std::unique_ptr<Device> (*createDevice)(const DeviceOptions &options);
  /// Whether a device is present (a CUDA backend built into a binary on a
  /// machine without a GPU is not).
  bool (*available)();
  const KernelTable &kernels;
  const TrainerKernels &trainer;
};

/// The backends built into this binary, the CPU first.
const std::vector<const Backend *> &builtinBackends();
/// The backend named `name`, or null.
const Backend *findBackend(const std::string &name);
/// The named backend's device; throws bmrt::Error naming the backends
/// built in when there is no such backend, or when it has no device here.
std::unique_ptr<Device> createDevice(const std::string &backend,
                                     const DeviceOptions &options = {});
/// "cpu, cuda".
std::string builtinBackendNames();

} // namespace bmrt

#endif // BMRT_BACKEND_H
