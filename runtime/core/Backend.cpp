//===- Backend.cpp - kernel tables and the backends built in --------------===//

#include "bmrt/Backend.h"
#include "bmrt/Error.h"

#include <algorithm>
#include <cstring>

namespace bmrt {

// Each backend folder defines <name>Backend() (CpuBackend.cpp, ...).
#define BMRT_BACKEND(name) const Backend &name##Backend();
#include "BuiltinBackends.def"
#undef BMRT_BACKEND

KernelLauncher KernelTable::find(const std::string &op) const {
  const Entry *last = first + count;
  const Entry *it = std::lower_bound(
      first, last, op,
      [](const Entry &e, const std::string &name) { return e.op < name; });
  if (it == last || it->op != op)
    return nullptr;
  return it->launch;
}

std::vector<std::string> KernelTable::names() const {
  std::vector<std::string> all;
  for (size_t i = 0; i < count; ++i)
    all.push_back(first[i].op);
  return all;
}

TrainerKernels::~TrainerKernels() = default;

double TrainerKernels::sumOfSquares(Stream &stream,
                                    const std::vector<TensorView> &xs) const {
  double sum = 0;
  for (double tensor : sumsOfSquares(stream, xs))
    sum += tensor;
  return sum;
}

const std::vector<const Backend *> &builtinBackends() {
  static const std::vector<const Backend *> all = {
#define BMRT_BACKEND(name) &name##Backend(),
#include "BuiltinBackends.def"
#undef BMRT_BACKEND
  };
  return all;
}

const Backend *findBackend(const std::string &name) {
  for (const Backend *backend : builtinBackends())
    if (name == backend->name)
      return backend;
  return nullptr;
}

std::string builtinBackendNames() {
  std::string names;
  for (const Backend *backend : builtinBackends())
    names += (names.empty() ? "" : ", ") + std::string(backend->name);
  return names;
}

std::unique_ptr<Device> createDevice(const std::string &name,
                                     const DeviceOptions &options) {
  const Backend *backend = findBackend(name);
  BMRT_CHECK(backend, "no backend '" + name + "' in this build (it has " +
                          builtinBackendNames() + ")");
  BMRT_CHECK(backend->available(),
             "the " + name + " backend has no device on this machine");
  std::unique_ptr<Device> device = backend->createDevice(options);
  device->setMemoryLimit(options.memoryLimit);
  return device;
}

} // namespace bmrt
