// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-insert-reshards),bm-autodiff,bm-partition)' --split-input-file --verify-diagnostics

// bm-partition needs the plan's mesh.

// expected-error @+1 {{bm-partition needs the plan's bm.mesh @mesh}}
module {
  func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"})
      -> tensor<f32> {
    %s = bm.reduce_sum %x {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
    return %s : tensor<f32>
  }
}
