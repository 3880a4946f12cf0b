// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-insert-reshards),bm-autodiff,bm-partition-phase)' --split-input-file --verify-diagnostics | FileCheck %s

// Two layers on two pipeline stages (each takes all the data, the input
// and the labels, read or not): stage 0 runs the first layer's
// forward, sends its output and, in backward, receives that output's
// gradient and returns its weight's gradient; stage 1 receives the
// activation, computes the loss and sends the gradient back. The mask, a
// value of no parameter, is computed on each stage that reads it.

bm.mesh @mesh = <["pp"=2]>
func.func @main(
    %x: tensor<4x8xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w0: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w0",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w1: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w1",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>})
    -> tensor<4x8xf32> {
  %mask = bm.constant {bm.stage = 0 : i64} dense<0.5> : tensor<8xf32>
  %h0 = bm.matmul %x, %w0 {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %a0 = bm.mul %h0, %mask {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<8xf32>
  %h1 = bm.matmul %a0, %w1 {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %a1 = bm.mul %h1, %mask {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8xf32>
  return %a1 : tensor<4x8xf32>
}

// CHECK-NOT: func.func @train_step
// CHECK-LABEL: func.func @stage_0
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "input"
// CHECK-SAME: %[[G:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation_grad", bm.name = "activation_grad"}
// CHECK-SAME: %[[W0:[a-z0-9]+]]: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w0"
// CHECK-SAME: -> (tensor<8x8xf32> {bm.grad_of = "w0", bm.partial = []}, tensor<4x8xf32> {bm.kind = "send", bm.name = "send"})
// CHECK: %[[MASK:[0-9]+]] = bm.constant
// CHECK: %[[H0:[0-9]+]] = bm.matmul %[[X]], %[[W0]]
// CHECK: %[[A0:[0-9]+]] = bm.mul %[[H0]], %[[MASK]]
// CHECK: bm.mul %[[G]], %[[MASK]] {bm.gradient_seed
// CHECK: return %{{[0-9]+}}, %[[A0]]
// CHECK-LABEL: func.func @stage_1
// CHECK-SAME: {bm.kind = "input"
// CHECK-SAME: {bm.kind = "label"
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation", bm.name = "activation"}
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = []}, tensor<8x8xf32> {bm.grad_of = "w1", bm.partial = []}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"})
// CHECK: bm.matmul %[[A]]
// CHECK: bm.constant {{.*}}dense<5.000000e-01>
// CHECK: bm.cross_entropy
// CHECK: bm.constant {bm.gradient_seed}

// -----

// A weight read on both stages (an embedding tied to the output layer):
// each stage holds it and returns its share of the gradient, a partial sum
// over "pp" for the trainer.

bm.mesh @mesh = <["pp"=2]>
func.func @main(
    %x: tensor<4x8xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>})
    -> tensor<4x8xf32> {
  %h0 = bm.matmul %x, %w {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %h1 = bm.matmul %h0, %w {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  return %h1 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @stage_0
// CHECK-SAME: bm.name = "w"
// CHECK-SAME: -> (tensor<8x8xf32> {bm.grad_of = "w", bm.partial = ["pp"]}, tensor<4x8xf32> {bm.kind = "send", bm.name = "send"})
// CHECK-LABEL: func.func @stage_1
// CHECK-SAME: bm.name = "w"
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = []}, tensor<8x8xf32> {bm.grad_of = "w", bm.partial = ["pp"]}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"})

// -----

// A table computed from a parameter (rotary embeddings) and read on both
// stages is computed again on each: both hold the parameter, and each
// returns its share of the gradient through the table's own ops.

bm.mesh @mesh = <["pp"=2]>
func.func @main(
    %x: tensor<4x8xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %t: tensor<16xf32> {bm.kind = "parameter", bm.name = "t",
                        bm.sharding = #bm.sharding<@mesh, [{}]>},
    %w: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>})
    -> tensor<4x8xf32> {
  %table = bm.slice %t {bm.stage = 0 : i64, starts = array<i64: 0>,
      limits = array<i64: 8>, strides = array<i64: 1>} : tensor<16xf32>
  %h0 = bm.mul %x, %table {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<8xf32>
  %h1 = bm.matmul %h0, %w {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %h2 = bm.mul %h1, %table {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8xf32>
  return %h2 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @stage_0
// CHECK-SAME: -> (tensor<16xf32> {bm.grad_of = "t", bm.partial = ["pp"]}
// CHECK: bm.slice
// CHECK: bm.slice_grad
// CHECK-LABEL: func.func @stage_1
// CHECK-SAME: bm.name = "t"
// CHECK-SAME: tensor<16xf32> {bm.grad_of = "t", bm.partial = ["pp"]}
// CHECK: %[[TABLE:[0-9]+]] = bm.slice
// CHECK: bm.mul %{{[0-9]+}}, %[[TABLE]]
// CHECK: bm.slice_grad

// -----

// Interleaved (two chunks per pipeline rank): a weight read on the first
// and the last virtual stage is held by every chunk, each returning its
// share of the gradient (zeros on the chunks that read none) as a partial
// sum over "pp"; the trainer adds the shares of a rank's chunks before
// summing over pp.

bm.mesh @mesh = <["pp"=2]>
func.func @main(
    %x: tensor<4x8xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w1: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w1",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w2: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w2",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>})
    -> tensor<4x8xf32> {
  %h0 = bm.matmul %x, %w {bm.stage = 0 : i64, bm.virtual_stage = 0 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %h1 = bm.matmul %h0, %w1 {bm.stage = 1 : i64, bm.virtual_stage = 1 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %h2 = bm.matmul %h1, %w2 {bm.stage = 0 : i64, bm.virtual_stage = 2 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %h3 = bm.matmul %h2, %w {bm.stage = 1 : i64, bm.virtual_stage = 3 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  return %h3 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @stage_0
// CHECK-SAME: bm.name = "w"
// CHECK-SAME: -> (tensor<8x8xf32> {bm.grad_of = "w", bm.partial = ["pp"]}, tensor<4x8xf32> {bm.kind = "send"
// CHECK: bm.matmul
// CHECK-LABEL: func.func @stage_1
// CHECK-SAME: bm.name = "w"
// CHECK-SAME: tensor<8x8xf32> {bm.grad_of = "w", bm.partial = ["pp"]}
// CHECK: %[[ZERO1:[0-9]+]] = bm.constant dense<0.000000e+00> : tensor<8x8xf32>
// CHECK: return %{{[0-9]+}}, %[[ZERO1]],
// CHECK-LABEL: func.func @stage_2
// CHECK-SAME: bm.name = "w"
// CHECK-SAME: tensor<8x8xf32> {bm.grad_of = "w", bm.partial = ["pp"]}
// CHECK: %[[ZERO2:[0-9]+]] = bm.constant dense<0.000000e+00> : tensor<8x8xf32>
// CHECK: return %{{[0-9]+}}, %[[ZERO2]],
// CHECK-LABEL: func.func @stage_3
// CHECK-SAME: bm.name = "w"
// CHECK-SAME: tensor<8x8xf32> {bm.grad_of = "w", bm.partial = ["pp"]}
// CHECK: bm.cross_entropy_grad
