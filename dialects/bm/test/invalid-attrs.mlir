// RUN: bmc-opt %s -split-input-file -verify-diagnostics

// The mesh and sharding attributes (BmAttrs.cpp), the bm.mesh op, and the
// discardable bm.* attributes the dialect checks on ops (BmDialect.cpp).

//===----------------------------------------------------------------------===//
// #bm.mesh and bm.mesh
//===----------------------------------------------------------------------===//

// expected-error @+1 {{mesh axis "tp" appears twice}}
bm.mesh @mesh = <["tp"=2, "dp"=2, "tp"=4]>

// -----

// expected-error @+1 {{mesh axis "dp" has size 0, expected >= 1}}
bm.mesh @mesh = <["dp"=0, "tp"=4]>

// -----

// expected-error @+1 {{mesh axis "tp" has size -2, expected >= 1}}
bm.mesh @mesh = <["dp"=2, "tp"=-2]>

// -----

// expected-error @+1 {{mesh axis names must not be empty}}
bm.mesh @mesh = <["dp"=2, ""=4]>

// -----

// The attribute on its own is checked too.
// expected-error @+1 {{mesh axis "x" appears twice}}
func.func @standalone() attributes {bm.m = #bm.mesh<["x"=2, "x"=2]>} {
  return
}

// -----

func.func @nested_mesh() {
  // expected-error @+1 {{'bm.mesh' op expects parent op 'builtin.module'}}
  bm.mesh @mesh = <["dp"=2]>
  return
}

// -----

bm.mesh @mesh = <["dp"=2]>
// expected-error @+2 {{redefinition of symbol named 'mesh'}}
// expected-note @-2 {{see existing symbol definition here}}
bm.mesh @mesh = <["tp"=2]>

//===----------------------------------------------------------------------===//
// #bm.sharding on its own
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{mesh axis "dp" is used more than once in a sharding}}
func.func @axis_twice() attributes {bm.s = #bm.sharding<@mesh, [{"dp"}, {"tp", "dp"}]>} {
  return
}

// -----

// expected-error @+1 {{mesh axis "tp" is used more than once in a sharding}}
func.func @partial_twice() attributes {bm.s = #bm.sharding<@mesh, [{"tp"}], partial={"tp"}>} {
  return
}

// -----

// expected-error @+1 {{mesh axis "dp" is used more than once in a sharding}}
func.func @partial_repeated() attributes {bm.s = #bm.sharding<@mesh, [], partial={"dp", "dp"}>} {
  return
}

//===----------------------------------------------------------------------===//
// bm.sharding on ops: one #bm.sharding per result, checked against the
// result type and the mesh
//===----------------------------------------------------------------------===//

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @not_an_array(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op 'bm.sharding' must be an array of #bm.sharding, got #bm.sharding<@mesh, [{"dp"}]>}}
  %0 = bm.relu %x {bm.sharding = #bm.sharding<@mesh, [{"dp"}]>} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @count(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.split' op has 1 result shardings for 2 results}}
  %0:2 = bm.split %x {axis = 0 : i64, sizes = array<i64: 4, 4>, bm.sharding = [#bm.sharding<@mesh, [{"dp"}]>]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @not_a_sharding(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op result sharding #0 is not a #bm.sharding: "dp"}}
  %0 = bm.relu %x {bm.sharding = ["dp"]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op result sharding #0 names unknown mesh @other}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@other, [{"dp"}]>]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op result #0: sharding has 2 dims for a tensor of rank 1}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {}]>]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op result #0: sharding names axis "pp" that mesh @mesh lacks}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@mesh, [{"pp"}]>]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @unknown_partial_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op result #0: sharding names axis "sp" that mesh @mesh lacks}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@mesh, [{}], partial={"sp"}>]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @divide(%x: tensor<8x6xf32>) {
  // expected-error @+1 {{'bm.relu' op result #0: dim 1 of size 6 does not divide evenly into 4 shards}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@mesh, [{"dp"}, {"tp"}]>]} : tensor<8x6xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @divide_compound(%x: tensor<4x6xf32>) {
  // Two axes on one dim split it into 2 x 4 = 8 shards.
  // expected-error @+1 {{'bm.relu' op result #0: dim 0 of size 4 does not divide evenly into 8 shards}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@mesh, [{"dp", "tp"}, {}]>]} : tensor<4x6xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @second_result(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.split' op result #1: dim 0 of size 2 does not divide evenly into 4 shards}}
  %0:2 = bm.split %x {axis = 0 : i64, sizes = array<i64: 6, 2>, bm.sharding = [#bm.sharding<@mesh, [{"dp"}]>, #bm.sharding<@mesh, [{"tp"}]>]} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func private @scalar() -> i32

func.func @not_a_tensor() {
  // expected-error @+1 {{'func.call' op result #0: a sharding needs a ranked tensor, got 'i32'}}
  %0 = func.call @scalar() {bm.sharding = [#bm.sharding<@mesh, []>]} : () -> i32
  return
}

// -----

// The sharding of a bm.mesh symbol's own op: the mesh must be a bm.mesh.
func.func private @mesh()

func.func @symbol_not_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op result sharding #0 names unknown mesh @mesh}}
  %0 = bm.relu %x {bm.sharding = [#bm.sharding<@mesh, [{}]>]} : tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Folding annotations
//===----------------------------------------------------------------------===//

// -----

func.func @layer(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op 'bm.layer' must be an integer, got "3"}}
  %0 = bm.relu %x {bm.layer = "3"} : tensor<8xf32>
  return
}

// -----

func.func @block_class(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op 'bm.block_class' must be an integer, got 1.000000e+00 : f32}}
  %0 = bm.relu %x {bm.block_class = 1.0 : f32} : tensor<8xf32>
  return
}

// -----

func.func @stage(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.relu' op 'bm.stage' must be an integer, got "first"}}
  %0 = bm.relu %x {bm.stage = "first"} : tensor<8xf32>
  return
}
