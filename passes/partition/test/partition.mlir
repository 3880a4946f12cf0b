// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-insert-reshards),bm-autodiff,bm-partition)' --split-input-file | FileCheck %s

// Megatron's MLP on a 2 x 2 mesh: rows split over dp, the first weight's
// columns and the second's rows over tp. Forward: no collective until the
// row-parallel product, whose partial sum over tp is all-reduced. Backward
// needs none (the input takes no gradient); the weights' gradients stay
// partial sums over dp for the trainer (bm.partial), and the loss is a
// partial sum over dp of local means scaled by 1/2, as is the gradient of
// the logits. Every type is one device's share.

bm.mesh @mesh = <["dp"=2, "tp"=2]>
func.func @main(
    %x: tensor<8x16xf32> {bm.kind = "input", bm.name = "x",
                          bm.sharding = #bm.sharding<@mesh, [{"dp"}, {}]>},
    %w1: tensor<16x32xf32> {bm.kind = "parameter", bm.name = "w1",
                            bm.sharding = #bm.sharding<@mesh, [{}, {"tp"}]>},
    %w2: tensor<32x10xf32> {bm.kind = "parameter", bm.name = "w2",
                            bm.sharding = #bm.sharding<@mesh, [{"tp"}, {}]>})
    -> tensor<8x10xf32> {
  %h = bm.matmul %x, %w1 {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>,
                             #bm.sharding<@mesh, [{}, {"tp"}]>]}
      : tensor<8x16xf32>, tensor<16x32xf32>
  %r = bm.relu %h {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>]}
      : tensor<8x32xf32>
  %y = bm.matmul %r, %w2 {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}], partial={"tp"}>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>,
                             #bm.sharding<@mesh, [{"tp"}, {}]>]}
      : tensor<8x32xf32>, tensor<32x10xf32>
  %s = bm.relu %y {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>]}
      : tensor<8x10xf32>
  return %s : tensor<8x10xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:.*]]: tensor<4x16xf32> {{.*}}%[[W1:.*]]: tensor<16x16xf32> {{.*}}%[[W2:.*]]: tensor<16x10xf32>
// CHECK-SAME: %[[L:.*]]: tensor<4xi64> {{.*}}bm.sharding = #bm.sharding<@mesh, [{"dp"}]>
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = ["dp"]},
// CHECK-SAME: tensor<16x16xf32> {bm.grad_of = "w1", bm.partial = ["dp"]},
// CHECK-SAME: tensor<16x10xf32> {bm.grad_of = "w2", bm.partial = ["dp"]})
// CHECK-NOT: bm.reshard
// CHECK: %[[H:.*]] = bm.matmul %[[X]], %[[W1]] : tensor<4x16xf32>, tensor<16x16xf32>
// CHECK: %[[R:.*]] = bm.relu %[[H]]
// CHECK: %[[Y:.*]] = bm.matmul %[[R]], %[[W2]] : tensor<4x16xf32>, tensor<16x10xf32>
// CHECK: %[[S:.*]] = bm.all_reduce %[[Y]] over ["tp"] on @mesh : tensor<4x10xf32>
// CHECK: %[[CE:.*]] = bm.cross_entropy
// CHECK: %[[HALF:.*]] = bm.constant dense<5.000000e-01>
// CHECK: %[[LOSS:.*]] = bm.mul %[[CE]], %[[HALF]]
// CHECK: %[[DL:.*]] = bm.cross_entropy_grad
// CHECK: %[[DLS:.*]] = bm.mul %[[DL]], %{{.*}} : tensor<4x10xf32>, tensor<f32>
// CHECK-NOT: bm.all_
// CHECK: return %[[LOSS]]

// -----

// A fused projection [4, 3 x 4] whose columns tp splits contiguously, read
// by a split into three parts each split over tp (heads): each device
// needs the strided share of the fused dim. The parameter is stored in
// its factored view [4, 3, 4], split along the last dim (local [4, 3, 2]),
// and read through a reshape: the local [4, 6] is the strided share, cut
// into 2, 2, 2 with no collective (Megatron's permuted QKV columns). The
// split's gradient joins the local parts (concat of equal pieces mirrors
// split) in the same layout, which is the gradient's share of the view.
// The loss, a sum over a split dim, leaves as a partial sum over tp.

bm.mesh @mesh = <["tp"=2]>
func.func @main(
    %x: tensor<4x12xf32> {bm.kind = "parameter", bm.name = "x",
                          bm.sharding = #bm.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<f32> {
  %a, %b, %c = bm.split %x {axis = 1 : i64, sizes = array<i64: 4, 4, 4>,
      bm.sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>,
                     #bm.sharding<@mesh, [{}, {"tp"}]>,
                     #bm.sharding<@mesh, [{}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>]}
      : tensor<4x12xf32>
  %p = bm.mul %a, %b : tensor<4x4xf32>, tensor<4x4xf32>
  %q = bm.mul %p, %c : tensor<4x4xf32>, tensor<4x4xf32>
  %s = bm.reduce_sum %q {axes = array<i64: 0, 1>, keep_dims = false}
      : tensor<4x4xf32>
  return %s : tensor<f32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[X:.*]]: tensor<4x3x2xf32> {{.*}}bm.sharding = #bm.sharding<@mesh, [{}, {}, {"tp"}]>
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = ["tp"]}, tensor<4x3x2xf32> {bm.grad_of = "x"
// CHECK-NOT: bm.all_
// CHECK: %[[LOCAL:.*]] = bm.reshape %[[X]] : tensor<4x3x2xf32> -> tensor<4x6xf32>
// CHECK: bm.split %[[LOCAL]] {axis = 1 : i64, sizes = array<i64: 2, 2, 2>}
// CHECK-NOT: bm.all_
// CHECK: %[[CAT:.*]] = bm.concat {{.*}} : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
// CHECK: %[[DX:.*]] = bm.reshape %[[CAT]] : tensor<4x6xf32> -> tensor<4x3x2xf32>
// CHECK: return %{{.*}}, %[[DX]]

// -----

// A vocabulary-split LM head: the logits reach the loss split along their
// classes over tp (and their rows over dp). They are never gathered: each
// device reduces its 5 classes to three statistics per row, one all-gather
// over tp shares them (3 x 4 -> 6 x 4), the loss merges them (a mean over
// the dp rows, scaled by 1/2) and the gradient of each device's classes
// needs no collective.

bm.mesh @mesh = <["dp"=2, "tp"=2]>
func.func @main(
    %x: tensor<8x16xf32> {bm.kind = "input", bm.name = "x",
                          bm.sharding = #bm.sharding<@mesh, [{"dp"}, {}]>},
    %w: tensor<16x10xf32> {bm.kind = "parameter", bm.name = "w",
                           bm.sharding = #bm.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<8x10xf32> {
  %y = bm.matmul %x, %w {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>,
                             #bm.sharding<@mesh, [{}, {"tp"}]>]}
      : tensor<8x16xf32>, tensor<16x10xf32>
  return %y : tensor<8x10xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32> {bm.kind = "loss", bm.partial = ["dp"]},
// CHECK-SAME: tensor<16x5xf32> {bm.grad_of = "w", bm.partial = ["dp"]})
// CHECK: %[[Y:.*]] = bm.matmul %{{.*}} : tensor<4x16xf32>, tensor<16x5xf32>
// CHECK-NOT: bm.all_gather
// CHECK: %[[R:.*]] = bm.reshape %[[Y]] : tensor<4x5xf32> -> tensor<4x5xf32>
// CHECK: %[[S:.*]] = bm.cross_entropy_stats %[[R]], %[[L:.*]] over ["tp"] on @mesh : tensor<4x5xf32>, tensor<4xi64> -> tensor<3x4xf32>
// CHECK: %[[G:.*]] = bm.all_gather %[[S]] over ["tp"] on @mesh {dim = 0 : i64} : tensor<3x4xf32> -> tensor<6x4xf32>
// CHECK: %[[CE:.*]] = bm.cross_entropy_from_stats %[[G]], %[[L]] : tensor<6x4xf32>, tensor<4xi64> -> tensor<f32>
// CHECK: %[[LOSS:.*]] = bm.mul %[[CE]], %{{.*}} : tensor<f32>, tensor<f32>
// CHECK: %[[DL:.*]] = bm.cross_entropy_grad_from_stats %[[R]], %[[L]], %[[G]], %{{.*}} over ["tp"] on @mesh : tensor<4x5xf32>, tensor<4xi64>, tensor<6x4xf32>, tensor<f32>
// CHECK: bm.mul %[[DL]], %{{.*}} : tensor<4x5xf32>, tensor<f32>
// CHECK-NOT: bm.all_
// CHECK: return %[[LOSS]]

// -----

// Rows flattened from a batch split over dp (2 of 4 per device) and a
// sequence split over tp (sequence parallelism), as HF GPT-2's Conv1D
// does: each device's rows are strided in the merged dim (two runs of 4),
// which a row-parallel product keeps, and the reshape back lines them up
// again. No collective moves them.

bm.mesh @mesh = <["dp"=2, "tp"=2]>
func.func @main(
    %x: tensor<4x8x6xf32> {bm.kind = "input", bm.name = "x",
                           bm.sharding = #bm.sharding<@mesh, [{"dp"}, {"tp"}, {}]>},
    %w: tensor<6x6xf32> {bm.kind = "parameter", bm.name = "w"})
    -> tensor<4x8x6xf32> {
  %rows = bm.reshape %x {
      bm.sharding = [#bm.sharding<@mesh, [{"dp", "tp"}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}, {}]>]}
      : tensor<4x8x6xf32> -> tensor<32x6xf32>
  %y = bm.matmul %rows, %w {
      bm.sharding = [#bm.sharding<@mesh, [{"dp", "tp"}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp", "tp"}, {}]>,
                             #bm.sharding<@mesh, [{}, {}]>]}
      : tensor<32x6xf32>, tensor<6x6xf32>
  %back = bm.reshape %y {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp", "tp"}, {}]>]}
      : tensor<32x6xf32> -> tensor<4x8x6xf32>
  return %back : tensor<4x8x6xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-NOT: bm.all_gather
// CHECK-NOT: bm.all_to_all
// CHECK: %[[ROWS:.*]] = bm.reshape %{{.*}} : tensor<2x4x6xf32> -> tensor<8x6xf32>
// CHECK: %[[Y:.*]] = bm.matmul %[[ROWS]], %{{.*}} : tensor<8x6xf32>, tensor<6x6xf32>
// CHECK: %[[BACK:.*]] = bm.reshape %[[Y]] : tensor<8x6xf32> -> tensor<2x4x6xf32>
// The output, a hidden state of a float input, is regressed: each device's
// squared errors of its box, their mean summed over the mesh.
// CHECK: bm.sub %[[BACK]], %{{.*}} : tensor<2x4x6xf32>, tensor<2x4x6xf32>
// CHECK: bm.reduce_mean

// -----

// An embedding table tied to the LM head. The plan has the gather read it
// split along hidden and the head split along the vocabulary; the table is
// stored once, as the head wants it, and the gather reads it in place
// (Megatron's vocabulary-parallel embedding: zeros for ids another device
// holds, a partial sum over tp, reduced for its reader) instead of moving
// the [16, 8] table to the gather's layout and back every step.

bm.mesh @mesh = <["tp"=2]>
func.func @main(
    %ids: tensor<2x3xi64> {bm.kind = "input", bm.name = "ids"},
    %table: tensor<16x8xf32> {bm.kind = "parameter", bm.name = "table",
                              bm.sharding = #bm.sharding<@mesh, [{}, {"tp"}]>})
    -> tensor<2x3x16xf32> {
  %h = bm.gather %table, %ids {axis = 0 : i64,
      bm.sharding = [#bm.sharding<@mesh, [{}, {}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>,
                             #bm.sharding<@mesh, [{}, {}]>]}
      : tensor<16x8xf32>, tensor<2x3xi64>
  %g = bm.gelu %h {
      bm.sharding = [#bm.sharding<@mesh, [{}, {}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{}, {}, {}]>]}
      : tensor<2x3x8xf32>
  %t = bm.transpose %table {permutation = array<i64: 1, 0>,
      bm.sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"tp"}, {}]>]}
      : tensor<16x8xf32>
  %y = bm.matmul %g, %t {
      bm.sharding = [#bm.sharding<@mesh, [{}, {}, {"tp"}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{}, {}, {}]>,
                             #bm.sharding<@mesh, [{}, {"tp"}]>]}
      : tensor<2x3x8xf32>, tensor<8x16xf32>
  return %y : tensor<2x3x16xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[T:[a-z0-9]+]]: tensor<8x8xf32> {{.*}}bm.sharding = #bm.sharding<@mesh, [{"tp"}, {}]>
// CHECK-NOT: bm.all_to_all
// CHECK: %[[H:.*]] = bm.shard_gather %[[T]], %{{.*}} over ["tp"] on @mesh {axis = 0 : i64} : tensor<8x8xf32>, tensor<2x3xi64> -> tensor<2x3x8xf32>
// CHECK: bm.all_reduce %[[H]] over ["tp"]
// CHECK-NOT: bm.all_to_all
// CHECK: bm.gather_grad
// CHECK-NOT: bm.all_to_all
// CHECK: return

// -----

// A parameter broadcast over the batch (ViT's class token) and read with
// rows split over dp: each replica broadcasts to its own rows, and the
// gradient (a sum over those rows) is a partial sum over dp for the
// trainer, not gathered.

bm.mesh @mesh = <["dp"=2]>
func.func @main(
    %cls: tensor<1x4xf32> {bm.kind = "parameter", bm.name = "cls"},
    %x: tensor<6x4xf32> {bm.kind = "input", bm.name = "x",
                         bm.sharding = #bm.sharding<@mesh, [{"dp"}, {}]>})
    -> tensor<6x4xf32> {
  %b = bm.expand %cls {
      bm.sharding = [#bm.sharding<@mesh, [{}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{}, {}]>]}
      : tensor<1x4xf32> -> tensor<6x4xf32>
  %y = bm.add %b, %x {
      bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>],
      bm.operand_sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>,
                             #bm.sharding<@mesh, [{"dp"}, {}]>]}
      : tensor<6x4xf32>, tensor<6x4xf32>
  return %y : tensor<6x4xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: tensor<1x4xf32> {bm.grad_of = "cls", bm.partial = ["dp"]}
// CHECK-NOT: bm.all_gather
// CHECK-NOT: bm.shard_slice
// CHECK: bm.expand %{{.*}} : tensor<1x4xf32> -> tensor<3x4xf32>
// CHECK-NOT: bm.all_gather
// CHECK: return
