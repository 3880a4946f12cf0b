// RUN: bmc-opt %s "-bm-autodiff-phase=loss=cross-entropy" --split-input-file --verify-diagnostics

// What --loss cross-entropy cannot append. A scalar output is the model's
// own loss:

func.func @main(%x: tensor<4xf32> {bm.kind = "input", bm.name = "x"},
                %w: tensor<4xf32> {bm.kind = "parameter", bm.name = "w"}) -> tensor<f32> {
  %y = bm.mul %x, %w : tensor<4xf32>, tensor<4xf32>
  // expected-error @+1 {{the model's output is a scalar, its own loss; the loss cross-entropy needs a tensor output}}
  %l = bm.reduce_sum %y {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
  return %l : tensor<f32>
}

// -----

// One value per sample has no class dim (auto makes it a regression).

func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<4xf32> {
  // expected-error @below {{the model's output 'tensor<4xf32>' has no class dim for a cross-entropy}}
  %y = bm.tanh %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
