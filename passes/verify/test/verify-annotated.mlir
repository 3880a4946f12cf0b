// RUN: bmc-opt %s --bm-verify-annotated --split-input-file -verify-diagnostics | FileCheck %s

// What the annotate phase leaves: a mesh, and a sharding and a stage on
// every op, the same on every instance of a block class.

// CHECK: bm.mesh @mesh
module {
  bm.mesh @mesh = <["dp"=2, "tp"=1, "pp"=2]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    %t0 = bm.tanh %x {bm.layer = 0 : i64, bm.block_class = 0 : i64, bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>], bm.stage = 0 : i64} : tensor<4x16xf32>
    %t1 = bm.tanh %t0 {bm.layer = 1 : i64, bm.block_class = 0 : i64, bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>], bm.stage = 1 : i64} : tensor<4x16xf32>
    return %t1 : tensor<4x16xf32>
  }
}

// -----

// expected-error @+1 {{annotated module has no 'bm.mesh @mesh'}}
module {
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    return %x : tensor<4x16xf32>
  }
}

// -----

module {
  bm.mesh @mesh = <["dp"=2, "tp"=1, "pp"=1]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{'bm.tanh' op has no 'bm.sharding' after annotation}}
    %t = bm.tanh %x {bm.stage = 0 : i64} : tensor<4x16xf32>
    return %t : tensor<4x16xf32>
  }
}

// -----

module {
  bm.mesh @mesh = <["dp"=2, "tp"=1, "pp"=1]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{'bm.tanh' op has no integer 'bm.stage' after annotation}}
    %t = bm.tanh %x {bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>]} : tensor<4x16xf32>
    return %t : tensor<4x16xf32>
  }
}

// -----

module {
  bm.mesh @mesh = <["dp"=2, "tp"=1, "pp"=2]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{'bm.tanh' op is on stage 2 but the mesh has 2 pipeline stages}}
    %t = bm.tanh %x {bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>], bm.stage = 2 : i64} : tensor<4x16xf32>
    return %t : tensor<4x16xf32>
  }
}

// -----

module {
  bm.mesh @mesh = <["dp"=2, "tp"=2, "pp"=1]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    %t0 = bm.tanh %x {bm.layer = 0 : i64, bm.block_class = 0 : i64, bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>], bm.stage = 0 : i64} : tensor<4x16xf32>
    // expected-error @+1 {{'bm.tanh' op in layer 1 is sharded [#bm.sharding<@mesh, [{"dp"}, {}]>] but the same op of layer 0 (its block class's first) is sharded [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>]}}
    %t1 = bm.tanh %t0 {bm.layer = 1 : i64, bm.block_class = 0 : i64, bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>], bm.stage = 0 : i64} : tensor<4x16xf32>
    return %t1 : tensor<4x16xf32>
  }
}

// -----

module {
  bm.mesh @mesh = <["dp"=2, "tp"=2, "pp"=1]>
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    // expected-error @+1 {{'bm.all_reduce' op is a collective, which partitioning (phase 6) inserts; it cannot appear after annotation}}
    %r = bm.all_reduce %x over ["tp"] on @mesh : tensor<4x16xf32>
    return %r : tensor<4x16xf32>
  }
}
