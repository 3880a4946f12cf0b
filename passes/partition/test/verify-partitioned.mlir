// RUN: bmc-opt %s -bm-verify-partitioned --split-input-file --verify-diagnostics

// A reshard left in the step: bm-partition lowers every one.

bm.mesh @mesh = <["tp"=2]>
func.func @train_step(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"})
    -> (tensor<4xf32> {bm.grad_of = "x", bm.partial = []}) {
  // expected-error @+1 {{'bm.reshard' op is left after partitioning}}
  %y = bm.reshard %x {sharding = #bm.sharding<@mesh, [{"tp"}]>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A gradient that does not say what the trainer reduces.

// expected-error @+1 {{result 0 of @train_step has no 'bm.partial' after partitioning}}
func.func @train_step(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"})
    -> (tensor<4xf32> {bm.grad_of = "x"}) {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{no @train_step or @stage_N}}
module {
}
