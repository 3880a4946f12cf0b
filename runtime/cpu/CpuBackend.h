//===- CpuBackend.h - the CPU backend's parts -------------------*- C++ -*-===//
//
// Private to runtime/cpu: CpuBackend.cpp assembles these into the backend
// registered as "cpu" (bmrt/Backend.h).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CPU_CPUBACKEND_H
#define BMRT_CPU_CPUBACKEND_H

#include "bmrt/Backend.h"

namespace bmrt::cpu {

/// Host memory (64-byte aligned), streams that run work as it is enqueued;
/// `threads` for the kernels of a thread that binds to it (0: the default).
std::unique_ptr<Device> createDevice(const Backend &backend, int threads);
/// Every op of the step program (KernelTable.cpp).
const KernelTable &kernelTable();

} // namespace bmrt::cpu

#endif // BMRT_CPU_CPUBACKEND_H
