// RUN: bmc-opt %s "-bm-autodiff-phase=recompute=none" | FileCheck %s --check-prefix=NONE
// RUN: bmc-opt %s "-bm-autodiff-phase=recompute=selective" | FileCheck %s --check-prefix=SELECTIVE
// RUN: bmc-opt %s "-bm-autodiff-phase=recompute=full" | FileCheck %s --check-prefix=FULL
// RUN: not bmc-opt %s "-bm-autodiff-phase=recompute=some" 2>&1 | FileCheck %s --check-prefix=BAD

// One attention layer (bm.layer 0, as bm-fold marks it) on activations x.
// none: backward's softmax_grad reads forward's softmax.
// selective: the core (Q K^T, scale, softmax, P V) runs again in backward
// and softmax_grad reads the second softmax; the projections do not.
// full: the whole layer, projections included, runs again.

// NONE-LABEL: func.func @train_step
// NONE: %[[P:.*]] = bm.softmax
// NONE-NOT: bm.softmax %
// NONE: bm.softmax_grad %[[P]]

// SELECTIVE-LABEL: func.func @train_step
// SELECTIVE-COUNT-3: bm.matmul %arg0
// SELECTIVE: bm.softmax
// SELECTIVE: bm.reduce_sum
// SELECTIVE-NOT: bm.matmul %arg0
// SELECTIVE: %[[P2:.*]] = bm.softmax
// SELECTIVE-NOT: bm.matmul %arg0
// SELECTIVE: bm.softmax_grad %[[P2]]

// FULL-LABEL: func.func @train_step
// FULL-COUNT-3: bm.matmul %arg0
// FULL: bm.reduce_sum
// FULL-COUNT-3: bm.matmul %arg0
// FULL: %[[P2:.*]] = bm.softmax
// FULL: bm.softmax_grad %[[P2]]

// BAD: recompute must be none, selective or full, got 'some'

func.func @main(%x: tensor<2x4x8xf32>,
                %wq: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "wq"},
                %wk: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "wk"},
                %wv: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "wv"})
    -> tensor<f32> {
  %q = bm.matmul %x, %wq {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %k = bm.matmul %x, %wk {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %v = bm.matmul %x, %wv {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %kt = bm.transpose %k {permutation = array<i64: 0, 2, 1>, bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x8xf32>
  %s = bm.matmul %q, %kt {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x8xf32>, tensor<2x8x4xf32>
  %c = bm.constant dense<0.35> : tensor<f32>
  %scaled = bm.mul %s, %c {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x4xf32>, tensor<f32>
  %p = bm.softmax %scaled {axis = 2 : i64, bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x4xf32>
  %o = bm.matmul %p, %v {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<2x4x4xf32>, tensor<2x4x8xf32>
  %sum = bm.reduce_sum %o {axes = array<i64: 0, 1, 2>, keep_dims = false} : tensor<2x4x8xf32>
  return %sum : tensor<f32>
}
