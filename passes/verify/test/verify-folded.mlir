// RUN: bmc-opt %s --bm-fold-phase --split-input-file -verify-diagnostics | FileCheck %s

// The fold phase: bm-fold, then its verifier, which accepts what bm-fold
// wrote.

// CHECK-LABEL: func.func @main
// CHECK: bm.tanh {{.*}}bm.block_class = 0 : i64, bm.layer = 0 : i64
// CHECK: bm.tanh {{.*}}bm.block_class = 0 : i64, bm.layer = 1 : i64
func.func @main(%x: tensor<4x16xf32>, %a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> tensor<4x16xf32> {
  %m0 = bm.matmul %x, %a : tensor<4x16xf32>, tensor<16x16xf32>
  %t0 = bm.tanh %m0 : tensor<4x16xf32>
  %m1 = bm.matmul %t0, %b : tensor<4x16xf32>, tensor<16x16xf32>
  %t1 = bm.tanh %m1 : tensor<4x16xf32>
  return %t1 : tensor<4x16xf32>
}

// -----

// A layer attribute without a block class. (Three single-op "layers" that
// bm-fold leaves alone; the attributes are written by hand.)
func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'bm.tanh' op has 'bm.layer' without 'bm.block_class'}}
  %t0 = bm.tanh %x {bm.layer = 0 : i64} : tensor<4x16xf32>
  return %t0 : tensor<4x16xf32>
}

// -----

func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'bm.tanh' op is in layer 1 right after layer -1: layers are numbered from 0 in op order, each one contiguous}}
  %t0 = bm.tanh %x {bm.layer = 1 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  return %t0 : tensor<4x16xf32>
}

// -----

func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %t0 = bm.tanh %x {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  // expected-error @+1 {{'bm.exp' op is in block class 1 but layer 0 started in block class 0}}
  %t1 = bm.exp %t0 {bm.layer = 0 : i64, bm.block_class = 1 : i64} : tensor<4x16xf32>
  return %t1 : tensor<4x16xf32>
}

// -----

func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %t0 = bm.tanh %x {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  %e0 = bm.exp %t0 {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  // expected-error @+1 {{'bm.tanh' op starts layer 1 of block class 0 with 1 ops, but the class's first layer 0 has 2}}
  %t1 = bm.tanh %e0 {bm.layer = 1 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  return %t1 : tensor<4x16xf32>
}

// -----

func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %t0 = bm.tanh %x {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  %e0 = bm.exp %t0 {bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  %t1 = bm.tanh %e0 {bm.layer = 1 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  // expected-error @+1 {{'bm.sigmoid' op is op 1 of layer 1, but op 1 of layer 0 of the same block class is bm.exp}}
  %e1 = bm.sigmoid %t1 {bm.layer = 1 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  return %e1 : tensor<4x16xf32>
}

// -----

// Same ops, different attributes: hand-written classes that bm-fold would
// not have grouped.
func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %s0 = bm.softmax %x {axis = 1 : i64, bm.layer = 0 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  // expected-error @+1 {{'bm.softmax' op is op 0 of layer 1 with {axis = 0 : i64}, but op 0 of layer 0 of the same block class has {axis = 1 : i64}}}
  %s1 = bm.softmax %s0 {axis = 0 : i64, bm.layer = 1 : i64, bm.block_class = 0 : i64} : tensor<4x16xf32>
  return %s1 : tensor<4x16xf32>
}

// -----

module {
  bm.mesh @mesh = <["tp"=2]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{'bm.all_reduce' op is a collective, which partitioning (phase 6) inserts; it cannot appear after folding}}
    %r = bm.all_reduce %x over ["tp"] on @mesh : tensor<4x16xf32>
    return %r : tensor<4x16xf32>
  }
}

// -----

module {
  bm.mesh @mesh = <["tp"=2]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{'bm.tanh' op carries 'bm.sharding', which the annotate phase writes; it cannot appear after folding}}
    %t = bm.tanh %x {bm.sharding = [#bm.sharding<@mesh, [{}, {"tp"}]>]} : tensor<4x16xf32>
    return %t : tensor<4x16xf32>
  }
}
