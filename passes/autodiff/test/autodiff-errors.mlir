// RUN: bmc-opt %s -bm-autodiff-phase --split-input-file --verify-diagnostics

// Models autodiff cannot build a training step from: each stops the pass
// with one error naming the problem.

// expected-error @below {{autodiff needs the forward model as @main}}
module {
  func.func @forward(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<f32> {
    %l = bm.reduce_sum %x {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
    return %l : tensor<f32>
  }
}

// -----

// expected-error @below {{the module already has a @train_step}}
module {
  func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<f32> {
    %l = bm.reduce_sum %x {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
    return %l : tensor<f32>
  }
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @below {{the model has 2 outputs; training needs one (a scalar loss or logits)}}
func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> (tensor<f32>, tensor<f32>) {
  %l = bm.reduce_sum %x {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<4xi64> {
  // expected-error @below {{the model's output is 'tensor<4xi64>'; training needs a float loss, logits or a float output to regress}}
  %i = bm.cast %x : tensor<4xf32> -> tensor<4xi64>
  return %i : tensor<4xi64>
}


// -----

// A backward op in the forward model: it has no gradient rule of its own.
func.func @main(%x: tensor<2x4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<f32> {
  %s = bm.softmax %x {axis = 1 : i64} : tensor<2x4xf32>
  // expected-error @below {{'bm.softmax_grad' op has no gradient rule; autodiff cannot train through it}}
  %g = bm.softmax_grad %s, %x {axis = 1 : i64} : tensor<2x4xf32>
  %l = bm.reduce_sum %g {axes = array<i64: 0, 1>, keep_dims = false} : tensor<2x4xf32>
  return %l : tensor<f32>
}

// -----

// Collectives belong to partitioning, after autodiff.
bm.mesh @mesh = <["dp"=2]>
func.func @main(%x: tensor<4xf32> {bm.kind = "parameter", bm.name = "x"}) -> tensor<f32> {
  // expected-error @below {{'bm.all_reduce' op has no gradient rule; autodiff cannot train through it}}
  %r = bm.all_reduce %x over ["dp"] on @mesh : tensor<4xf32>
  %l = bm.reduce_sum %r {axes = array<i64: 0>, keep_dims = false} : tensor<4xf32>
  return %l : tensor<f32>
}

// -----

// An einsum that sums a letter of one operand on its own ("k" of b) has no
// einsum as its gradient.
func.func @main(%a: tensor<2x3xf32> {bm.kind = "parameter", bm.name = "a"},
                %b: tensor<3x4xf32> {bm.kind = "parameter", bm.name = "b"}) -> tensor<f32> {
  // expected-error @below {{einsum 'ij,jk->i' sums a letter of one operand alone or repeats it; autodiff has no rule for that}}
  %y = bm.einsum "ij,jk->i" %a, %b : tensor<2x3xf32>, tensor<3x4xf32>
  %l = bm.reduce_sum %y {axes = array<i64: 0>, keep_dims = false} : tensor<2xf32>
  return %l : tensor<f32>
}
