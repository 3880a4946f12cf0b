// RUN: bmc-opt %s -split-input-file -verify-diagnostics

// One case per verifier message of the collectives (CollectiveOps.cpp): the
// mesh and its axes resolve, shapes follow from the group size.

bm.mesh @mesh = <["dp"=2, "tp"=4, "pp"=3]>

func.func @unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_reduce' op names unknown mesh @nomesh}}
  %0 = bm.all_reduce %x over ["tp"] on @nomesh : tensor<8xf32>
  return
}

// -----

// A symbol that is not a bm.mesh is no mesh.
func.func private @not_a_mesh()

func.func @symbol_not_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_gather' op names unknown mesh @not_a_mesh}}
  %0 = bm.all_gather %x over ["tp"] on @not_a_mesh {dim = 0 : i64} : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @no_axes(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_reduce' op needs at least one mesh axis}}
  %0 = bm.all_reduce %x over [] on @mesh : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_reduce' op axis "pp" is not an axis of the mesh #bm.mesh<["dp"=2, "tp"=4]>}}
  %0 = bm.all_reduce %x over ["dp", "pp"] on @mesh : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @repeated_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.reduce_scatter' op axis "tp" is listed twice}}
  %0 = bm.reduce_scatter %x over ["tp", "tp"] on @mesh {dim = 0 : i64} : tensor<8xf32> -> tensor<1xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_reduce_kind(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_reduce' op reduction "prod" is not one of sum, max, min, mean}}
  %0 = bm.all_reduce %x over ["tp"] on @mesh {reduction = "prod"} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_reduce_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_reduce' op requires the same type for all operands and results}}
  %0 = "bm.all_reduce"(%x) {axes = ["tp"], mesh = @mesh} : (tensor<8xf32>) -> tensor<2xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_gather_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_gather' op dim 1 is out of range for rank 1}}
  %0 = bm.all_gather %x over ["tp"] on @mesh {dim = 1 : i64} : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_gather_negative_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_gather' op dim -1 is out of range for rank 1}}
  %0 = bm.all_gather %x over ["tp"] on @mesh {dim = -1 : i64} : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_gather_shape(%x: tensor<8x3xf32>) {
  // Over dp and tp the group has 8 devices.
  // expected-error @+1 {{'bm.all_gather' op gathering dim 1 of 'tensor<8x3xf32>' over 8 devices gives 'tensor<8x24xf32>', not 'tensor<8x12xf32>'}}
  %0 = bm.all_gather %x over ["dp", "tp"] on @mesh {dim = 1 : i64} : tensor<8x3xf32> -> tensor<8x12xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_gather_element_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.all_gather' op gathering dim 0 of 'tensor<8xf32>' over 4 devices gives 'tensor<32xf32>', not 'tensor<32xf16>'}}
  %0 = bm.all_gather %x over ["tp"] on @mesh {dim = 0 : i64} : tensor<8xf32> -> tensor<32xf16>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @reduce_scatter_kind(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.reduce_scatter' op reduction "avg" is not one of sum, max, min, mean}}
  %0 = bm.reduce_scatter %x over ["tp"] on @mesh {dim = 0 : i64, reduction = "avg"} : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @reduce_scatter_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.reduce_scatter' op dim 1 is out of range for rank 1}}
  %0 = bm.reduce_scatter %x over ["tp"] on @mesh {dim = 1 : i64} : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @reduce_scatter_divide(%x: tensor<6xf32>) {
  // expected-error @+1 {{'bm.reduce_scatter' op dim 0 of size 6 does not divide evenly over 4 devices}}
  %0 = bm.reduce_scatter %x over ["tp"] on @mesh {dim = 0 : i64} : tensor<6xf32> -> tensor<1xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @reduce_scatter_shape(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{'bm.reduce_scatter' op scattering dim 0 of 'tensor<8x8xf32>' over 8 devices gives 'tensor<1x8xf32>', not 'tensor<2x8xf32>'}}
  %0 = bm.reduce_scatter %x over ["tp", "dp"] on @mesh {dim = 0 : i64} : tensor<8x8xf32> -> tensor<2x8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_to_all_dims(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{'bm.all_to_all' op split_dim 2 and concat_dim 0 must be in [0, 2)}}
  %0 = bm.all_to_all %x over ["tp"] on @mesh {concat_dim = 0 : i64, split_dim = 2 : i64} : tensor<8x8xf32> -> tensor<8x8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_to_all_negative_dim(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{'bm.all_to_all' op split_dim 1 and concat_dim -1 must be in [0, 2)}}
  %0 = bm.all_to_all %x over ["tp"] on @mesh {concat_dim = -1 : i64, split_dim = 1 : i64} : tensor<8x8xf32> -> tensor<8x8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_to_all_divide(%x: tensor<8x6xf32>) {
  // expected-error @+1 {{'bm.all_to_all' op split dim 1 of size 6 does not divide evenly over 4 devices}}
  %0 = bm.all_to_all %x over ["tp"] on @mesh {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<8x6xf32> -> tensor<32x1xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @all_to_all_shape(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{'bm.all_to_all' op all_to_all of 'tensor<8x8xf32>' over 4 devices gives 'tensor<32x2xf32>', not 'tensor<2x32xf32>'}}
  %0 = bm.all_to_all %x over ["tp"] on @mesh {concat_dim = 0 : i64, split_dim = 1 : i64} : tensor<8x8xf32> -> tensor<2x32xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @permute_zero_offset(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.collective_permute' op offset 0 along axis "tp" of size 4 must be non-zero and within (-4, 4)}}
  %0 = bm.collective_permute %x over "tp" on @mesh {offset = 0 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @permute_offset(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.collective_permute' op offset -4 along axis "tp" of size 4 must be non-zero and within (-4, 4)}}
  %0 = bm.collective_permute %x over "tp" on @mesh {offset = -4 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @permute_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.collective_permute' op axis "pp" is not an axis of the mesh #bm.mesh<["dp"=2, "tp"=4]>}}
  %0 = bm.collective_permute %x over "pp" on @mesh {offset = 1 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @permute_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.collective_permute' op names unknown mesh @other}}
  %0 = bm.collective_permute %x over "tp" on @other {offset = 1 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "pp"=4]>

func.func @send_offset(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.send' op offset 4 along axis "pp" of size 4 must be non-zero and within (-4, 4)}}
  bm.send %x over "pp" on @mesh {offset = 4 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "pp"=4]>

func.func @send_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.send' op axis "tp" is not an axis of the mesh #bm.mesh<["dp"=2, "pp"=4]>}}
  bm.send %x over "tp" on @mesh {offset = 1 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "pp"=1]>

func.func @send_single_device(%x: tensor<8xf32>) {
  // An axis of size 1 has no other device to send to.
  // expected-error @+1 {{'bm.send' op offset 1 along axis "pp" of size 1 must be non-zero and within (-1, 1)}}
  bm.send %x over "pp" on @mesh {offset = 1 : i64} : tensor<8xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "pp"=4]>

func.func @recv_offset() -> tensor<8xf32> {
  // expected-error @+1 {{'bm.recv' op offset 0 along axis "pp" of size 4 must be non-zero and within (-4, 4)}}
  %0 = bm.recv over "pp" on @mesh {offset = 0 : i64} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

bm.mesh @mesh = <["dp"=2, "pp"=4]>

func.func @recv_mesh() -> tensor<8xf32> {
  // expected-error @+1 {{'bm.recv' op names unknown mesh @pipeline}}
  %0 = bm.recv over "pp" on @pipeline {offset = -1 : i64} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @collective_dynamic(%x: tensor<?xf32>) {
  // expected-error @+1 {{'bm.all_reduce' op operand #0 must be statically shaped tensor of integer or floating-point values, but got 'tensor<?xf32>'}}
  %0 = bm.all_reduce %x over ["tp"] on @mesh : tensor<?xf32>
  return
}

// -----

// The vocabulary-parallel loss: logits [N, C] against labels [N]; one
// device's statistics are [3, N], every device's [3 x group, N].

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @stats_rows(%l: tensor<4x5xf32>, %y: tensor<3xi64>) {
  // expected-error @+1 {{'bm.cross_entropy_stats' op needs logits [N, C] and labels [N], got 'tensor<4x5xf32>' and 'tensor<3xi64>'}}
  %0 = bm.cross_entropy_stats %l, %y over ["tp"] on @mesh : tensor<4x5xf32>, tensor<3xi64> -> tensor<3x4xf32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @stats_shape(%l: tensor<4x5xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'bm.cross_entropy_stats' op needs statistics f32 [1 x 3, 4], got 'tensor<12x4xf32>'}}
  %0 = bm.cross_entropy_stats %l, %y over ["tp"] on @mesh : tensor<4x5xf32>, tensor<4xi64> -> tensor<12x4xf32>
  return
}

// -----

func.func @from_stats_not_triples(%s: tensor<4x4xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'bm.cross_entropy_from_stats' op needs statistics [k x 3, N] and labels [N], got 'tensor<4x4xf32>' and 'tensor<4xi64>'}}
  %0 = bm.cross_entropy_from_stats %s, %y : tensor<4x4xf32>, tensor<4xi64> -> tensor<f32>
  return
}

// -----

func.func @from_stats_rows(%s: tensor<6x4xf32>, %y: tensor<5xi64>) {
  // expected-error @+1 {{'bm.cross_entropy_from_stats' op needs statistics f32 [2 x 3, 5], got 'tensor<6x4xf32>'}}
  %0 = bm.cross_entropy_from_stats %s, %y : tensor<6x4xf32>, tensor<5xi64> -> tensor<f32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @grad_from_stats_group(%l: tensor<4x5xf32>, %y: tensor<4xi64>, %s: tensor<6x4xf32>, %d: tensor<f32>) {
  // expected-error @+1 {{'bm.cross_entropy_grad_from_stats' op needs statistics f32 [4 x 3, 4], got 'tensor<6x4xf32>'}}
  %0 = bm.cross_entropy_grad_from_stats %l, %y, %s, %d over ["tp"] on @mesh : tensor<4x5xf32>, tensor<4xi64>, tensor<6x4xf32>, tensor<f32>
  return
}

// -----

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @grad_from_stats_labels(%l: tensor<4x5xf32>, %y: tensor<2xi64>, %s: tensor<12x4xf32>, %d: tensor<f32>) {
  // expected-error @+1 {{'bm.cross_entropy_grad_from_stats' op needs logits [N, C] and labels [N], got 'tensor<4x5xf32>' and 'tensor<2xi64>'}}
  %0 = bm.cross_entropy_grad_from_stats %l, %y, %s, %d over ["tp"] on @mesh : tensor<4x5xf32>, tensor<2xi64>, tensor<12x4xf32>, tensor<f32>
  return
}
