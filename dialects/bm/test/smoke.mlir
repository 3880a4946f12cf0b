// RUN: bmc-opt %s | bmc-opt | FileCheck %s

// CHECK: bm.mesh @mesh = <["dp"=2, "tp"=4]>
bm.mesh @mesh = <["dp"=2, "tp"=4]>
// CHECK-LABEL: func.func @mlp
func.func @mlp(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>) -> tensor<2x16x256xf32> {
  // CHECK: bm.matmul %{{.*}}, %{{.*}} : tensor<2x16x64xf32>, tensor<64x256xf32>
  %0 = bm.matmul %x, %w : tensor<2x16x64xf32>, tensor<64x256xf32>
  // CHECK: bm.all_reduce %{{.*}} over ["tp"] on @mesh
  %1 = bm.all_reduce %0 over ["tp"] on @mesh : tensor<2x16x256xf32>
  return %1 : tensor<2x16x256xf32>
}
