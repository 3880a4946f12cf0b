// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-insert-reshards),bm-autodiff,bm-partition)' --split-input-file --verify-diagnostics

// A fused projection split into three by a dim whose minor factor is split
// over tp (a fused QKV projection split by heads) needs a strided layout:
// refused, naming the op.

bm.mesh @mesh = <["tp"=2]>
func.func @main(
    %x: tensor<4x12xf32> {bm.kind = "parameter", bm.name = "x",
                          bm.sharding = #bm.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<4x4xf32> {
  // expected-error @+1 {{'bm.split' op needs a strided sharding of its operand #0 dim 1}}
  %a, %b, %c = bm.split %x {axis = 1 : i64, sizes = array<i64: 4, 4, 4>,
      bm.sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>,
                     #bm.sharding<@mesh, [{}, {"tp"}]>,
                     #bm.sharding<@mesh, [{}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>]}
      : tensor<4x12xf32>
  %s = bm.add %a, %b : tensor<4x4xf32>, tensor<4x4xf32>
  %t = bm.add %s, %c : tensor<4x4xf32>, tensor<4x4xf32>
  return %t : tensor<4x4xf32>
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
