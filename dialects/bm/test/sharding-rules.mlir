// RUN: bmc-opt %s -bm-print-sharding-rules --mlir-print-op-on-diagnostic=false -verify-diagnostics -o /dev/null

// The Shardy-style sharding rule and forward FLOPs of every kind of op, as
// reported by -bm-print-sharding-rules. Factors are named i, j, k, ... in
// order of creation; "{}" is a dim tied to no factor (size 1, or not
// shardable), "{k, l}" a compound dim (major to minor). FLOPs count a
// multiply-add as 2.

bm.mesh @mesh = <["dp"=2, "tp"=4]>

func.func @contractions(%x: tensor<2x16x64xf32>, %w: tensor<64x256xf32>,
                        %p: tensor<4x1x8x16xf32>, %q: tensor<3x16x32xf32>,
                        %v: tensor<64xf32>, %a: tensor<32x64xf32>, %bt: tensor<128x64xf32>, %c: tensor<128xf32>,
                        %at: tensor<64x32xf32>,
                        %d: tensor<2x8x4x3xf32>, %e: tensor<2x8x16xf32>) {
  // Matmul: ([b, s, k], [k, n]) -> ([b, s, n]), k a reduction.
  // expected-remark @+1 {{rule ([i, j, k], [k, l]) -> ([i, j, l]) {i=2, j=16, k=64, l=256} reduction={k} flops 1048576.00}}
  %0 = bm.matmul %x, %w : tensor<2x16x64xf32>, tensor<64x256xf32>
  // Batched matmul, batch dims [4, 1] and [3] broadcast: the size-1 dim maps to no
  // factor, j=3 comes from the rhs.
  // expected-remark @+1 {{rule ([i, {}, k, l], [j, l, m]) -> ([i, j, k, m]) {i=4, j=3, k=8, l=16, m=32} reduction={l} flops 98304.00}}
  %1 = bm.matmul %p, %q : tensor<4x1x8x16xf32>, tensor<3x16x32xf32>
  // A 1-D lhs is a row vector; a 1-D rhs a column vector.
  // expected-remark @+1 {{rule ([i], [i, j]) -> ([j]) {i=64, j=256} reduction={i} flops 32768.00}}
  %2 = bm.matmul %v, %w : tensor<64xf32>, tensor<64x256xf32>
  // expected-remark @+1 {{rule ([i, j, k], [k]) -> ([i, j]) {i=2, j=16, k=64} reduction={k} flops 4096.00}}
  %3 = bm.matmul %x, %v : tensor<2x16x64xf32>, tensor<64xf32>
  // Gemm with trans_b: b is [n, k]; the bias follows n.
  // expected-remark @+1 {{rule ([i, j], [k, j], [k]) -> ([i, k]) {i=32, j=64, k=128} reduction={j} flops 524288.00}}
  %4 = bm.gemm %a, %bt, %c {trans_b = true} : tensor<32x64xf32>, tensor<128x64xf32>, tensor<128xf32>
  // Gemm with trans_a: a is [k, m].
  // expected-remark @+1 {{rule ([i, j], [i, k]) -> ([j, k]) {i=64, j=32, k=256} reduction={i} flops 1048576.00}}
  %5 = bm.gemm %at, %w {trans_a = true} : tensor<64x32xf32>, tensor<64x256xf32>
  // Einsum: s is in no output, so it is a reduction.
  // expected-remark @+1 {{rule ([i, j, k, l], [i, j, m]) -> ([k, i, l, m]) {i=2, j=8, k=4, l=3, m=16} reduction={j} flops 6144.00}}
  %6 = bm.einsum "gsec,gsm->egcm" %d, %e : tensor<2x8x4x3xf32>, tensor<2x8x16xf32>
  // expected-remark @+1 {{rule ([i, j, k], [k, l]) -> ([i, j, l]) {i=2, j=16, k=64, l=256} reduction={k} flops 1048576.00}}
  %7 = bm.einsum "bsk,kn->bsn" %x, %w : tensor<2x16x64xf32>, tensor<64x256xf32>
  return
}
func.func @conv(%img: tensor<2x3x32x32xf32>, %k: tensor<8x3x3x3xf32>, %kb: tensor<8xf32>, %g: tensor<2x8x32x32xf32>, %gk: tensor<16x2x3x3xf32>) {
  // Conv: input channels reduce, output spatial dims need their input halo.
  // FLOPs: 2 x 2*8*32*32 outputs x 3*3*3 window.
  // expected-remark @+1 {{rule ([i, k, {}, {}], [j, k, {}, {}], [j]) -> ([i, j, l, m]) {i=2, j=8, k=3, l=32, m=32} reduction={k} need_replication={l, m} flops 884736.00}}
  %0 = bm.conv %img, %k, %kb {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<2x3x32x32xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>
  // Grouped conv: the input channel dim is not tied to the reduction factor.
  // expected-remark @+1 {{rule ([i, {}, {}, {}], [j, k, {}, {}]) -> ([i, j, l, m]) {i=2, j=16, k=2, l=30, m=30} reduction={k} need_replication={l, m} flops 1036800.00}}
  %1 = bm.conv %g, %gk {dilations = array<i64: 1, 1>, group = 4 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<2x8x32x32xf32>, tensor<16x2x3x3xf32>
  // Pools: output windows need replication; FLOPs per input element.
  // expected-remark @+1 {{rule ([i, j, {}, {}]) -> ([i, j, k, l]) {i=2, j=8, k=16, l=16} need_replication={k, l} flops 16384.00}}
  %2 = bm.avg_pool %g {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<2x8x32x32xf32>
  // expected-remark @+1 {{rule ([i, j, {}, {}]) -> ([i, j, k, l]) {i=2, j=8, k=16, l=16} need_replication={k, l} flops 16384.00}}
  %3 = bm.max_pool %g {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : tensor<2x8x32x32xf32>
  // Global pooling reduces the spatial dims.
  // expected-remark @+1 {{rule ([i, j, k, l]) -> ([i, j, {}, {}]) {i=2, j=8, k=32, l=32} reduction={k, l} flops 16384.00}}
  %4 = bm.global_avg_pool %g : tensor<2x8x32x32xf32>
  return
}
func.func @elementwise(%a: tensor<4x1x8xf32>, %b: tensor<3x1xf32>, %c: tensor<3x8xi1>, %x: tensor<2x16x64xf32>) {
  // Broadcasting [4, 1, 8] + [3, 1]: broadcast dims map to no factor.
  // expected-remark @+1 {{rule ([i, {}, k], [j, {}]) -> ([i, j, k]) {i=4, j=3, k=8} flops 96.00}}
  %0 = bm.add %a, %b : tensor<4x1x8xf32>, tensor<3x1xf32>
  // expected-remark @+1 {{rule ([j, k], [i, {}, k], [j, {}]) -> ([i, j, k]) {i=4, j=3, k=8} flops 96.00}}
  %1 = bm.where %c, %a, %b : tensor<3x8xi1>, tensor<4x1x8xf32>, tensor<3x1xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} flops 16384.00}}
  %2 = bm.gelu %x : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} flops 0.00}}
  %3 = bm.cast %x : tensor<2x16x64xf32> -> tensor<2x16x64xbf16>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} flops 8192.00}}
  %4 = bm.exp %x : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, {}, k], [j, {}]) -> ([i, j, k]) {i=4, j=3, k=8} flops 96.00}}
  %5 = bm.greater %a, %b : tensor<4x1x8xf32>, tensor<3x1xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=3, j=8} flops 24.00}}
  %6 = bm.not %c : tensor<3x8xi1>
  return
}
func.func @norms(%x: tensor<2x16x64xf32>, %s: tensor<64xf32>, %s2: tensor<16x64xf32>, %img: tensor<4x8x5x5xf32>, %p: tensor<8xf32>) {
  // Layer norm: the normalised dims need replication (the statistics span
  // them); scale and bias follow them.
  // expected-remark @+1 {{rule ([i, j, k], [k], [k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={k} flops 16384.00}}
  %0 = bm.layer_norm %x, %s, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : tensor<2x16x64xf32>, tensor<64xf32>, tensor<64xf32>
  // Normalising from axis 1.
  // expected-remark @+1 {{rule ([i, j, k], [j, k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={j, k} flops 16384.00}}
  %1 = bm.layer_norm %x, %s2 {axis = 1 : i64, epsilon = 1.0e-5 : f32} : tensor<2x16x64xf32>, tensor<16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k], [k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={k} flops 12288.00}}
  %2 = bm.rms_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-6 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
  // Batch norm (inference statistics): all parallel, parameters follow C.
  // expected-remark @+1 {{rule ([i, j, k, l], [j], [j], [j], [j]) -> ([i, j, k, l]) {i=4, j=8, k=5, l=5} flops 3200.00}}
  %3 = bm.batch_norm %img, %p, %p, %p, %p {epsilon = 1.0e-5 : f32} : tensor<4x8x5x5xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  // Softmax needs its whole axis.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={k} flops 10240.00}}
  %4 = bm.softmax %x {axis = 2 : i64} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={j} flops 10240.00}}
  %5 = bm.log_softmax %x {axis = 1 : i64} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={j} flops 2048.00}}
  %6 = bm.cumsum %x {axis = 1 : i64} : tensor<2x16x64xf32>
  // Trilu masks by global row and column: the last two dims need replication.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} need_replication={j, k} flops 0.00}}
  %7 = bm.trilu %x : tensor<2x16x64xf32>
  return
}
func.func @reductions(%x: tensor<2x16x64xf32>, %ids: tensor<2x16xi64>) {
  // Reductions: reduced dims are reduction factors; kept dims are size 1.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, {}]) {i=2, j=16, k=64} reduction={k} flops 2048.00}}
  %0 = bm.reduce_sum %x {axes = array<i64: 2>} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([j]) {i=2, j=16, k=64} reduction={i, k} flops 2048.00}}
  %1 = bm.reduce_mean %x {axes = array<i64: 0, 2>, keep_dims = false} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, {}, k]) {i=2, j=16, k=64} reduction={j} flops 2048.00}}
  %2 = bm.reduce_max %x {axes = array<i64: 1>} : tensor<2x16x64xf32>
  // Top-k needs its whole axis; the k results map to no factor.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, {}], [i, j, {}]) {i=2, j=16, k=64} need_replication={k} flops 4096.00}}
  %3:2 = bm.top_k %x {axis = 2 : i64, k = 4 : i64} : tensor<2x16x64xf32>
  // One-hot: the depth dim is a parallel factor of its own.
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j, k]) {i=2, j=16, k=10} flops 0.00}}
  %4 = bm.one_hot %ids {axis = 2 : i64, depth = 10 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x16xi64> -> tensor<2x16x10xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([k, i, j]) {i=2, j=16, k=10} flops 0.00}}
  %5 = bm.one_hot %ids {axis = 0 : i64, depth = 10 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x16xi64> -> tensor<10x2x16xf32>
  return
}
func.func @movement(%x: tensor<2x16x4096xf32>, %h: tensor<2x16x32x128xf32>, %e: tensor<50000x64xf32>, %ids: tensor<2x16xi64>,
                    %u: tensor<2x1x64xf32>, %v: tensor<64xf32>, %y: tensor<2x16x64xf32>, %qkv: tensor<2x16x192xf32>,
                    %r: tensor<6x4x64xf32>, %g: tensor<256x1024x8xf32>) {
  // Reshape splitting the hidden dim into heads: [b, s, {heads, hd}].
  // expected-remark @+1 {{rule ([i, j, {k, l}]) -> ([i, j, k, l]) {i=2, j=16, k=32, l=128} flops 0.00}}
  %0 = bm.reshape %x : tensor<2x16x4096xf32> -> tensor<2x16x32x128xf32>
  // Reshape merging heads back.
  // expected-remark @+1 {{rule ([i, j, k, l]) -> ([i, j, {k, l}]) {i=2, j=16, k=32, l=128} flops 0.00}}
  %1 = bm.reshape %h : tensor<2x16x32x128xf32> -> tensor<2x16x4096xf32>
  // Reshape merging batch and sequence.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([{i, j}, k]) {i=2, j=16, k=4096} flops 0.00}}
  %2 = bm.reshape %x : tensor<2x16x4096xf32> -> tensor<32x4096xf32>
  // [2, 16] -> [4, 8] refines into factors 2, 2, 8: dim 1 of the input is
  // {2, 8}, dim 0 of the result {2, 2}.
  // expected-remark @+1 {{rule ([i, {j, k}, l]) -> ([{i, j}, k, l]) {i=2, j=2, k=8, l=64} flops 0.00}}
  %3 = bm.reshape %y : tensor<2x16x64xf32> -> tensor<4x8x64xf32>
  // A true re-layout ([6, 4] -> [4, 6]) ties no factor.
  // expected-remark @+1 {{rule ([{}, {}, i]) -> ([{}, {}, i]) {i=64} flops 0.00}}
  %relayout = bm.reshape %r : tensor<6x4x64xf32> -> tensor<4x6x64xf32>
  // MoE token groups: [256, 1024] -> [128, 2048] as {128, 2}, {1024} ->
  // {128}, {2, 1024}.
  // expected-remark @+1 {{rule ([{i, j}, k, l]) -> ([i, {j, k}, l]) {i=128, j=2, k=1024, l=8} flops 0.00}}
  %groups = bm.reshape %g : tensor<256x1024x8xf32> -> tensor<128x2048x8xf32>
  // expected-remark @+1 {{rule ([i, {}, j]) -> ([i, j, {}]) {i=2, j=64} flops 0.00}}
  %4 = bm.reshape %u : tensor<2x1x64xf32> -> tensor<2x64x1xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, {j, k}]) {i=2, j=16, k=64} flops 0.00}}
  %5 = bm.flatten %y {axis = 1 : i64} : tensor<2x16x64xf32>
  // Split into 3 equal pieces: the split dim is {pieces, piece}; pieces
  // needs replication, piece is shared by all results.
  // expected-remark @+1 {{rule ([i, j, {k, l}]) -> ([i, j, l], [i, j, l], [i, j, l]) {i=2, j=16, k=3, l=64} need_replication={k} flops 0.00}}
  %6:3 = bm.split %qkv {axis = 2 : i64, sizes = array<i64: 64, 64, 64>} : tensor<2x16x192xf32>
  // Unequal pieces: the split dim is tied to no factor.
  // expected-remark @+1 {{rule ([i, j, {}]) -> ([i, j, {}], [i, j, {}]) {i=2, j=16} flops 0.00}}
  %7:2 = bm.split %qkv {axis = 2 : i64, sizes = array<i64: 128, 64>} : tensor<2x16x192xf32>
  // Gather (embedding lookup): the indexed axis is a reduction (vocab-parallel
  // embedding: each shard looks up the rows it holds, the results are summed).
  // expected-remark @+1 {{rule ([i, l], [j, k]) -> ([j, k, l]) {i=50000, j=2, k=16, l=64} reduction={i} flops 0.00}}
  %8 = bm.gather %e, %ids {axis = 0 : i64} : tensor<50000x64xf32>, tensor<2x16xi64>
  // expected-remark @+1 {{rule ([i, j, k, l]) -> ([i, k, j, l]) {i=2, j=16, k=32, l=128} flops 0.00}}
  %9 = bm.transpose %h {permutation = array<i64: 0, 2, 1, 3>} : tensor<2x16x32x128xf32>
  // Concat: the concatenated dim is tied to no factor.
  // expected-remark @+1 {{rule ([i, {}, j], [i, {}, j]) -> ([i, {}, j]) {i=2, j=64} flops 0.00}}
  %10 = bm.concat %y, %u {axis = 1 : i64} : tensor<2x16x64xf32>, tensor<2x1x64xf32>
  // Slice: only dims taken whole stay parallel.
  // expected-remark @+1 {{rule ([i, j, {}]) -> ([i, j, {}]) {i=2, j=16} flops 0.00}}
  %11 = bm.slice %y {limits = array<i64: 2, 16, 32>, starts = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>} : tensor<2x16x64xf32>
  // Expand: right-aligned; the broadcast dims are fresh factors.
  // expected-remark @+1 {{rule ([j, {}, l]) -> ([i, j, k, l]) {i=3, j=2, k=16, l=64} flops 0.00}}
  %12 = bm.expand %u : tensor<2x1x64xf32> -> tensor<3x2x16x64xf32>
  // expected-remark @+1 {{rule ([i, {}, j]) -> ([i, j]) {i=2, j=64} flops 0.00}}
  %13 = bm.squeeze %u {axes = array<i64: 1>} : tensor<2x1x64xf32>
  // expected-remark @+1 {{rule ([i]) -> ([{}, i, {}]) {i=64} flops 0.00}}
  %14 = bm.unsqueeze %v {axes = array<i64: 0, 2>} : tensor<64xf32>
  // expected-remark @+1 {{rule () -> ([i, j]) {i=4, j=8} flops 0.00}}
  %15 = bm.constant dense<1.0> : tensor<4x8xf32>
  // expected-remark @+1 {{rule () -> ([i]) {i=16} flops 0.00}}
  %16 = bm.iota {delta = 1.0 : f64, start = 0.0 : f64} : tensor<16xi64>
  return
}
func.func @edge_cases(%v: tensor<64xf32>, %r: tensor<2x64x4xf32>, %sq: tensor<6x6xf32>,
                      %x: tensor<2x16x64xf32>, %one: tensor<1x1xf32>, %t: tensor<4x100x8xf16>,
                      %ix: tensor<3xi32>, %s: tensor<i64>, %z: tensor<f32>, %m: tensor<8x16xf32>) {
  // A 1-D lhs against a batched rhs: the rhs batch dim reaches the result.
  // expected-remark @+1 {{rule ([i], [j, i, k]) -> ([j, k]) {i=64, j=2, k=4} reduction={i} flops 1024.00}}
  %0 = bm.matmul %v, %r : tensor<64xf32>, tensor<2x64x4xf32>
  // expected-remark @+1 {{rule ([i], [i]) -> ([]) {i=64} reduction={i} flops 128.00}}
  %1 = bm.matmul %v, %v : tensor<64xf32>, tensor<64xf32>
  // A repeated letter (diagonal) is one factor.
  // expected-remark @+1 {{rule ([i, i]) -> ([i]) {i=6} flops 12.00}}
  %2 = bm.einsum "ii->i" %sq : tensor<6x6xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([]) {i=6, j=6} reduction={i, j} flops 72.00}}
  %3 = bm.einsum "ij->" %sq : tensor<6x6xf32>
  // A single piece is the whole dim.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([i, j, k]) {i=2, j=16, k=64} flops 0.00}}
  %4 = bm.split %x {axis = 1 : i64, sizes = array<i64: 16>} : tensor<2x16x64xf32>
  // Pieces of size 1: only the pieces factor.
  // expected-remark @+1 {{rule ([i, j, k]) -> ([{}, j, k], [{}, j, k]) {i=2, j=16, k=64} need_replication={i} flops 0.00}}
  %5:2 = bm.split %x {axis = 0 : i64, sizes = array<i64: 1, 1>} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([{}, {}]) -> ([]) {} flops 0.00}}
  %6 = bm.squeeze %one {axes = array<i64: 0, 1>} : tensor<1x1xf32>
  // expected-remark @+1 {{rule ([]) -> ([{}, {}]) {} flops 0.00}}
  %7 = bm.reshape %z : tensor<f32> -> tensor<1x1xf32>
  // expected-remark @+1 {{rule ([i, j, l], [k]) -> ([i, k, l]) {i=4, j=100, k=3, l=8} reduction={j} flops 0.00}}
  %8 = bm.gather %t, %ix {axis = 1 : i64} : tensor<4x100x8xf16>, tensor<3xi32>
  // A rank-0 index drops the axis.
  // expected-remark @+1 {{rule ([i, j, k], []) -> ([i, k]) {i=4, j=100, k=8} reduction={j} flops 0.00}}
  %9 = bm.gather %t, %s {axis = 1 : i64} : tensor<4x100x8xf16>, tensor<i64>
  // expected-remark @+1 {{rule ([k, i, j]) -> ([{}, i, j], [{}, i, j]) {i=16, j=64, k=2} need_replication={k} flops 4096.00}}
  %10:2 = bm.top_k %x {axis = 0 : i64, k = 1 : i64, largest = false} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([]) {i=2, j=16, k=64} reduction={i, j, k} flops 2048.00}}
  %11 = bm.reduce_sum %x {axes = array<i64: 0, 1, 2>, keep_dims = false} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([], []) -> ([]) {} flops 1.00}}
  %12 = bm.add %z, %z : tensor<f32>, tensor<f32>
  // expected-remark @+1 {{rule ([i, {}, j]) -> ([i, {}, j]) {i=2, j=64} flops 0.00}}
  %13 = bm.slice %x {limits = array<i64: 2, 16, 64>, starts = array<i64: 0, 0, 0>, strides = array<i64: 1, 2, 1>} : tensor<2x16x64xf32>
  // expected-remark @+1 {{rule ([i, j, k]) -> ([{}, {i, j, k}]) {i=2, j=16, k=64} flops 0.00}}
  %14 = bm.flatten %x {axis = 0 : i64} : tensor<2x16x64xf32>
  return
}

// The remaining elementwise ops share the broadcast rule; FLOPs per result
// element are 1, or 4 for transcendentals (8 for gelu).
func.func @all_elementwise(%x: tensor<4x8xf32>, %y: tensor<8xf32>, %i: tensor<4x8xi32>, %b: tensor<4x8xi1>) {
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %0 = bm.abs %i : tensor<4x8xi32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %1 = bm.cos %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %2 = bm.erf %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %3 = bm.log %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %4 = bm.neg %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %5 = bm.reciprocal %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %6 = bm.relu %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %7 = bm.sigmoid %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %8 = bm.sin %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %9 = bm.sqrt %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %10 = bm.tanh %x : tensor<4x8xf32>
  // expected-remark @+1 {{rule ([i, j], [i, j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %11 = bm.and %b, %b : tensor<4x8xi1>, tensor<4x8xi1>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %12 = bm.div %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %13 = bm.equal %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %14 = bm.less %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %15 = bm.max %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %16 = bm.min %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %17 = bm.mul %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [i, j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %18 = bm.or %b, %b : tensor<4x8xi1>, tensor<4x8xi1>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 128.00}}
  %19 = bm.pow %x, %y : tensor<4x8xf32>, tensor<8xf32>
  // expected-remark @+1 {{rule ([i, j], [j]) -> ([i, j]) {i=4, j=8} flops 32.00}}
  %20 = bm.sub %x, %y : tensor<4x8xf32>, tensor<8xf32>
  return
}

// An empty tensor ties no factor in a reshape.
func.func @empty(%x: tensor<0x4xf32>) {
  // expected-remark @+1 {{rule ([{}, {}]) -> ([{}, {}, {}]) {} flops 0.00}}
  %0 = bm.reshape %x : tensor<0x4xf32> -> tensor<4x0x7xf32>
  return
}

// Collectives have no sharding rule: no remark.
func.func @collectives(%x: tensor<8x16xf32>) {
  %0 = bm.all_reduce %x over ["tp"] on @mesh : tensor<8x16xf32>
  return
}

// Element-wise indexing: a dim the indices cover whole is parallel
// everywhere; the data's indexed axis needs the whole axis; the gather's
// own indices are parallel along it, the scatter's updates are not; a dim
// the indices cover in part needs replication on both sides.
func.func @element_indexing(%d: tensor<4x6xf32>, %i: tensor<4x3xi64>,
                            %j: tensor<2x6xi64>, %u: tensor<2x6xf32>) {
  // expected-remark @+1 {{rule ([i, j], [i, k]) -> ([i, k]) {i=4, j=6, k=3} need_replication={j} flops 0.00}}
  %0 = bm.gather_elements %d, %i {axis = 1 : i64} : tensor<4x6xf32>, tensor<4x3xi64>
  // expected-remark @+1 {{rule ([i, k], [j, l]) -> ([j, l]) {i=4, j=2, k=6, l=6} need_replication={i, j, k} flops 0.00}}
  %1 = bm.gather_elements %d, %j {axis = 1 : i64} : tensor<4x6xf32>, tensor<2x6xi64>
  // expected-remark @+1 {{rule ([i, k], [j, k], [j, k]) -> ([i, k]) {i=4, j=2, k=6} need_replication={i, j} flops 12.00}}
  %2 = bm.scatter_elements %d, %j, %u {axis = 0 : i64, reduction = "add"} : tensor<4x6xf32>, tensor<2x6xi64>, tensor<2x6xf32>
  // expected-remark @+1 {{rule ([i, k], [j, k], [j, k]) -> ([i, k]) {i=4, j=2, k=6} need_replication={i, j} flops 0.00}}
  %3 = bm.scatter_elements %d, %j, %u {axis = 0 : i64} : tensor<4x6xf32>, tensor<2x6xi64>, tensor<2x6xf32>
  return
}

// -----

// Fused attention: batch and heads parallel; keys and both head dims need
// replication. The queries split where each knows its place among the
// keys: without a causal mask, or with positions (context parallelism);
// attention_grad's dkt and dv then sum over them (a reduction). FLOPs 2 s
// t (d + e) per (batch, head), the causal triangle's pairs only (35 - 10
// of 5 x 7).
func.func @attention(%q: tensor<2x3x5x4xf32>, %kt: tensor<2x3x4x7xf32>,
                     %v: tensor<2x3x7x6xf32>, %o: tensor<2x3x5x6xf32>,
                     %pos: tensor<5xi64>) {
  // expected-remark @+1 {{rule ([i, j, k, l], [i, j, l, m], [i, j, m, n]) -> ([i, j, k, n]) {i=2, j=3, k=5, l=4, m=7, n=6} need_replication={l, m, n} flops 4200.00}}
  %0 = bm.attention %q, %kt, %v {scale = 0.5 : f32} : tensor<2x3x5x4xf32>, tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>
  // expected-remark @+1 {{need_replication={k, l, m, n} flops 3000.00}}
  %1 = bm.attention %q, %kt, %v {scale = 0.5 : f32, causal = true} : tensor<2x3x5x4xf32>, tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>
  // expected-remark @+1 {{rule ([i, j, k, l], [i, j, l, m], [i, j, m, n], [k]) -> ([i, j, k, n]) {i=2, j=3, k=5, l=4, m=7, n=6} need_replication={l, m, n} flops 3000.00}}
  %3 = bm.attention %q, %kt, %v positions %pos {scale = 0.5 : f32, causal = true} : tensor<2x3x5x4xf32>, tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>, tensor<5xi64>
  // expected-remark @+1 {{rule ([i, j, k, l], [i, j, l, m], [i, j, m, n], [i, j, k, n], [i, j, k, n]) -> ([i, j, k, l], [i, j, l, m], [i, j, m, n]) {i=2, j=3, k=5, l=4, m=7, n=6} reduction={k} need_replication={l, m, n}}}
  %2:3 = bm.attention_grad %q, %kt, %v, %o, %o {scale = 0.5 : f32} : tensor<2x3x5x4xf32>, tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>, tensor<2x3x5x6xf32>
  // expected-remark @+1 {{rule ([i, j, k, l], [i, j, l, m], [i, j, m, n], [i, j, k, n], [i, j, k, n], [k]) -> ([i, j, k, l], [i, j, l, m], [i, j, m, n]) {i=2, j=3, k=5, l=4, m=7, n=6} reduction={k} need_replication={l, m, n}}}
  %4:3 = bm.attention_grad %q, %kt, %v, %o, %o positions %pos {scale = 0.5 : f32, causal = true} : tensor<2x3x5x4xf32>, tensor<2x3x4x7xf32>, tensor<2x3x7x6xf32>, tensor<2x3x5x6xf32>, tensor<5xi64>
  return
}
