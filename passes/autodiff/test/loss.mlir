// RUN: bmc-opt %s -bm-autodiff-phase --split-input-file | FileCheck %s --check-prefix=AUTO
// RUN: bmc-opt %s "-bm-autodiff-phase=loss=mse" --split-input-file | FileCheck %s --check-prefix=MSE
// RUN: bmc-opt %s "-bm-autodiff-phase=loss=cross-entropy" --split-input-file | FileCheck %s --check-prefix=XENT
// RUN: not bmc-opt %s "-bm-autodiff-phase=loss=hinge" --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD

// The loss appended to a model's output. A hidden state [2, 3, 4] of a
// float input has no labels a cross-entropy could take (no integer input
// of shape [2, 3]): under auto it is a regression, the mean over every
// element of (y - t)^2 against float targets of y's shape.

// AUTO-LABEL: func.func @train_step
// AUTO-SAME: %[[T:[a-z0-9]+]]: tensor<2x3x4xf32> {bm.kind = "label", bm.name = "targets"})
// AUTO: %[[Y:.*]] = bm.matmul
// AUTO-NEXT: %[[E:.*]] = bm.sub %[[Y]], %[[T]] : tensor<2x3x4xf32>, tensor<2x3x4xf32>
// AUTO-NEXT: %[[S:.*]] = bm.mul %[[E]], %[[E]]
// AUTO-NEXT: bm.reduce_mean %[[S]] {axes = array<i64: 0, 1, 2>, keep_dims = false}
// MSE-LABEL: func.func @train_step
// MSE-SAME: tensor<2x3x4xf32> {bm.kind = "label", bm.name = "targets"})
// XENT-LABEL: func.func @train_step
// XENT-SAME: tensor<2x3xi64> {bm.kind = "label", bm.name = "labels"})
// XENT: bm.cross_entropy
// BAD: error: the loss must be auto, cross-entropy or mse, not 'hinge'
func.func @main(%x: tensor<2x3x4xf32> {bm.kind = "input", bm.name = "x"},
                %w: tensor<4x4xf32> {bm.kind = "parameter", bm.name = "w"}) -> tensor<2x3x4xf32> {
  %y = bm.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x4xf32>
  return %y : tensor<2x3x4xf32>
}

// -----

// Logits of a language model ([2, 3, 5], an integer input [2, 3] whose
// next tokens are the labels) and of a classifier ([2, 5]) take a
// cross-entropy under auto; mse makes either a regression.

// AUTO-LABEL: func.func @train_step
// AUTO-SAME: tensor<2x3xi64> {bm.kind = "label", bm.name = "labels"})
// AUTO: bm.cross_entropy
// MSE-LABEL: func.func @train_step
// MSE-SAME: tensor<2x3x5xf32> {bm.kind = "label", bm.name = "targets"})
// MSE-NOT: bm.cross_entropy
// XENT-LABEL: func.func @train_step
// XENT: bm.cross_entropy
func.func @main(%ids: tensor<2x3xi64> {bm.kind = "input", bm.name = "ids"},
                %table: tensor<10x5xf32> {bm.kind = "parameter", bm.name = "table"}) -> tensor<2x3x5xf32> {
  %y = bm.gather %table, %ids {axis = 0 : i64} : tensor<10x5xf32>, tensor<2x3xi64>
  return %y : tensor<2x3x5xf32>
}

// -----

// AUTO-LABEL: func.func @train_step
// AUTO-SAME: tensor<2xi64> {bm.kind = "label", bm.name = "labels"})
// AUTO: bm.cross_entropy
// MSE-LABEL: func.func @train_step
// MSE-SAME: tensor<2x5xf32> {bm.kind = "label", bm.name = "targets"})
func.func @main(%x: tensor<2x4xf32> {bm.kind = "input", bm.name = "x"},
                %w: tensor<4x5xf32> {bm.kind = "parameter", bm.name = "w"}) -> tensor<2x5xf32> {
  %y = bm.matmul %x, %w : tensor<2x4xf32>, tensor<4x5xf32>
  return %y : tensor<2x5xf32>
}
