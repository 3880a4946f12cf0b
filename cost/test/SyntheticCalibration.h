//===- SyntheticCalibration.h - a calibrated cluster file for tests -*- C++
//-*-===//
//
// A cluster file with every calibration key, whose curves are simple enough
// to know the cost model's answer in closed form:
//  - gemm_tflops over sizes {16, 256} per dimension, rate in TFLOP/s
//    0.001 * (log2 m + 2 log2 n + 4 log2 k): linear in the log2 sizes, so
//    the multilinear interpolation reproduces it exactly inside the grid;
//  - memory_kernel_gbps: elementwise 4, softmax 1 (the others fall back);
//  - 2-rank intra-node all-reduce: 10 us at 1 KiB, 1000 us at 1 MiB
//    (busbw at 1 MiB: 1 MiB * 1 / 1000 us = 1.048576 GB/s), and a send_recv.
//
//===----------------------------------------------------------------------===//

#ifndef BM_COST_TEST_SYNTHETICCALIBRATION_H
#define BM_COST_TEST_SYNTHETICCALIBRATION_H

#include <cmath>
#include <string>

namespace bm::cost::test {

inline double syntheticGemmTflops(double m, double n, double k) {
  return 0.001 * (std::log2(m) + 2 * std::log2(n) + 4 * std::log2(k));
}

inline std::string syntheticGemmRows() {
  std::string rows;
  for (int m : {16, 256})
    for (int n : {16, 256})
      for (int k : {16, 256})
        rows += "  - [" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                std::to_string(k) + ", " +
                std::to_string(syntheticGemmTflops(m, n, k)) + "]\n";
  return rows;
}

inline const char *kSyntheticFlatKeys = R"x(name: lab
gpu: "Xeon core"
gpus_per_node: 2
peak_tflops_16bit: 1
peak_tflops_fp32: 0.5
memory_gib: 24
hbm_gbps: 20
intra_node_gbps: 5
inter_node_gbps: 1
)x";

inline std::string syntheticCalibratedYaml() {
  return std::string(kSyntheticFlatKeys) + R"x(precision: fp32
grad_reduce_overlap: 0.15
calibration:
  machine: "box (Xeon)"
  date: "2026-11-23T18:00:00Z"
  ranks: 2
  threads_per_rank: 1
  versions: {openblas: "0.3.21", mpi: "Open MPI v4.1.4"}
gemm_tflops:
)x" + syntheticGemmRows() +
         R"x(memory_kernel_gbps:
  elementwise: 4
  softmax: 1
collectives:
  - {op: all_reduce, link: intra_node, ranks: 2, bytes: 1048576, time_us: 1000, busbw_gbps: 1.048576}
  - {op: all_reduce, link: intra_node, ranks: 2, bytes: 1024, time_us: 10, busbw_gbps: 0.1024}
  - {op: send_recv, link: intra_node, ranks: 2, bytes: 1024, time_us: 5, busbw_gbps: 0.2048}
)x";
}

} // namespace bm::cost::test

#endif // BM_COST_TEST_SYNTHETICCALIBRATION_H
