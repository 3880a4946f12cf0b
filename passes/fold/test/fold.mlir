// RUN: bmc-opt %s --bm-fold --split-input-file | FileCheck %s

// Three identical layers after no prologue: all three fold into class 0,
// the head stays unfolded. Layer 0 reads a function argument where the
// others read the previous layer, which folding allows.

// CHECK-LABEL: func.func @three_layers
func.func @three_layers(%x: tensor<2x8x16xf32>, %w0a: tensor<16x64xf32>, %w0b: tensor<64x16xf32>, %g0: tensor<16xf32>, %w1a: tensor<16x64xf32>, %w1b: tensor<64x16xf32>, %g1: tensor<16xf32>, %w2a: tensor<16x64xf32>, %w2b: tensor<64x16xf32>, %g2: tensor<16xf32>, %head: tensor<16x32xf32>) -> tensor<2x8x32xf32> {
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %n0 = bm.layer_norm %x, %g0 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %a0 = bm.matmul %n0, %w0a : tensor<2x8x16xf32>, tensor<16x64xf32>
  // CHECK: bm.relu {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %r0 = bm.relu %a0 : tensor<2x8x64xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %b0 = bm.matmul %r0, %w0b : tensor<2x8x64xf32>, tensor<64x16xf32>
  // CHECK: bm.add {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %y0 = bm.add %x, %b0 : tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %n1 = bm.layer_norm %y0, %g1 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %a1 = bm.matmul %n1, %w1a : tensor<2x8x16xf32>, tensor<16x64xf32>
  // CHECK: bm.relu {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %r1 = bm.relu %a1 : tensor<2x8x64xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %b1 = bm.matmul %r1, %w1b : tensor<2x8x64xf32>, tensor<64x16xf32>
  // CHECK: bm.add {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %y1 = bm.add %y0, %b1 : tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 0 : i64, bm.layer = 2 : i64
  %n2 = bm.layer_norm %y1, %g2 {axis = 2 : i64, epsilon = 1.0e-05 : f32} : tensor<2x8x16xf32>, tensor<16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 2 : i64
  %a2 = bm.matmul %n2, %w2a : tensor<2x8x16xf32>, tensor<16x64xf32>
  // CHECK: bm.relu {{.*}}bm.block_class = 0 : i64, bm.layer = 2 : i64
  %r2 = bm.relu %a2 : tensor<2x8x64xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 2 : i64
  %b2 = bm.matmul %r2, %w2b : tensor<2x8x64xf32>, tensor<64x16xf32>
  // CHECK: bm.add {{.*}}bm.block_class = 0 : i64, bm.layer = 2 : i64
  %y2 = bm.add %y1, %b2 : tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: bm.matmul
  // CHECK-NOT: bm.layer
  // CHECK-SAME: tensor<16x32xf32>
  %out = bm.matmul %y2, %head : tensor<2x8x16xf32>, tensor<16x32xf32>
  return %out : tensor<2x8x32xf32>
}

// -----

// Two kinds of layers (an encoder of width 16, then a decoder of width 32)
// give two block classes; layers are numbered across both.

// CHECK-LABEL: func.func @two_classes
func.func @two_classes(%x: tensor<4x16xf32>, %e0: tensor<16x16xf32>, %e1: tensor<16x16xf32>, %up: tensor<16x32xf32>, %d0: tensor<32x32xf32>, %d1: tensor<32x32xf32>, %d2: tensor<32x32xf32>) -> tensor<4x32xf32> {
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %em0 = bm.matmul %x, %e0 : tensor<4x16xf32>, tensor<16x16xf32>
  // CHECK: bm.tanh {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %et0 = bm.tanh %em0 : tensor<4x16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %em1 = bm.matmul %et0, %e1 : tensor<4x16xf32>, tensor<16x16xf32>
  // CHECK: bm.tanh {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %et1 = bm.tanh %em1 : tensor<4x16xf32>
  %u = bm.matmul %et1, %up : tensor<4x16xf32>, tensor<16x32xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 1 : i64, bm.layer = 2 : i64
  %dm0 = bm.matmul %u, %d0 : tensor<4x32xf32>, tensor<32x32xf32>
  // CHECK: bm.sigmoid {{.*}}bm.block_class = 1 : i64, bm.layer = 2 : i64
  %ds0 = bm.sigmoid %dm0 : tensor<4x32xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 1 : i64, bm.layer = 3 : i64
  %dm1 = bm.matmul %ds0, %d1 : tensor<4x32xf32>, tensor<32x32xf32>
  // CHECK: bm.sigmoid {{.*}}bm.block_class = 1 : i64, bm.layer = 3 : i64
  %ds1 = bm.sigmoid %dm1 : tensor<4x32xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 1 : i64, bm.layer = 4 : i64
  %dm2 = bm.matmul %ds1, %d2 : tensor<4x32xf32>, tensor<32x32xf32>
  // CHECK: bm.sigmoid {{.*}}bm.block_class = 1 : i64, bm.layer = 4 : i64
  %ds2 = bm.sigmoid %dm2 : tensor<4x32xf32>
  return %ds2 : tensor<4x32xf32>
}

// -----

// Side-by-side repeats (Q, K and V projections of the same input) are not
// layers: no instance consumes the previous one, so nothing folds.

// CHECK-LABEL: func.func @side_by_side
// CHECK-NOT: bm.layer
func.func @side_by_side(%x: tensor<4x16xf32>, %q: tensor<16x16xf32>, %k: tensor<16x16xf32>, %v: tensor<16x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {
  %qm = bm.matmul %x, %q : tensor<4x16xf32>, tensor<16x16xf32>
  %qt = bm.tanh %qm : tensor<4x16xf32>
  %km = bm.matmul %x, %k : tensor<4x16xf32>, tensor<16x16xf32>
  %kt = bm.tanh %km : tensor<4x16xf32>
  %vm = bm.matmul %x, %v : tensor<4x16xf32>, tensor<16x16xf32>
  %vt = bm.tanh %vm : tensor<4x16xf32>
  return %qt, %kt, %vt : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>
}

// -----

// A single layer has nothing to fold.

// CHECK-LABEL: func.func @one_layer
// CHECK-NOT: bm.layer
func.func @one_layer(%x: tensor<4x16xf32>, %w: tensor<16x16xf32>) -> tensor<4x16xf32> {
  %m = bm.matmul %x, %w : tensor<4x16xf32>, tensor<16x16xf32>
  %t = bm.tanh %m : tensor<4x16xf32>
  return %t : tensor<4x16xf32>
}

// -----

// Exporters share constants between layers: the first layer defines the
// constant both use. Constants move to the top, so both layers fold.

// CHECK-LABEL: func.func @shared_constant
// CHECK-NEXT: bm.constant dense<5.000000e-01> : tensor<f32>{{$}}
// CHECK: bm.mul {{.*}}bm.layer = 0
// CHECK: bm.mul {{.*}}bm.layer = 1
func.func @shared_constant(%x: tensor<4x16xf32>, %a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> tensor<4x16xf32> {
  %m0 = bm.matmul %x, %a : tensor<4x16xf32>, tensor<16x16xf32>
  %half = bm.constant dense<5.000000e-01> : tensor<f32>
  %h0 = bm.mul %m0, %half : tensor<4x16xf32>, tensor<f32>
  %m1 = bm.matmul %h0, %b : tensor<4x16xf32>, tensor<16x16xf32>
  %h1 = bm.mul %m1, %half : tensor<4x16xf32>, tensor<f32>
  return %h1 : tensor<4x16xf32>
}

// -----

// What all layers read but the first computes (Llama's rotary table, here
// cos of a parameter, read by both layers) moves to the top, so both layers
// fold; what each layer computes from its own weight alone (a transpose,
// read once) stays in its layer. Arguments of unknown kind never count as
// layer invariant.

// CHECK-LABEL: func.func @shared_table
// CHECK-NEXT: bm.cos %arg1 : tensor<16xf32>{{$}}
// CHECK-NEXT: bm.transpose %arg2 {bm.block_class = 0 : i64, bm.layer = 0 : i64
// CHECK: bm.mul {{.*}}bm.layer = 0
// CHECK: bm.transpose %arg3 {bm.block_class = 0 : i64, bm.layer = 1 : i64
// CHECK: bm.add {{.*}}bm.layer = 1
func.func @shared_table(%x: tensor<4x16xf32> {bm.kind = "input"}, %freq: tensor<16xf32> {bm.kind = "parameter"}, %a: tensor<16x16xf32> {bm.kind = "parameter"}, %b: tensor<16x16xf32> {bm.kind = "parameter"}) -> tensor<4x16xf32> {
  %ta = bm.transpose %a {permutation = array<i64: 1, 0>} : tensor<16x16xf32>
  %m0 = bm.matmul %x, %ta : tensor<4x16xf32>, tensor<16x16xf32>
  %table = bm.cos %freq : tensor<16xf32>
  %r0 = bm.mul %m0, %table : tensor<4x16xf32>, tensor<16xf32>
  %h0 = bm.add %r0, %x : tensor<4x16xf32>, tensor<4x16xf32>
  %tb = bm.transpose %b {permutation = array<i64: 1, 0>} : tensor<16x16xf32>
  %m1 = bm.matmul %h0, %tb : tensor<4x16xf32>, tensor<16x16xf32>
  %r1 = bm.mul %m1, %table : tensor<4x16xf32>, tensor<16xf32>
  %h1 = bm.add %r1, %h0 : tensor<4x16xf32>, tensor<4x16xf32>
  return %h1 : tensor<4x16xf32>
}

// -----

// Layers that differ only in an attribute (the norm's epsilon) compute
// different things: two block classes, not one.

// CHECK-LABEL: func.func @attribute_differs
func.func @attribute_differs(%x: tensor<4x16xf32>, %w0: tensor<16x16xf32>, %w1: tensor<16x16xf32>, %w2: tensor<16x16xf32>, %w3: tensor<16x16xf32>, %g: tensor<16xf32>) -> tensor<4x16xf32> {
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %m0 = bm.matmul %x, %w0 : tensor<4x16xf32>, tensor<16x16xf32>
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
  %n0 = bm.layer_norm %m0, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x16xf32>, tensor<16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %m1 = bm.matmul %n0, %w1 : tensor<4x16xf32>, tensor<16x16xf32>
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
  %n1 = bm.layer_norm %m1, %g {axis = 1 : i64, epsilon = 1.0e-05 : f32} : tensor<4x16xf32>, tensor<16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 1 : i64, bm.layer = 2 : i64
  %m2 = bm.matmul %n1, %w2 : tensor<4x16xf32>, tensor<16x16xf32>
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 1 : i64, bm.layer = 2 : i64
  %n2 = bm.layer_norm %m2, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x16xf32>, tensor<16xf32>
  // CHECK: bm.matmul {{.*}}bm.block_class = 1 : i64, bm.layer = 3 : i64
  %m3 = bm.matmul %n2, %w3 : tensor<4x16xf32>, tensor<16x16xf32>
  // CHECK: bm.layer_norm {{.*}}bm.block_class = 1 : i64, bm.layer = 3 : i64
  %n3 = bm.layer_norm %m3, %g {axis = 1 : i64, epsilon = 1.0e-06 : f32} : tensor<4x16xf32>, tensor<16xf32>
  return %n3 : tensor<4x16xf32>
}
