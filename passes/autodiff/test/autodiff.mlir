// RUN: bmc-opt %s -bm-autodiff-phase --split-input-file | FileCheck %s

// A linear layer whose output is logits (an integer input of their leading
// shape, the tokens whose next ones are the labels, makes them logits
// rather than a hidden state to regress): autodiff keeps @main, and builds
// @train_step with a label argument, a mean cross-entropy of the flattened
// logits as the loss, and the gradients of both parameters: the weight's
// through one GEMM over the folded batch, the broadcast bias's through a
// reduce_sum over the dims it was broadcast along. The input gets no
// gradient (nothing else is left in the step).

// CHECK-LABEL: func.func @main
// CHECK-SAME: -> tensor<2x3x5xf32>
// CHECK: return %{{.*}} : tensor<2x3x5xf32>

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<2x3x4xf32>,
// CHECK-SAME: tensor<2x3xi64> {bm.kind = "input", bm.name = "tokens"},
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x5xf32> {bm.kind = "parameter", bm.name = "fc.weight"},
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<5xf32> {bm.kind = "parameter", bm.name = "fc.bias"},
// CHECK-SAME: %[[L:[a-z0-9]+]]: tensor<2x3xi64> {bm.kind = "label", bm.name = "labels"})
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss"}, tensor<4x5xf32> {bm.grad_of = "fc.weight"}, tensor<5xf32> {bm.grad_of = "fc.bias"})
// CHECK-NEXT: %[[Y:.*]] = bm.matmul %[[X]], %[[W]] : tensor<2x3x4xf32>, tensor<4x5xf32>
// CHECK-NEXT: %[[Z:.*]] = bm.add %[[Y]], %[[B]] : tensor<2x3x5xf32>, tensor<5xf32>
// CHECK-NEXT: %[[LOGITS:.*]] = bm.reshape %[[Z]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: %[[LABELS:.*]] = bm.reshape %[[L]] : tensor<2x3xi64> -> tensor<6xi64>
// CHECK-NEXT: %[[LOSS:.*]] = bm.cross_entropy %[[LOGITS]], %[[LABELS]] : tensor<6x5xf32>, tensor<6xi64> -> tensor<f32>
// CHECK-NEXT: %[[ONE:.*]] = bm.constant {bm.gradient_seed} dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DLOGITS:.*]] = bm.cross_entropy_grad %[[LOGITS]], %[[LABELS]], %[[ONE]] : tensor<6x5xf32>, tensor<6xi64>, tensor<f32>
// CHECK-NEXT: %[[DZ:.*]] = bm.reshape %[[DLOGITS]] : tensor<6x5xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT: %[[DB_KEPT:.*]] = bm.reduce_sum %[[DZ]] {axes = array<i64: 0, 1>} : tensor<2x3x5xf32>
// CHECK-NEXT: %[[DB:.*]] = bm.reshape %[[DB_KEPT]] : tensor<1x1x5xf32> -> tensor<5xf32>
// CHECK-NEXT: %[[X_ROWS:.*]] = bm.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK-NEXT: %[[DZ_ROWS:.*]] = bm.reshape %[[DZ]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: %[[X_T:.*]] = bm.transpose %[[X_ROWS]] {permutation = array<i64: 1, 0>} : tensor<6x4xf32>
// CHECK-NEXT: %[[DW:.*]] = bm.matmul %[[X_T]], %[[DZ_ROWS]] : tensor<4x6xf32>, tensor<6x5xf32>
// CHECK-NEXT: return %[[LOSS]], %[[DW]], %[[DB]] : tensor<f32>, tensor<4x5xf32>, tensor<5xf32>
func.func @main(%x: tensor<2x3x4xf32>,
                %tokens: tensor<2x3xi64> {bm.kind = "input", bm.name = "tokens"},
                %w: tensor<4x5xf32> {bm.kind = "parameter", bm.name = "fc.weight"},
                %b: tensor<5xf32> {bm.kind = "parameter", bm.name = "fc.bias"}) -> tensor<2x3x5xf32> {
  %0 = bm.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x5xf32>
  %1 = bm.add %0, %b : tensor<2x3x5xf32>, tensor<5xf32>
  return %1 : tensor<2x3x5xf32>
}

// -----

// A scalar output is the loss as it is (no label argument, no
// cross-entropy). A value read by two ops gets the sum of both
// contributions, and only that sum flows on.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"})
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss"}, tensor<4xf32> {bm.grad_of = "x"})
// CHECK-NOT: bm.cross_entropy
// CHECK: %[[S:.*]] = bm.tanh %[[X]]
// CHECK: %[[LOSS:.*]] = bm.reduce_sum
// CHECK: %[[ONE:.*]] = bm.constant {bm.gradient_seed} dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DC:.*]] = bm.expand
// CHECK-DAG: %[[D_SIN:.*]] = bm.unary_grad %[[S]], %[[DC]] {op = "sin"} : tensor<4xf32>
// CHECK-DAG: %[[D_EXP:.*]] = bm.unary_grad %[[S]], %[[DC]] {op = "exp"} : tensor<4xf32>
// CHECK: %[[DS:.*]] = bm.add %[[D_SIN]], %[[D_EXP]] : tensor<4xf32>, tensor<4xf32>
// CHECK-NEXT: %[[DX:.*]] = bm.unary_grad %[[X]], %[[DS]] {op = "tanh"} : tensor<4xf32>
// CHECK-NEXT: return %[[LOSS]], %[[DX]] : tensor<f32>, tensor<4xf32>
func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<f32> {
  %s = bm.tanh %x : tensor<4xf32>
  %a = bm.exp %s : tensor<4xf32>
  %b = bm.sin %s : tensor<4xf32>
  %c = bm.add %a, %b : tensor<4xf32>, tensor<4xf32>
  %l = bm.reduce_sum %c {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
  return %l : tensor<f32>
}

// -----

// Parameters no gradient reaches (one unused, one read only by a
// comparison) are marked bm.trainable = false and get no result; the
// other's gradient is where(mask, dy, 0).

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[a-z0-9]+]]: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"},
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<3xf32> {bm.kind = "parameter", bm.name = "unused", bm.trainable = false},
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<4xf32> {bm.kind = "parameter", bm.name = "threshold", bm.trainable = false})
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss"}, tensor<4xf32> {bm.grad_of = "x"})
// CHECK: %[[MASK:.*]] = bm.greater
// CHECK: %[[LOSS:.*]] = bm.reduce_sum
// CHECK: %[[DY:.*]] = bm.expand
// CHECK: %[[ZERO:.*]] = bm.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[DX:.*]] = bm.where %[[MASK]], %[[DY]], %[[ZERO]] : tensor<4xi1>, tensor<4xf32>, tensor<f32>
// CHECK-NEXT: return %[[LOSS]], %[[DX]] : tensor<f32>, tensor<4xf32>
func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"},
                %unused: tensor<3xf32> {bm.kind = "parameter", bm.name = "unused"},
                %t: tensor<4xf32> {bm.kind = "parameter", bm.name = "threshold"}) -> tensor<f32> {
  %c = bm.greater %x, %t : tensor<4xf32>, tensor<4xf32>
  %z = bm.constant dense<0.0> : tensor<f32>
  %y = bm.where %c, %x, %z : tensor<4xi1>, tensor<4xf32>, tensor<f32>
  %l = bm.reduce_sum %y {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
  return %l : tensor<f32>
}

// -----

// Integer arguments get no gradient: the token ids are read by the
// embedding's gather_grad, and an integer marked as a parameter (a step
// counter) is neither differentiated nor marked untrainable.

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDS:[a-z0-9]+]]: tensor<2x3xi64> {bm.kind = "input", bm.name = "ids"},
// CHECK-SAME: %[[TABLE:[a-z0-9]+]]: tensor<10x4xf32> {bm.kind = "parameter", bm.name = "table"},
// CHECK-SAME: %[[STEPS:[a-z0-9]+]]: tensor<i64> {bm.kind = "parameter", bm.name = "steps"})
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss"}, tensor<10x4xf32> {bm.grad_of = "table"})
// CHECK: %[[SCALE:.*]] = bm.cast %[[STEPS]] : tensor<i64> -> tensor<f32>
// CHECK: %[[LOSS:.*]] = bm.reduce_sum
// CHECK: %[[DE:.*]] = bm.mul %{{.*}}, %[[SCALE]] : tensor<2x3x4xf32>, tensor<f32>
// CHECK-NEXT: %[[DTABLE:.*]] = bm.gather_grad %[[DE]], %[[IDS]] {axis = 0 : i64} : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
// CHECK-NEXT: return %[[LOSS]], %[[DTABLE]] : tensor<f32>, tensor<10x4xf32>
func.func @main(%ids: tensor<2x3xi64> {bm.kind = "input", bm.name = "ids"},
                %table: tensor<10x4xf32> {bm.kind = "parameter", bm.name = "table"},
                %steps: tensor<i64> {bm.kind = "parameter", bm.name = "steps"}) -> tensor<f32> {
  %e = bm.gather %table, %ids {axis = 0 : i64} : tensor<10x4xf32>, tensor<2x3xi64>
  %s = bm.cast %steps : tensor<i64> -> tensor<f32>
  %m = bm.mul %e, %s : tensor<2x3x4xf32>, tensor<f32>
  %l = bm.reduce_sum %m {axes = array<i64: 0, 1, 2>, keep_dims = false} : tensor<2x3x4xf32>
  return %l : tensor<f32>
}
