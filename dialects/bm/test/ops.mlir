// RUN: bmc-opt %s | bmc-opt | FileCheck %s
// RUN: bmc-opt %s --mlir-print-op-generic | bmc-opt | FileCheck %s

// Round trip of every op of the bm dialect and of its two attributes, through
// the custom form and (second RUN line) through the generic form.

// CHECK: bm.mesh @mesh = <["dp"=2, "tp"=4, "pp"=2]>
bm.mesh @mesh = <["dp"=2, "tp"=4, "pp"=2]>
// CHECK: bm.mesh @single = <["x"=1]>
bm.mesh @single = <["x"=1]>
// A mesh with no axes is a single device.
// CHECK: bm.mesh @none = <[]>
bm.mesh @none = <[]>

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<2x3xf32>, %i: tensor<2x3xi32>, %b: tensor<2x3xi1>) {
  // CHECK: bm.abs %{{[a-z0-9_]+}} : tensor<2x3xi32>
  %0 = bm.abs %i : tensor<2x3xi32>
  // CHECK: bm.cos %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %1 = bm.cos %x : tensor<2x3xf32>
  // CHECK: bm.erf %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %2 = bm.erf %x : tensor<2x3xf32>
  // CHECK: bm.exp %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %3 = bm.exp %x : tensor<2x3xf32>
  // CHECK: bm.gelu %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %4 = bm.gelu %x : tensor<2x3xf32>
  // CHECK: bm.gelu %{{[a-z0-9_]+}} {tanh_approximation = true} : tensor<2x3xf32>
  %5 = bm.gelu %x {tanh_approximation = true} : tensor<2x3xf32>
  // CHECK: bm.log %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %6 = bm.log %x : tensor<2x3xf32>
  // CHECK: bm.neg %{{[a-z0-9_]+}} : tensor<2x3xi32>
  %7 = bm.neg %i : tensor<2x3xi32>
  // CHECK: bm.not %{{[a-z0-9_]+}} : tensor<2x3xi1>
  %8 = bm.not %b : tensor<2x3xi1>
  // CHECK: bm.reciprocal %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %9 = bm.reciprocal %x : tensor<2x3xf32>
  // CHECK: bm.relu %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %10 = bm.relu %x : tensor<2x3xf32>
  // CHECK: bm.sigmoid %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %11 = bm.sigmoid %x : tensor<2x3xf32>
  // CHECK: bm.sin %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %12 = bm.sin %x : tensor<2x3xf32>
  // CHECK: bm.sqrt %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %13 = bm.sqrt %x : tensor<2x3xf32>
  // CHECK: bm.tanh %{{[a-z0-9_]+}} : tensor<2x3xf32>
  %14 = bm.tanh %x : tensor<2x3xf32>
  return
}

// CHECK-LABEL: func.func @binary
func.func @binary(%x: tensor<4x1x8xf32>, %y: tensor<3x1xf32>, %b: tensor<3x8xi1>, %c: tensor<8xi1>) {
  // CHECK: bm.add %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %0 = bm.add %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.and %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<3x8xi1>, tensor<8xi1>
  %1 = bm.and %b, %c : tensor<3x8xi1>, tensor<8xi1>
  // CHECK: bm.div %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %2 = bm.div %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.equal %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %3 = bm.equal %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.greater %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %4 = bm.greater %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.less %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %5 = bm.less %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.max %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %6 = bm.max %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.min %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %7 = bm.min %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.mul %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %8 = bm.mul %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.or %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<3x8xi1>, tensor<8xi1>
  %9 = bm.or %b, %c : tensor<3x8xi1>, tensor<8xi1>
  // CHECK: bm.pow %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %10 = bm.pow %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.sub %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<4x1x8xf32>, tensor<3x1xf32>
  %11 = bm.sub %x, %y : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.where %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<3x8xi1>, tensor<4x1x8xf32>, tensor<3x1xf32>
  %12 = bm.where %b, %x, %y : tensor<3x8xi1>, tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: bm.cast %{{[a-z0-9_]+}} : tensor<4x1x8xf32> -> tensor<4x1x8xbf16>
  %13 = bm.cast %x : tensor<4x1x8xf32> -> tensor<4x1x8xbf16>
  // CHECK: bm.cast %{{[a-z0-9_]+}} : tensor<3x8xi1> -> tensor<3x8xi64>
  %14 = bm.cast %b : tensor<3x8xi1> -> tensor<3x8xi64>
  // CHECK: bm.cast %{{[a-z0-9_]+}} : tensor<3x1xf32> -> tensor<3x1xf32>
  %15 = bm.cast %y : tensor<3x1xf32> -> tensor<3x1xf32>
  return
}

// CHECK-LABEL: func.func @contractions
func.func @contractions(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>,
                        %a: tensor<32x64xf32>, %bt: tensor<128x64xf32>,
                        %c: tensor<128xf32>, %img: tensor<1x3x32x32xf32>,
                        %k: tensor<8x3x3x3xf32>, %kb: tensor<8xf32>,
                        %gk: tensor<8x1x3x3xf32>, %g: tensor<1x8x32x32xf32>) {
  // CHECK: bm.matmul %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<2x16x64xf32>, tensor<64x256xf32>
  %0 = bm.matmul %x, %w : tensor<2x16x64xf32>, tensor<64x256xf32>
  // CHECK: bm.gemm %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<32x64xf32>, tensor<64x256xf32>
  %1 = bm.gemm %a, %w : tensor<32x64xf32>, tensor<64x256xf32>
  // CHECK: bm.gemm %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32, trans_b = true} : tensor<32x64xf32>, tensor<128x64xf32>, tensor<128xf32>
  %2 = bm.gemm %a, %bt, %c {alpha = 0.5 : f32, beta = 2.0 : f32, trans_b = true} : tensor<32x64xf32>, tensor<128x64xf32>, tensor<128xf32>
  // CHECK: bm.einsum "bsk,kn->bsn" %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} : tensor<2x16x64xf32>, tensor<64x256xf32>
  %3 = bm.einsum "bsk,kn->bsn" %x, %w : tensor<2x16x64xf32>, tensor<64x256xf32>
  // CHECK: bm.conv %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x32x32xf32>, tensor<8x3x3x3xf32>
  %4 = bm.conv %img, %k {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x32x32xf32>, tensor<8x3x3x3xf32>
  // CHECK: bm.conv %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {dilations = array<i64: 1, 1>, group = 8 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>
  %5 = bm.conv %g, %gk, %kb {dilations = array<i64: 1, 1>, group = 8 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>, tensor<8x1x3x3xf32>, tensor<8xf32>
  return
}

// CHECK-LABEL: func.func @normalisation
func.func @normalisation(%x: tensor<2x16x64xf32>, %s: tensor<64xf32>, %img: tensor<4x8x5x5xf32>, %p: tensor<8xf32>) {
  // CHECK: bm.softmax %{{[a-z0-9_]+}} {axis = 2 : i64} : tensor<2x16x64xf32>
  %0 = bm.softmax %x {axis = 2 : i64} : tensor<2x16x64xf32>
  // CHECK: bm.log_softmax %{{[a-z0-9_]+}} {axis = 1 : i64} : tensor<2x16x64xf32>
  %1 = bm.log_softmax %x {axis = 1 : i64} : tensor<2x16x64xf32>
  // CHECK: bm.layer_norm %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
  %2 = bm.layer_norm %x, %s, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
  // CHECK: bm.layer_norm %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
  %3 = bm.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
  // CHECK: bm.rms_norm %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
  %4 = bm.rms_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-6 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
  // CHECK: bm.batch_norm %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {epsilon = 9.99999974E-6 : f32} : tensor<4x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  %5 = bm.batch_norm %img, %p, %p, %p, %p {epsilon = 1.0e-5 : f32} : tensor<4x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<2x16x64xf32>, %ids: tensor<2x16xi64>) {
  // CHECK: bm.reduce_max %{{[a-z0-9_]+}} {axes = array<i64: 2>} : tensor<2x16x64xf32>
  %0 = bm.reduce_max %x {axes = array<i64: 2>} : tensor<2x16x64xf32>
  // CHECK: bm.reduce_mean %{{[a-z0-9_]+}} {axes = array<i64: 1, 2>, keep_dims = false} : tensor<2x16x64xf32>
  %1 = bm.reduce_mean %x {axes = array<i64: 1, 2>, keep_dims = false} : tensor<2x16x64xf32>
  // CHECK: bm.reduce_sum %{{[a-z0-9_]+}} {axes = array<i64: 0>} : tensor<2x16x64xf32>
  %2 = bm.reduce_sum %x {axes = array<i64: 0>, keep_dims = true} : tensor<2x16x64xf32>
  // CHECK: bm.cumsum %{{[a-z0-9_]+}} {axis = 1 : i64} : tensor<2x16x64xf32>
  %3 = bm.cumsum %x {axis = 1 : i64} : tensor<2x16x64xf32>
  // CHECK: bm.cumsum %{{[a-z0-9_]+}} {axis = 2 : i64, exclusive = true, reverse = true} : tensor<2x16x64xf32>
  %4 = bm.cumsum %x {axis = 2 : i64, exclusive = true, reverse = true} : tensor<2x16x64xf32>
  // CHECK: bm.top_k %{{[a-z0-9_]+}} {axis = 2 : i64, k = 4 : i64} : tensor<2x16x64xf32>
  %5:2 = bm.top_k %x {axis = 2 : i64, k = 4 : i64} : tensor<2x16x64xf32>
  // CHECK: bm.top_k %{{[a-z0-9_]+}} {axis = 0 : i64, k = 1 : i64, largest = false} : tensor<2x16x64xf32>
  %6:2 = bm.top_k %x {axis = 0 : i64, k = 1 : i64, largest = false} : tensor<2x16x64xf32>
  // CHECK: bm.one_hot %{{[a-z0-9_]+}} {axis = 2 : i64, depth = 10 : i64, off_value = 0.000000e+00 : f64, on_value = 1.000000e+00 : f64} : tensor<2x16xi64> -> tensor<2x16x10xf32>
  %7 = bm.one_hot %ids {axis = 2 : i64, depth = 10 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x16xi64> -> tensor<2x16x10xf32>
  return
}

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%x: tensor<2x16x64xf32>, %e: tensor<100x64xf32>, %ids: tensor<2x16xi64>, %u: tensor<2x1x64xf32>, %v: tensor<64xf32>, %col: tensor<2x16x1xi64>) {
  // CHECK: bm.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
  %0 = bm.constant dense<[1.0, 2.0]> : tensor<2xf32>
  // CHECK: bm.constant {bm.layer = 3 : i64} dense<0> : tensor<2x2xi64>
  %1 = bm.constant {bm.layer = 3 : i64} dense<0> : tensor<2x2xi64>
  // CHECK: bm.iota {delta = 1.000000e+00 : f64, start = 0.000000e+00 : f64} : tensor<16xi64>
  %2 = bm.iota {delta = 1.0 : f64, start = 0.0 : f64} : tensor<16xi64>
  // CHECK: bm.trilu %{{[a-z0-9_]+}} : tensor<2x16x64xf32>
  %3 = bm.trilu %x : tensor<2x16x64xf32>
  // CHECK: bm.trilu %{{[a-z0-9_]+}} {k = -1 : i64, upper = false} : tensor<2x16x64xf32>
  %4 = bm.trilu %x {k = -1 : i64, upper = false} : tensor<2x16x64xf32>
  // CHECK: bm.reshape %{{[a-z0-9_]+}} : tensor<2x16x64xf32> -> tensor<2x16x4x16xf32>
  %5 = bm.reshape %x : tensor<2x16x64xf32> -> tensor<2x16x4x16xf32>
  // CHECK: bm.transpose %{{[a-z0-9_]+}} {permutation = array<i64: 0, 2, 1>} : tensor<2x16x64xf32>
  %6 = bm.transpose %x {permutation = array<i64: 0, 2, 1>} : tensor<2x16x64xf32>
  // CHECK: bm.gather %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 0 : i64} : tensor<100x64xf32>, tensor<2x16xi64>
  %7 = bm.gather %e, %ids {axis = 0 : i64} : tensor<100x64xf32>, tensor<2x16xi64>
  // CHECK: bm.gather_elements %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 2 : i64} : tensor<2x16x64xf32>, tensor<2x16x1xi64>
  %ge = bm.gather_elements %x, %col {axis = 2 : i64} : tensor<2x16x64xf32>, tensor<2x16x1xi64>
  // CHECK: bm.scatter_elements %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 2 : i64} : tensor<2x16x64xf32>, tensor<2x16x1xi64>, tensor<2x16x1xf32>
  %se = bm.scatter_elements %x, %col, %ge {axis = 2 : i64} : tensor<2x16x64xf32>, tensor<2x16x1xi64>, tensor<2x16x1xf32>
  // CHECK: bm.scatter_elements %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 2 : i64, reduction = "max"}
  %sm = bm.scatter_elements %x, %col, %ge {axis = 2 : i64, reduction = "max"} : tensor<2x16x64xf32>, tensor<2x16x1xi64>, tensor<2x16x1xf32>
  // CHECK: bm.concat %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {axis = 1 : i64} : tensor<2x16x64xf32>, tensor<2x1x64xf32>
  %8 = bm.concat %x, %u {axis = 1 : i64} : tensor<2x16x64xf32>, tensor<2x1x64xf32>
  // CHECK: bm.split %{{[a-z0-9_]+}} {axis = 2 : i64, sizes = array<i64: 32, 16, 16>} : tensor<2x16x64xf32>
  %9:3 = bm.split %x {axis = 2 : i64, sizes = array<i64: 32, 16, 16>} : tensor<2x16x64xf32>
  // CHECK: bm.slice %{{[a-z0-9_]+}} {limits = array<i64: 2, 16, 64>, starts = array<i64: 0, 8, 0>, strides = array<i64: 1, 1, 2>} : tensor<2x16x64xf32>
  %10 = bm.slice %x {limits = array<i64: 2, 16, 64>, starts = array<i64: 0, 8, 0>, strides = array<i64: 1, 1, 2>} : tensor<2x16x64xf32>
  // CHECK: bm.squeeze %{{[a-z0-9_]+}} {axes = array<i64: 1>} : tensor<2x1x64xf32>
  %11 = bm.squeeze %u {axes = array<i64: 1>} : tensor<2x1x64xf32>
  // CHECK: bm.unsqueeze %{{[a-z0-9_]+}} {axes = array<i64: 0, 2>} : tensor<64xf32>
  %12 = bm.unsqueeze %v {axes = array<i64: 0, 2>} : tensor<64xf32>
  // CHECK: bm.expand %{{[a-z0-9_]+}} : tensor<2x1x64xf32> -> tensor<3x2x16x64xf32>
  %13 = bm.expand %u : tensor<2x1x64xf32> -> tensor<3x2x16x64xf32>
  // CHECK: bm.flatten %{{[a-z0-9_]+}} {axis = 1 : i64} : tensor<2x16x64xf32>
  %14 = bm.flatten %x {axis = 1 : i64} : tensor<2x16x64xf32>
  return
}

// CHECK-LABEL: func.func @pooling
func.func @pooling(%x: tensor<1x8x32x32xf32>) {
  // CHECK: bm.avg_pool %{{[a-z0-9_]+}} {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>
  %0 = bm.avg_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>
  // CHECK: bm.max_pool %{{[a-z0-9_]+}} {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>
  %1 = bm.max_pool %x {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>
  // CHECK: bm.global_avg_pool %{{[a-z0-9_]+}} : tensor<1x8x32x32xf32>
  %2 = bm.global_avg_pool %x : tensor<1x8x32x32xf32>
  return
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<8x16xf32>) {
  // CHECK: bm.all_reduce %{{[a-z0-9_]+}} over ["tp"] on @mesh : tensor<8x16xf32>
  %0 = bm.all_reduce %x over ["tp"] on @mesh : tensor<8x16xf32>
  // CHECK: bm.all_reduce %{{[a-z0-9_]+}} over ["dp", "tp"] on @mesh {reduction = "max"} : tensor<8x16xf32>
  %1 = bm.all_reduce %x over ["dp", "tp"] on @mesh {reduction = "max"} : tensor<8x16xf32>
  // CHECK: bm.all_gather %{{[a-z0-9_]+}} over ["tp"] on @mesh {dim = 1 : i64} : tensor<8x16xf32> -> tensor<8x64xf32>
  %2 = bm.all_gather %x over ["tp"] on @mesh {dim = 1 : i64} : tensor<8x16xf32> -> tensor<8x64xf32>
  // CHECK: bm.reduce_scatter %{{[a-z0-9_]+}} over ["dp", "tp"] on @mesh {dim = 0 : i64} : tensor<8x16xf32> -> tensor<1x16xf32>
  %3 = bm.reduce_scatter %x over ["dp", "tp"] on @mesh {dim = 0 : i64} : tensor<8x16xf32> -> tensor<1x16xf32>
  // CHECK: bm.reduce_scatter %{{[a-z0-9_]+}} over ["tp"] on @mesh {dim = 1 : i64, reduction = "mean"} : tensor<8x16xf32> -> tensor<8x4xf32>
  %4 = bm.reduce_scatter %x over ["tp"] on @mesh {dim = 1 : i64, reduction = "mean"} : tensor<8x16xf32> -> tensor<8x4xf32>
  // CHECK: bm.all_to_all %{{[a-z0-9_]+}} over ["tp"] on @mesh {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<8x16xf32> -> tensor<32x4xf32>
  %5 = bm.all_to_all %x over ["tp"] on @mesh {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<8x16xf32> -> tensor<32x4xf32>
  // CHECK: bm.collective_permute %{{[a-z0-9_]+}} over "tp" on @mesh {offset = -1 : i64} : tensor<8x16xf32>
  %6 = bm.collective_permute %x over "tp" on @mesh {offset = -1 : i64} : tensor<8x16xf32>
  // CHECK: bm.send %{{[a-z0-9_]+}} over "pp" on @mesh {offset = 1 : i64} : tensor<8x16xf32>
  bm.send %x over "pp" on @mesh {offset = 1 : i64} : tensor<8x16xf32>
  // CHECK: bm.recv over "pp" on @mesh {offset = -1 : i64} : tensor<8x16xf32>
  %7 = bm.recv over "pp" on @mesh {offset = -1 : i64} : tensor<8x16xf32>
  return
}

// CHECK-LABEL: func.func @shardings
func.func @shardings(%x: tensor<8x16xf32>, %y: tensor<16x32xf32>) -> tensor<8x32xf32> {
  // CHECK: bm.matmul %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}], partial={"tp"}>]} : tensor<8x16xf32>, tensor<16x32xf32>
  %0 = bm.matmul %x, %y {bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}], partial={"tp"}>]} : tensor<8x16xf32>, tensor<16x32xf32>
  // CHECK: bm.relu %{{[a-z0-9_]+}} {bm.sharding = [#bm.sharding<@mesh, [{"dp", "pp"}, {"tp"}]>]} : tensor<8x32xf32>
  %1 = bm.relu %0 {bm.sharding = [#bm.sharding<@mesh, [{"dp", "pp"}, {"tp"}]>]} : tensor<8x32xf32>
  // CHECK: bm.split %{{[a-z0-9_]+}} {axis = 1 : i64, bm.sharding = [#bm.sharding<@mesh, [{}, {}]>, #bm.sharding<@mesh, [{"tp"}, {}]>], sizes = array<i64: 16, 16>} : tensor<8x32xf32>
  %2:2 = bm.split %1 {axis = 1 : i64, sizes = array<i64: 16, 16>, bm.sharding = [#bm.sharding<@mesh, [{}, {}]>, #bm.sharding<@mesh, [{"tp"}, {}]>]} : tensor<8x32xf32>
  return %1 : tensor<8x32xf32>
}

// The attributes on their own, outside an op's bm.sharding.
// CHECK-LABEL: func.func @attributes
// CHECK-SAME: bm.mesh_attr = #bm.mesh<["a"=3]>
// CHECK-SAME: bm.sharding_attr = #bm.sharding<@mesh, [], partial={"dp", "tp"}>
func.func @attributes() attributes {bm.mesh_attr = #bm.mesh<["a"=3]>, bm.sharding_attr = #bm.sharding<@mesh, [], partial={"dp", "tp"}>} {
  return
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %kt: tensor<2x4x16x8xf32>, %v: tensor<2x4x8x32xf32>) {
  // CHECK: %[[O:.*]] = bm.attention %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}} {causal = true, scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>, tensor<2x4x8x32xf32>
  %o = bm.attention %q, %kt, %v {causal = true, scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>, tensor<2x4x8x32xf32>
  // CHECK: bm.attention_grad %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %{{[a-z0-9_]+}}, %[[O]], %[[O]] {scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>
  %g:3 = bm.attention_grad %q, %kt, %v, %o, %o {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>
  return
}
