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

// -----

// Several values cross a boundary, in the order of their first use: stage
// 1 reads %a, stage 2 reads %c (stage 1's) and %b, which stage 0 makes and
// stage 1 passes on. Stage 0 sends %a then %b; stage 1 takes them as its
// activations in that order and sends %c and %b on. Backward, the
// gradients of %c and %b go back to stage 1, which passes %b's on to stage
// 0 beside %a's (first, since it crosses into stage 0 first: the backward's
// order is the gradients' first use, not the forward's).

bm.mesh @mesh = <["pp"=3]>
func.func @main(
    %x: tensor<4x8xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w0: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w0",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w1: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w1",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w2: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w2",
                          bm.sharding = #bm.sharding<@mesh, [{}, {}]>})
    -> tensor<4x8xf32> {
  %a = bm.matmul %x, %w0 {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %b = bm.matmul %x, %w1 {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %c = bm.matmul %a, %w2 {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %e = bm.mul %c, %b {bm.stage = 2 : i64} : tensor<4x8xf32>, tensor<4x8xf32>
  return %e : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @stage_0
// CHECK-SAME: %[[GB0:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation_grad", bm.name = "activation_grad"}, %[[GA0:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation_grad", bm.name = "activation_grad"}
// CHECK-SAME: -> (tensor<8x8xf32> {bm.grad_of = "w0", bm.partial = []}, tensor<8x8xf32> {bm.grad_of = "w1", bm.partial = []}, tensor<4x8xf32> {bm.kind = "send", bm.name = "send"}, tensor<4x8xf32> {bm.kind = "send", bm.name = "send"})
// CHECK: %[[A:[0-9]+]] = bm.matmul %arg0, %{{[a-z0-9]+}} {bm.stage = 0
// CHECK: %[[B:[0-9]+]] = bm.matmul %arg0, %{{[a-z0-9]+}} {bm.stage = 0
// CHECK: %[[DW1:[0-9]+]] = bm.matmul %{{[0-9]+}}, %[[GB0]]
// CHECK: %[[DW0:[0-9]+]] = bm.matmul %{{[0-9]+}}, %[[GA0]]
// CHECK: return %[[DW0]], %[[DW1]], %[[A]], %[[B]]
// CHECK-LABEL: func.func @stage_1
// CHECK-SAME: %[[A1:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation", bm.name = "activation"}, %[[B1:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation", bm.name = "activation"}, %[[GC1:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation_grad", bm.name = "activation_grad"}, %[[GB1:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation_grad", bm.name = "activation_grad"}
// CHECK-SAME: -> (tensor<8x8xf32> {bm.grad_of = "w2", bm.partial = []}, tensor<4x8xf32> {bm.kind = "send", bm.name = "send"}, tensor<4x8xf32> {bm.kind = "send", bm.name = "send"}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"})
// CHECK: %[[C:[0-9]+]] = bm.matmul %[[A1]]
// CHECK: %[[GA1:[0-9]+]] = bm.matmul %[[GC1]]
// CHECK: return %{{[0-9]+}}, %[[C]], %[[B1]], %[[GB1]], %[[GA1]]
// CHECK-LABEL: func.func @stage_2
// CHECK-SAME: %[[C2:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation", bm.name = "activation"}, %[[B2:[a-z0-9]+]]: tensor<4x8xf32> {bm.kind = "activation", bm.name = "activation"}
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = []}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"})
// CHECK: bm.mul %[[C2]], %[[B2]]
// CHECK: %[[GC2:[0-9]+]] = bm.mul %{{[0-9]+}}, %[[B2]]
// CHECK: %[[GB2:[0-9]+]] = bm.mul %{{[0-9]+}}, %[[C2]]
// CHECK: return %{{[0-9]+}}, %[[GC2]], %[[GB2]]

// -----

// A bias gathered from a parameter by indices of no data (T5's relative
// position buckets) and read on both stages: stage 1 computes it again and
// returns its share of the parameter's gradient through its own
// gather_grad, so no gradient of the bias crosses back; the stream's alone
// does (stage 0 takes one activation_grad, its last argument).

bm.mesh @mesh = <["pp"=2]>
func.func @main(
    %x: tensor<4x8xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %t: tensor<6x8xf32> {bm.kind = "parameter", bm.name = "t",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>},
    %w: tensor<8x8xf32> {bm.kind = "parameter", bm.name = "w",
                         bm.sharding = #bm.sharding<@mesh, [{}, {}]>})
    -> tensor<4x8xf32> {
  %ids = bm.constant {bm.stage = 0 : i64} dense<[0, 2, 5, 1]> : tensor<4xi64>
  %bias = bm.gather %t, %ids {bm.stage = 0 : i64, axis = 0 : i64} : tensor<6x8xf32>, tensor<4xi64>
  %h0 = bm.mul %x, %bias {bm.stage = 0 : i64} : tensor<4x8xf32>, tensor<4x8xf32>
  %h1 = bm.matmul %h0, %w {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<8x8xf32>
  %h2 = bm.add %h1, %bias {bm.stage = 1 : i64} : tensor<4x8xf32>, tensor<4x8xf32>
  return %h2 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @stage_0
// CHECK-SAME: bm.name = "t"
// CHECK-SAME: tensor<4x8xf32> {bm.kind = "activation_grad", bm.name = "activation_grad"}) -> (tensor<6x8xf32> {bm.grad_of = "t", bm.partial = ["pp"]}
// CHECK: bm.gather_grad
// CHECK-LABEL: func.func @stage_1
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = []}, tensor<8x8xf32> {bm.grad_of = "w", bm.partial = []}, tensor<6x8xf32> {bm.grad_of = "t", bm.partial = ["pp"]}, tensor<4x8xf32> {bm.kind = "send_grad", bm.name = "send_grad"})
// CHECK: bm.gather %{{[a-z0-9]+}}, %{{[0-9]+}}
// CHECK: bm.gather_grad
