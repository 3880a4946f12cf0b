// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-insert-reshards),bm-autodiff,bm-partition)' --split-input-file --verify-diagnostics

// Gathering rows of a table split by rows (a vocabulary-parallel
// embedding) would need each device to mask the ids it does not own:
// refused, naming the op.

bm.mesh @mesh = <["tp"=2]>
func.func @main(
    %table: tensor<8x4xf32> {bm.kind = "parameter", bm.name = "table",
                             bm.sharding = #bm.sharding<@mesh, [{"tp"}, {}]>},
    %ids: tensor<3xi64> {bm.kind = "input", bm.name = "ids"}) -> tensor<f32> {
  // expected-error @+1 {{'bm.gather' op gathers from a table split over its rows}}
  %rows = bm.gather %table, %ids {axis = 0 : i64,
      bm.operand_sharding = [#bm.sharding<@mesh, [{"tp"}, {}]>,
                             #bm.sharding<@mesh, [{}]>]}
      : tensor<8x4xf32>, tensor<3xi64>
  %s = bm.reduce_sum %rows {axes = array<i64: 0, 1>, keep_dims = false}
      : tensor<3x4xf32>
  return %s : tensor<f32>
}

// -----

// bm-partition needs the plan's mesh.

// expected-error @+1 {{bm-partition needs the plan's bm.mesh @mesh}}
module {
  func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"})
      -> tensor<f32> {
    %s = bm.reduce_sum %x {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
    return %s : tensor<f32>
  }
}
