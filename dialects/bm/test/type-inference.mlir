// RUN: bmc-opt %s --mlir-print-op-generic | FileCheck %s

// Ops whose result type is inferred: the generic form prints the type that
// inference gave.

// CHECK-LABEL: sym_name = "broadcast"
func.func @broadcast(%a: tensor<4x1x8xf32>, %b: tensor<3x1xf32>, %c: tensor<3x8xi1>,
                     %d: tensor<8xi1>, %s: tensor<f32>) {
  // CHECK: "bm.add"{{.*}} -> tensor<4x3x8xf32>
  %0 = bm.add %a, %b : tensor<4x1x8xf32>, tensor<3x1xf32>
  // A rank-0 operand broadcasts to anything.
  // CHECK: "bm.mul"{{.*}} -> tensor<4x1x8xf32>
  %1 = bm.mul %a, %s : tensor<4x1x8xf32>, tensor<f32>
  // CHECK: "bm.sub"{{.*}} -> tensor<f32>
  %2 = bm.sub %s, %s : tensor<f32>, tensor<f32>
  // Comparisons give i1.
  // CHECK: "bm.greater"{{.*}} -> tensor<4x3x8xi1>
  %3 = bm.greater %a, %b : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: "bm.equal"{{.*}} -> tensor<4x3x8xi1>
  %4 = bm.equal %a, %b : tensor<4x1x8xf32>, tensor<3x1xf32>
  // CHECK: "bm.or"{{.*}} -> tensor<3x8xi1>
  %5 = bm.or %c, %d : tensor<3x8xi1>, tensor<8xi1>
  // CHECK: "bm.where"{{.*}} -> tensor<4x3x8xf32>
  %6 = bm.where %c, %a, %b : tensor<3x8xi1>, tensor<4x1x8xf32>, tensor<3x1xf32>
  return
}

// CHECK-LABEL: sym_name = "matmul"
func.func @matmul(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>,
                  %p: tensor<4x1x8x16xf32>, %q: tensor<3x16x32xf32>,
                  %v: tensor<64xf32>, %r: tensor<2x64x4xf32>) {
  // CHECK: "bm.matmul"{{.*}} -> tensor<2x16x256xf32>
  %0 = bm.matmul %x, %w : tensor<2x16x64xf32>, tensor<64x256xf32>
  // Batch dims broadcast: [4, 1] and [3] give [4, 3].
  // CHECK: "bm.matmul"{{.*}} -> tensor<4x3x8x32xf32>
  %1 = bm.matmul %p, %q : tensor<4x1x8x16xf32>, tensor<3x16x32xf32>
  // A 1-D lhs is a row vector, a 1-D rhs a column vector; both dims drop.
  // CHECK: "bm.matmul"{{.*}} -> tensor<f32>
  %2 = bm.matmul %v, %v : tensor<64xf32>, tensor<64xf32>
  // CHECK: "bm.matmul"{{.*}} -> tensor<2x4xf32>
  %3 = bm.matmul %v, %r : tensor<64xf32>, tensor<2x64x4xf32>
  // CHECK: "bm.matmul"{{.*}} -> tensor<2x16xf32>
  %4 = bm.matmul %x, %v : tensor<2x16x64xf32>, tensor<64xf32>
  return
}

// CHECK-LABEL: sym_name = "gemm"
func.func @gemm(%a: tensor<32x64xf32>, %at: tensor<64x32xf32>, %b: tensor<64x128xf32>,
                %bt: tensor<128x64xf32>, %c: tensor<1x128xf32>) {
  // CHECK: "bm.gemm"{{.*}} -> tensor<32x128xf32>
  %0 = bm.gemm %a, %b : tensor<32x64xf32>, tensor<64x128xf32>
  // CHECK: "bm.gemm"{{.*}} -> tensor<32x128xf32>
  %1 = bm.gemm %at, %b {trans_a = true} : tensor<64x32xf32>, tensor<64x128xf32>
  // CHECK: "bm.gemm"{{.*}} -> tensor<32x128xf32>
  %2 = bm.gemm %a, %bt, %c {trans_b = true} : tensor<32x64xf32>, tensor<128x64xf32>, tensor<1x128xf32>
  // CHECK: "bm.gemm"{{.*}} -> tensor<32x128xf32>
  %3 = bm.gemm %at, %bt {trans_a = true, trans_b = true} : tensor<64x32xf32>, tensor<128x64xf32>
  return
}

// CHECK-LABEL: sym_name = "einsum"
func.func @einsum(%d: tensor<2x8x4x3xf32>, %x: tensor<2x8x16xf32>, %m: tensor<5x7xf32>,
                  %sq: tensor<6x6xf32>) {
  // MoE dispatch: g=2, s=8, e=4, c=3, m=16.
  // CHECK: "bm.einsum"{{.*}} -> tensor<4x2x3x16xf32>
  %0 = bm.einsum "gsec,gsm->egcm" %d, %x : tensor<2x8x4x3xf32>, tensor<2x8x16xf32>
  // Spaces are ignored; a full reduction gives a rank-0 result.
  // CHECK: "bm.einsum"{{.*}} -> tensor<f32>
  %1 = bm.einsum "ij -> " %m : tensor<5x7xf32>
  // CHECK: "bm.einsum"{{.*}} -> tensor<7x5xf32>
  %2 = bm.einsum "ij->ji" %m : tensor<5x7xf32>
  // A repeated letter takes the diagonal.
  // CHECK: "bm.einsum"{{.*}} -> tensor<6xf32>
  %3 = bm.einsum "ii->i" %sq : tensor<6x6xf32>
  return
}

// CHECK-LABEL: sym_name = "conv"
func.func @conv(%img: tensor<1x3x32x32xf32>, %k: tensor<8x3x3x3xf32>, %g: tensor<1x8x32x32xf32>,
                %gk: tensor<16x2x3x3xf32>, %seq: tensor<2x4x100xf32>, %k1: tensor<6x4x5xf32>,
                %vol: tensor<1x2x8x8x8xf32>, %k3: tensor<4x2x2x2x2xf32>) {
  // Same padding: 32 + 1 + 1 - 3 + 1 = 32.
  // CHECK: "bm.conv"{{.*}} -> tensor<1x8x32x32xf32>
  %0 = bm.conv %img, %k {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x32x32xf32>, tensor<8x3x3x3xf32>
  // Strided, no padding: (32 - 3) / 2 + 1 = 15; asymmetric pads 0/1 on W:
  // (33 - 3) / 2 + 1 = 16.
  // CHECK: "bm.conv"{{.*}} -> tensor<1x8x15x16xf32>
  %1 = bm.conv %img, %k {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 1>, strides = array<i64: 2, 2>} : tensor<1x3x32x32xf32>, tensor<8x3x3x3xf32>
  // Dilation 2: the window is 5, 32 - 5 + 1 = 28.
  // CHECK: "bm.conv"{{.*}} -> tensor<1x8x28x28xf32>
  %2 = bm.conv %img, %k {dilations = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x32x32xf32>, tensor<8x3x3x3xf32>
  // Grouped: 8 input channels in 4 groups of 2.
  // CHECK: "bm.conv"{{.*}} -> tensor<1x16x30x30xf32>
  %3 = bm.conv %g, %gk {dilations = array<i64: 1, 1>, group = 4 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x8x32x32xf32>, tensor<16x2x3x3xf32>
  // 1-D and 3-D convolutions: (100 + 4 - 5) / 3 + 1 = 34.
  // CHECK: "bm.conv"{{.*}} -> tensor<2x6x34xf32>
  %4 = bm.conv %seq, %k1 {dilations = array<i64: 1>, pads = array<i64: 2, 2>, strides = array<i64: 3>} : tensor<2x4x100xf32>, tensor<6x4x5xf32>
  // CHECK: "bm.conv"{{.*}} -> tensor<1x4x4x4x4xf32>
  %5 = bm.conv %vol, %k3 {dilations = array<i64: 1, 1, 1>, pads = array<i64: 0, 0, 0, 0, 0, 0>, strides = array<i64: 2, 2, 2>} : tensor<1x2x8x8x8xf32>, tensor<4x2x2x2x2xf32>
  return
}

// CHECK-LABEL: sym_name = "pooling"
func.func @pooling(%x: tensor<1x8x32x32xf32>, %s: tensor<2x4x10xf32>) {
  // CHECK: "bm.avg_pool"{{.*}} -> tensor<1x8x16x16xf32>
  %0 = bm.avg_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x8x32x32xf32>
  // (32 + 2 - 3) / 2 + 1 = 16, and 32 - 3 + 1 = 30 with stride 1.
  // CHECK: "bm.max_pool"{{.*}} -> tensor<1x8x16x30xf32>
  %1 = bm.max_pool %x {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 0, 1, 0>, strides = array<i64: 2, 1>} : tensor<1x8x32x32xf32>
  // CHECK: "bm.max_pool"{{.*}} -> tensor<2x4x3xf32>
  %2 = bm.max_pool %s {kernel_shape = array<i64: 4>, pads = array<i64: 0, 0>, strides = array<i64: 3>} : tensor<2x4x10xf32>
  // CHECK: "bm.global_avg_pool"{{.*}} -> tensor<1x8x1x1xf32>
  %3 = bm.global_avg_pool %x : tensor<1x8x32x32xf32>
  // CHECK: "bm.global_avg_pool"{{.*}} -> tensor<2x4x1xf32>
  %4 = bm.global_avg_pool %s : tensor<2x4x10xf32>
  return
}

// CHECK-LABEL: sym_name = "normalisation"
func.func @normalisation(%x: tensor<2x16x64xf32>, %s: tensor<16x64xf32>, %img: tensor<4x8x5x5xbf16>,
                         %p: tensor<8xbf16>) {
  // CHECK: "bm.layer_norm"{{.*}} -> tensor<2x16x64xf32>
  %0 = bm.layer_norm %x, %s, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : tensor<2x16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>
  // CHECK: "bm.rms_norm"{{.*}} -> tensor<2x16x64xf32>
  %1 = bm.rms_norm %x, %s {axis = 1 : i64, epsilon = 0.0 : f32} : tensor<2x16x64xf32>, tensor<16x64xf32>
  // CHECK: "bm.batch_norm"{{.*}} -> tensor<4x8x5x5xbf16>
  %2 = bm.batch_norm %img, %p, %p, %p, %p {epsilon = 1.0e-5 : f32} : tensor<4x8x5x5xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>
  return
}

// CHECK-LABEL: sym_name = "reductions"
func.func @reductions(%x: tensor<2x16x64xf32>, %i: tensor<3x5xi32>) {
  // keep_dims defaults to true.
  // CHECK: "bm.reduce_sum"{{.*}} -> tensor<2x16x1xf32>
  %0 = bm.reduce_sum %x {axes = array<i64: 2>} : tensor<2x16x64xf32>
  // CHECK: "bm.reduce_mean"{{.*}} -> tensor<16xf32>
  %1 = bm.reduce_mean %x {axes = array<i64: 2, 0>, keep_dims = false} : tensor<2x16x64xf32>
  // CHECK: "bm.reduce_max"{{.*}} -> tensor<1x1x1xf32>
  %2 = bm.reduce_max %x {axes = array<i64: 0, 1, 2>} : tensor<2x16x64xf32>
  // CHECK: "bm.reduce_max"{{.*}} -> tensor<i32>
  %3 = bm.reduce_max %i {axes = array<i64: 0, 1>, keep_dims = false} : tensor<3x5xi32>
  // No axes: nothing is reduced.
  // CHECK: "bm.reduce_sum"{{.*}} -> tensor<3x5xi32>
  %4 = bm.reduce_sum %i {axes = array<i64>} : tensor<3x5xi32>
  // CHECK: "bm.top_k"{{.*}} -> (tensor<2x16x4xf32>, tensor<2x16x4xi64>)
  %5:2 = bm.top_k %x {axis = 2 : i64, k = 4 : i64} : tensor<2x16x64xf32>
  // k may be the whole dim.
  // CHECK: "bm.top_k"{{.*}} -> (tensor<3x5xi32>, tensor<3x5xi64>)
  %6:2 = bm.top_k %i {axis = 0 : i64, k = 3 : i64, largest = false} : tensor<3x5xi32>
  return
}

// CHECK-LABEL: sym_name = "data_movement"
func.func @data_movement(%x: tensor<2x16x64xf32>, %e: tensor<100x64xf32>, %ids: tensor<2x16xi64>,
                         %t: tensor<4x100x8xf16>, %ix: tensor<3xi32>, %s: tensor<i64>,
                         %u: tensor<2x1x64xf32>, %one: tensor<1x1xf32>, %v: tensor<64xf32>,
                         %z: tensor<f32>) {
  // CHECK: "bm.transpose"{{.*}} -> tensor<64x2x16xf32>
  %0 = bm.transpose %x {permutation = array<i64: 2, 0, 1>} : tensor<2x16x64xf32>
  // CHECK: "bm.transpose"{{.*}} -> tensor<f32>
  %1 = bm.transpose %z {permutation = array<i64>} : tensor<f32>
  // Embedding lookup: [2, 16] ids into a [100, 64] table.
  // CHECK: "bm.gather"{{.*}} -> tensor<2x16x64xf32>
  %2 = bm.gather %e, %ids {axis = 0 : i64} : tensor<100x64xf32>, tensor<2x16xi64>
  // CHECK: "bm.gather"{{.*}} -> tensor<4x3x8xf16>
  %3 = bm.gather %t, %ix {axis = 1 : i64} : tensor<4x100x8xf16>, tensor<3xi32>
  // A rank-0 index drops the axis.
  // CHECK: "bm.gather"{{.*}} -> tensor<4x8xf16>
  %4 = bm.gather %t, %s {axis = 1 : i64} : tensor<4x100x8xf16>, tensor<i64>
  // CHECK: "bm.concat"{{.*}} -> tensor<2x18x64xf32>
  %5 = bm.concat %x, %u, %u {axis = 1 : i64} : tensor<2x16x64xf32>, tensor<2x1x64xf32>, tensor<2x1x64xf32>
  // CHECK: "bm.split"{{.*}} -> (tensor<2x16x32xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>)
  %6:3 = bm.split %x {axis = 2 : i64, sizes = array<i64: 32, 16, 16>} : tensor<2x16x64xf32>
  // CHECK: "bm.split"{{.*}} -> tensor<2x16x64xf32>
  %7 = bm.split %x {axis = 0 : i64, sizes = array<i64: 2>} : tensor<2x16x64xf32>
  // [8, 16) -> 8; [0, 64) step 2 -> 32; [1, 2) -> 1.
  // CHECK: "bm.slice"{{.*}} -> tensor<1x8x32xf32>
  %8 = bm.slice %x {limits = array<i64: 2, 16, 64>, starts = array<i64: 1, 8, 0>, strides = array<i64: 1, 1, 2>} : tensor<2x16x64xf32>
  // [1, 64) step 3 -> 21 (rounded up); an empty range gives size 0.
  // CHECK: "bm.slice"{{.*}} -> tensor<0x16x21xf32>
  %9 = bm.slice %x {limits = array<i64: 1, 16, 64>, starts = array<i64: 1, 0, 1>, strides = array<i64: 1, 1, 3>} : tensor<2x16x64xf32>
  // CHECK: "bm.squeeze"{{.*}} -> tensor<2x64xf32>
  %10 = bm.squeeze %u {axes = array<i64: 1>} : tensor<2x1x64xf32>
  // CHECK: "bm.squeeze"{{.*}} -> tensor<f32>
  %11 = bm.squeeze %one {axes = array<i64: 1, 0>} : tensor<1x1xf32>
  // Axes index the result: [1, 64, 1].
  // CHECK: "bm.unsqueeze"{{.*}} -> tensor<1x64x1xf32>
  %12 = bm.unsqueeze %v {axes = array<i64: 2, 0>} : tensor<64xf32>
  // CHECK: "bm.unsqueeze"{{.*}} -> tensor<1xf32>
  %13 = bm.unsqueeze %z {axes = array<i64: 0>} : tensor<f32>
  // CHECK: "bm.flatten"{{.*}} -> tensor<2x1024xf32>
  %14 = bm.flatten %x {axis = 1 : i64} : tensor<2x16x64xf32>
  // CHECK: "bm.flatten"{{.*}} -> tensor<1x2048xf32>
  %15 = bm.flatten %x {axis = 0 : i64} : tensor<2x16x64xf32>
  // CHECK: "bm.flatten"{{.*}} -> tensor<2048x1xf32>
  %16 = bm.flatten %x {axis = 3 : i64} : tensor<2x16x64xf32>
  return
}
