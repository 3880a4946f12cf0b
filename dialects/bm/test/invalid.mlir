// RUN: bmc-opt %s -split-input-file -verify-diagnostics

// One case per verifier and type-inference message of the compute ops
// (BmOps.cpp, ShapeInference.cpp) and per ODS constraint worth pinning.

//===----------------------------------------------------------------------===//
// Types accepted by every op
//===----------------------------------------------------------------------===//

func.func @dynamic_dim(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<?x8xf32>'}}
  %0 = bm.exp %x : tensor<?x8xf32>
  return
}

// -----

func.func @dynamic_reshape(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{must be statically shaped tensor of integer or floating-point values, but got 'tensor<?x8xf32>'}}
  %0 = bm.reshape %x : tensor<?x8xf32> -> tensor<8x?xf32>
  return
}

// -----

func.func @index_elements(%x: tensor<4xindex>) {
  // expected-error @+1 {{must be statically shaped tensor of integer or floating-point values, but got 'tensor<4xindex>'}}
  %0 = bm.abs %x : tensor<4xindex>
  return
}

// -----

func.func @integer_exp(%x: tensor<4xi32>) {
  // expected-error @+1 {{must be statically shaped tensor of floating-point values, but got 'tensor<4xi32>'}}
  %0 = bm.exp %x : tensor<4xi32>
  return
}

// -----

func.func @result_type_mismatch(%x: tensor<4x1xf32>, %y: tensor<3xf32>) {
  // expected-error @+2 {{'bm.add' op inferred type(s) 'tensor<4x3xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error @+1 {{'bm.add' op failed to infer returned types}}
  %0 = "bm.add"(%x, %y) : (tensor<4x1xf32>, tensor<3xf32>) -> tensor<4x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// -----

func.func @broadcast_mismatch(%x: tensor<4x3xf32>, %y: tensor<2x4x4xf32>) {
  // expected-error @+1 {{shapes 'tensor<4x3xf32>', 'tensor<2x4x4xf32>' do not broadcast: dim 2 is 3 and 4}}
  %0 = bm.add %x, %y : tensor<4x3xf32>, tensor<2x4x4xf32>
  return
}

// -----

func.func @binary_element_types(%x: tensor<4xf32>, %y: tensor<4xf16>) {
  // expected-error @+1 {{operand element types differ: 'tensor<4xf32>' and 'tensor<4xf16>'}}
  %0 = bm.mul %x, %y : tensor<4xf32>, tensor<4xf16>
  return
}

// -----

func.func @logical_not_i1(%x: tensor<4xi8>) {
  // expected-error @+1 {{logical ops need i1 operands, got 'i8'}}
  %0 = bm.and %x, %x : tensor<4xi8>, tensor<4xi8>
  return
}

// -----

func.func @not_not_i1(%x: tensor<4xi8>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xi8>'}}
  %0 = bm.not %x : tensor<4xi8>
  return
}

// -----

func.func @where_condition_not_i1(%c: tensor<4xf32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = bm.where %c, %x, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @where_branch_types(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf16>) {
  // expected-error @+1 {{where branches differ in element type: 'tensor<4xf32>' and 'tensor<4xf16>'}}
  %0 = bm.where %c, %x, %y : tensor<4xi1>, tensor<4xf32>, tensor<4xf16>
  return
}

// -----

func.func @where_broadcast(%c: tensor<5xi1>, %x: tensor<4xf32>) {
  // expected-error @+1 {{do not broadcast: dim 0 is 5 and 4}}
  %0 = bm.where %c, %x, %x : tensor<5xi1>, tensor<4xf32>, tensor<4xf32>
  return
}

// -----

func.func @cast_shape(%x: tensor<4xf32>) {
  // expected-error @+1 {{'bm.cast' op requires the same shape for all operands and results}}
  %0 = bm.cast %x : tensor<4xf32> -> tensor<2x2xf16>
  return
}

// -----

func.func @unary_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'bm.relu' op requires the same type for all operands and results}}
  %0 = "bm.relu"(%x) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_element_types(%x: tensor<2x3xf32>, %y: tensor<3x4xbf16>) {
  // expected-error @+1 {{matmul operand element types differ: 'tensor<2x3xf32>' and 'tensor<3x4xbf16>'}}
  %0 = bm.matmul %x, %y : tensor<2x3xf32>, tensor<3x4xbf16>
  return
}

// -----

func.func @matmul_rank0(%x: tensor<f32>, %y: tensor<3x4xf32>) {
  // expected-error @+1 {{matmul operands must have rank >= 1, got 'tensor<f32>' and 'tensor<3x4xf32>'}}
  %0 = bm.matmul %x, %y : tensor<f32>, tensor<3x4xf32>
  return
}

// -----

func.func @matmul_contracting(%x: tensor<2x16x64xf32>, %y: tensor<32x8xf32>) {
  // expected-error @+1 {{matmul contracting dims differ: 64 (lhs 'tensor<2x16x64xf32>') and 32 (rhs 'tensor<32x8xf32>')}}
  %0 = bm.matmul %x, %y : tensor<2x16x64xf32>, tensor<32x8xf32>
  return
}

// -----

func.func @matmul_vectors(%x: tensor<4xf32>, %y: tensor<5xf32>) {
  // expected-error @+1 {{matmul contracting dims differ: 4 (lhs 'tensor<4xf32>') and 5 (rhs 'tensor<5xf32>')}}
  %0 = bm.matmul %x, %y : tensor<4xf32>, tensor<5xf32>
  return
}

// -----

func.func @matmul_batch(%x: tensor<3x2x4xf32>, %y: tensor<5x4x6xf32>) {
  // expected-error @+1 {{do not broadcast: dim 0 is 3 and 5}}
  %0 = bm.matmul %x, %y : tensor<3x2x4xf32>, tensor<5x4x6xf32>
  return
}

// -----

func.func @gemm_rank(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>) {
  // expected-error @+1 {{gemm needs 2-D operands, got 'tensor<2x3x4xf32>' and 'tensor<4x5xf32>'}}
  %0 = bm.gemm %a, %b : tensor<2x3x4xf32>, tensor<4x5xf32>
  return
}

// -----

func.func @gemm_element_types(%a: tensor<3x4xf32>, %b: tensor<4x5xf16>) {
  // expected-error @+1 {{gemm operand element types differ: 'tensor<3x4xf32>' and 'tensor<4x5xf16>'}}
  %0 = bm.gemm %a, %b : tensor<3x4xf32>, tensor<4x5xf16>
  return
}

// -----

func.func @gemm_contracting(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>) {
  // With trans_a, k is a's dim 0 (3), but b's dim 0 is 4.
  // expected-error @+1 {{gemm contracting dims differ: 3 and 4}}
  %0 = bm.gemm %a, %b {trans_a = true} : tensor<3x4xf32>, tensor<4x5xf32>
  return
}

// -----

func.func @gemm_bias_element_type(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<5xf16>) {
  // expected-error @+1 {{gemm bias 'tensor<5xf16>' differs in element type from 'tensor<3x4xf32>'}}
  %0 = bm.gemm %a, %b, %c : tensor<3x4xf32>, tensor<4x5xf32>, tensor<5xf16>
  return
}

// -----

func.func @gemm_bias_broadcast(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<6xf32>) {
  // expected-error @+1 {{do not broadcast: dim 1 is 5 and 6}}
  %0 = bm.gemm %a, %b, %c : tensor<3x4xf32>, tensor<4x5xf32>, tensor<6xf32>
  return
}

// -----

func.func @gemm_bias_too_big(%a: tensor<3x4xf32>, %b: tensor<4x5xf32>, %c: tensor<2x3x5xf32>) {
  // expected-error @+1 {{gemm bias 'tensor<2x3x5xf32>' does not broadcast to 'tensor<3x5xf32>'}}
  %0 = bm.gemm %a, %b, %c : tensor<3x4xf32>, tensor<4x5xf32>, tensor<2x3x5xf32>
  return
}

// -----

func.func @einsum_implicit(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum equation 'ij' must be explicit (contain '->')}}
  %0 = bm.einsum "ij" %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_ellipsis(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum term '...j' in '...j->j' must be letters only (no ellipsis)}}
  %0 = bm.einsum "...j->j" %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_result_ellipsis(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum result '...' in 'ij->...' must be letters only (no ellipsis)}}
  %0 = bm.einsum "ij->..." %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_result_twice(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum result letter 'i' in 'ij->ii' appears twice}}
  %0 = bm.einsum "ij->ii" %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_result_unknown(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum result letter 'k' in 'ij->ik' is in no input}}
  %0 = bm.einsum "ij->ik" %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_operand_count(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum equation has 2 inputs but the op has 1 operands}}
  %0 = bm.einsum "ij,jk->ik" %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_no_operands() {
  // An empty term is one input too.
  // expected-error @+2 {{einsum equation has 1 inputs but the op has 0 operands}}
  // expected-error @+1 {{'bm.einsum' op failed to infer returned types}}
  %0 = "bm.einsum"() {equation = "->"} : () -> tensor<f32>
  return
}

// -----

func.func @einsum_element_types(%x: tensor<2x3xf32>, %y: tensor<3x4xf16>) {
  // expected-error @+1 {{einsum operand element types differ: 'f32' and 'f16'}}
  %0 = bm.einsum "ij,jk->ik" %x, %y : tensor<2x3xf32>, tensor<3x4xf16>
  return
}

// -----

func.func @einsum_term_rank(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum term 'ijk' has 3 letters for operand 'tensor<2x3xf32>'}}
  %0 = bm.einsum "ijk->i" %x : tensor<2x3xf32>
  return
}

// -----

func.func @einsum_empty_term(%x: tensor<2x3xf32>, %y: tensor<3xf32>) {
  // expected-error @+1 {{einsum term '' has 0 letters for operand 'tensor<3xf32>'}}
  %0 = bm.einsum "ij,->i" %x, %y : tensor<2x3xf32>, tensor<3xf32>
  return
}

// -----

func.func @einsum_letter_sizes(%x: tensor<2x3xf32>, %y: tensor<4x5xf32>) {
  // expected-error @+1 {{einsum letter 'j' is 3 in one operand and 4 in another}}
  %0 = bm.einsum "ij,jk->ik" %x, %y : tensor<2x3xf32>, tensor<4x5xf32>
  return
}

// -----

func.func @einsum_diagonal_sizes(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{einsum letter 'i' is 2 in one operand and 3 in another}}
  %0 = bm.einsum "ii->i" %x : tensor<2x3xf32>
  return
}

// -----

func.func @conv_rank(%x: tensor<1x3xf32>, %w: tensor<8x3xf32>) {
  // expected-error @+1 {{conv needs input and weight of one rank >= 3, got 'tensor<1x3xf32>' and 'tensor<8x3xf32>'}}
  %0 = bm.conv %x, %w {dilations = array<i64>, pads = array<i64>, strides = array<i64>} : tensor<1x3xf32>, tensor<8x3xf32>
  return
}

// -----

func.func @conv_weight_rank(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3xf32>) {
  // expected-error @+1 {{conv needs input and weight of one rank >= 3, got 'tensor<1x3x8x8xf32>' and 'tensor<8x3x3xf32>'}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3xf32>
  return
}

// -----

func.func @conv_element_types(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf16>) {
  // expected-error @+1 {{conv operand element types differ: 'tensor<1x3x8x8xf32>' and 'tensor<8x3x3x3xf16>'}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf16>
  return
}

// -----

func.func @conv_attr_sizes(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{conv over 2 spatial dims needs 2 strides and dilations and 4 pads}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @conv_channels(%x: tensor<1x4x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{conv input has 4 channels but weight expects 3 x group 1}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @conv_group_zero(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{conv input has 3 channels but weight expects 3 x group 0}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, group = 0 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @conv_group_outputs(%x: tensor<1x4x8x8xf32>, %w: tensor<6x1x3x3xf32>) {
  // expected-error @+1 {{conv output channels 6 do not divide by group 4}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, group = 4 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<6x1x3x3xf32>
  return
}

// -----

func.func @conv_bias(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{conv bias 'tensor<4xf32>' must be 1-D of size 8 and element type 'f32'}}
  %0 = bm.conv %x, %w, %b {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>, tensor<4xf32>
  return
}

// -----

func.func @conv_bias_element_type(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>, %b: tensor<8xf16>) {
  // expected-error @+1 {{conv bias 'tensor<8xf16>' must be 1-D of size 8 and element type 'f32'}}
  %0 = bm.conv %x, %w, %b {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>, tensor<8xf16>
  return
}

// -----

func.func @conv_stride(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{conv stride 0 and dilation 1 of spatial dim 1 must be >= 1}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 0>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @conv_dilation(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{conv stride 1 and dilation -1 of spatial dim 0 must be >= 1}}
  %0 = bm.conv %x, %w {dilations = array<i64: -1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @conv_negative_pad(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{conv pads 0/-1 of spatial dim 0 must be >= 0}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, -1, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @conv_empty_kernel(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x0xf32>) {
  // expected-error @+1 {{conv kernel size 0 of spatial dim 1 must be >= 1}}
  %0 = bm.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x0xf32>
  return
}

// -----

func.func @conv_window(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // With dilation 4 the window is 4 * (3 - 1) + 1 = 9 > 8.
  // expected-error @+1 {{conv window 9 is larger than padded dim 8}}
  %0 = bm.conv %x, %w {dilations = array<i64: 4, 1>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

//===----------------------------------------------------------------------===//
// Normalisation and softmax
//===----------------------------------------------------------------------===//

// -----

func.func @softmax_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.softmax' op axis 2 is out of range for rank 2}}
  %0 = bm.softmax %x {axis = 2 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @log_softmax_negative_axis(%x: tensor<2x8xf32>) {
  // Negative axes are normalised by the importer.
  // expected-error @+1 {{'bm.log_softmax' op axis -1 is out of range for rank 2}}
  %0 = bm.log_softmax %x {axis = -1 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_axis(%x: tensor<2x8xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{normalisation axis 2 is out of range for rank 2}}
  %0 = bm.layer_norm %x, %s {axis = 2 : i64, epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_scale(%x: tensor<2x8xf32>, %s: tensor<2x8xf32>) {
  // expected-error @+1 {{normalisation parameter 'tensor<2x8xf32>' must have the normalised shape of 'tensor<2x8xf32>' from axis 1}}
  %0 = bm.layer_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @layer_norm_bias(%x: tensor<2x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf16>) {
  // expected-error @+1 {{normalisation parameter 'tensor<8xf16>' must have the normalised shape of 'tensor<2x8xf32>' from axis 1}}
  %0 = bm.layer_norm %x, %s, %b {axis = 1 : i64, epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf16>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<2x8xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{normalisation epsilon -1.000000e-05 must be >= 0}}
  %0 = bm.layer_norm %x, %s {axis = 1 : i64, epsilon = -1.0e-5 : f32} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_scale(%x: tensor<2x8xf32>, %s: tensor<4xf32>) {
  // expected-error @+1 {{normalisation parameter 'tensor<4xf32>' must have the normalised shape of 'tensor<2x8xf32>' from axis 1}}
  %0 = bm.rms_norm %x, %s {axis = 1 : i64, epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @batch_norm_rank(%x: tensor<8xf32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{batch norm needs rank >= 2, got 'tensor<8xf32>'}}
  %0 = bm.batch_norm %x, %p, %p, %p, %p {epsilon = 1.0e-5 : f32} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @batch_norm_param(%x: tensor<2x8x4x4xf32>, %p: tensor<8xf32>, %v: tensor<4xf32>) {
  // expected-error @+1 {{batch norm parameter 'tensor<4xf32>' must be 1-D of size 8}}
  %0 = bm.batch_norm %x, %p, %p, %p, %v {epsilon = 1.0e-5 : f32} : tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @batch_norm_epsilon(%x: tensor<2x8x4x4xf32>, %p: tensor<8xf32>) {
  // expected-error @+1 {{batch norm epsilon -1.000000e+00 must be >= 0}}
  %0 = bm.batch_norm %x, %p, %p, %p, %p {epsilon = -1.0 : f32} : tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions, top-k, one-hot
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{reduction axis 2 is out of range for rank 2}}
  %0 = bm.reduce_sum %x {axes = array<i64: 0, 2>} : tensor<2x8xf32>
  return
}

// -----

func.func @reduce_negative_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{reduction axis -1 is out of range for rank 2}}
  %0 = bm.reduce_max %x {axes = array<i64: -1>} : tensor<2x8xf32>
  return
}

// -----

func.func @reduce_axis_twice(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{reduction axis 1 is listed twice}}
  %0 = bm.reduce_mean %x {axes = array<i64: 1, 1>, keep_dims = false} : tensor<2x8xf32>
  return
}

// -----

func.func @cumsum_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.cumsum' op axis 5 is out of range for rank 2}}
  %0 = bm.cumsum %x {axis = 5 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @top_k_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{top_k axis 2 is out of range for rank 2}}
  %0:2 = bm.top_k %x {axis = 2 : i64, k = 1 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @top_k_rank0(%x: tensor<f32>) {
  // expected-error @+1 {{top_k axis 0 is out of range for rank 0}}
  %0:2 = bm.top_k %x {axis = 0 : i64, k = 1 : i64} : tensor<f32>
  return
}

// -----

func.func @top_k_too_many(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{top_k k = 9 must be in [1, 8]}}
  %0:2 = bm.top_k %x {axis = 1 : i64, k = 9 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @top_k_zero(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{top_k k = 0 must be in [1, 8]}}
  %0:2 = bm.top_k %x {axis = 1 : i64, k = 0 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @one_hot_depth(%x: tensor<2x8xi64>) {
  // expected-error @+1 {{'bm.one_hot' op depth 0 must be >= 1}}
  %0 = bm.one_hot %x {axis = 2 : i64, depth = 0 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x8xi64> -> tensor<2x8x0xf32>
  return
}

// -----

func.func @one_hot_axis(%x: tensor<2x8xi64>) {
  // The result has rank 3, so axis 3 is one too far.
  // expected-error @+1 {{'bm.one_hot' op axis 3 is out of range for rank 3}}
  %0 = bm.one_hot %x {axis = 3 : i64, depth = 4 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x8xi64> -> tensor<2x8x4xf32>
  return
}

// -----

func.func @one_hot_shape(%x: tensor<2x8xi64>) {
  // expected-error @+1 {{'bm.one_hot' op result shape must be [2, 4, 8], got 'tensor<2x8x4xf32>'}}
  %0 = bm.one_hot %x {axis = 1 : i64, depth = 4 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x8xi64> -> tensor<2x8x4xf32>
  return
}

// -----

func.func @one_hot_float_indices(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of signless integer values, but got 'tensor<2x8xf32>'}}
  %0 = bm.one_hot %x {axis = 2 : i64, depth = 4 : i64, off_value = 0.0 : f64, on_value = 1.0 : f64} : tensor<2x8xf32> -> tensor<2x8x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// -----

func.func @constant_type() {
  // expected-error @+1 {{'bm.constant' op failed to verify that all of {value, result} have same type}}
  %0 = "bm.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf16>
  return
}

// -----

func.func @iota_rank() {
  // expected-error @+1 {{result #0 must be statically shaped 1-D tensor of signless integer or floating-point values, but got 'tensor<2x8xi64>'}}
  %0 = bm.iota {delta = 1.0 : f64, start = 0.0 : f64} : tensor<2x8xi64>
  return
}

// -----

func.func @trilu_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'bm.trilu' op needs rank >= 2, got 'tensor<8xf32>'}}
  %0 = bm.trilu %x : tensor<8xf32>
  return
}

// -----

func.func @reshape_element_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.reshape' op cannot change the element type from 'f32' to 'f16'}}
  %0 = bm.reshape %x : tensor<2x8xf32> -> tensor<16xf16>
  return
}

// -----

func.func @reshape_count(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.reshape' op cannot reshape 16 elements ('tensor<2x8xf32>') into 18 ('tensor<2x9xf32>')}}
  %0 = bm.reshape %x : tensor<2x8xf32> -> tensor<2x9xf32>
  return
}

// -----

func.func @transpose_size(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{permutation of 3 entries for rank 2}}
  %0 = bm.transpose %x {permutation = array<i64: 0, 1, 2>} : tensor<2x8xf32>
  return
}

// -----

func.func @transpose_duplicate(%x: tensor<2x8x4xf32>) {
  // expected-error @+1 {{permutation [0, 1, 1] is not a permutation of 0..2}}
  %0 = bm.transpose %x {permutation = array<i64: 0, 1, 1>} : tensor<2x8x4xf32>
  return
}

// -----

func.func @transpose_range(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{permutation [-1, 0] is not a permutation of 0..1}}
  %0 = bm.transpose %x {permutation = array<i64: -1, 0>} : tensor<2x8xf32>
  return
}

// -----

func.func @gather_axis(%x: tensor<2x8xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{gather axis 2 is out of range for rank 2}}
  %0 = bm.gather %x, %i {axis = 2 : i64} : tensor<2x8xf32>, tensor<3xi64>
  return
}

// -----

func.func @gather_float_indices(%x: tensor<2x8xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of signless integer values, but got 'tensor<3xf32>'}}
  %0 = bm.gather %x, %i {axis = 0 : i64} : tensor<2x8xf32>, tensor<3xf32>
  return
}

// -----

func.func @concat_empty() {
  // expected-error @+2 {{concat needs at least one input}}
  // expected-error @+1 {{'bm.concat' op failed to infer returned types}}
  %0 = "bm.concat"() {axis = 0 : i64} : () -> tensor<1xf32>
  return
}

// -----

func.func @concat_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{concat axis 2 is out of range for rank 2}}
  %0 = bm.concat %x, %x {axis = 2 : i64} : tensor<2x8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @concat_rank(%x: tensor<2x8xf32>, %y: tensor<8xf32>) {
  // expected-error @+1 {{concat inputs 'tensor<2x8xf32>' and 'tensor<8xf32>' differ in rank or element type}}
  %0 = bm.concat %x, %y {axis = 0 : i64} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

func.func @concat_element_type(%x: tensor<2x8xf32>, %y: tensor<2x8xf16>) {
  // expected-error @+1 {{concat inputs 'tensor<2x8xf32>' and 'tensor<2x8xf16>' differ in rank or element type}}
  %0 = bm.concat %x, %y {axis = 0 : i64} : tensor<2x8xf32>, tensor<2x8xf16>
  return
}

// -----

func.func @concat_dims(%x: tensor<2x8xf32>, %y: tensor<3x4xf32>) {
  // expected-error @+1 {{concat inputs 'tensor<2x8xf32>' and 'tensor<3x4xf32>' differ in dim 1}}
  %0 = bm.concat %x, %y {axis = 0 : i64} : tensor<2x8xf32>, tensor<3x4xf32>
  return
}

// -----

func.func @split_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{split axis -1 is out of range for rank 2}}
  %0:2 = bm.split %x {axis = -1 : i64, sizes = array<i64: 4, 4>} : tensor<2x8xf32>
  return
}

// -----

func.func @split_negative(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{split size -2 is negative}}
  %0:2 = bm.split %x {axis = 1 : i64, sizes = array<i64: 10, -2>} : tensor<2x8xf32>
  return
}

// -----

func.func @split_total(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{split sizes add up to 6 but dim 1 is 8}}
  %0:2 = bm.split %x {axis = 1 : i64, sizes = array<i64: 4, 2>} : tensor<2x8xf32>
  return
}

// -----

func.func @split_no_sizes(%x: tensor<2x8xf32>) {
  // expected-error @+2 {{split sizes add up to 0 but dim 1 is 8}}
  // expected-error @+1 {{'bm.split' op failed to infer returned types}}
  "bm.split"(%x) {axis = 1 : i64, sizes = array<i64>} : (tensor<2x8xf32>) -> ()
  return
}

// -----

func.func @slice_counts(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{slice needs one start, limit and stride per dim (rank 2)}}
  %0 = bm.slice %x {limits = array<i64: 2>, starts = array<i64: 0, 0>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  return
}

// -----

func.func @slice_limit(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{slice [0, 9) step 1 is not within dim 1 of size 8}}
  %0 = bm.slice %x {limits = array<i64: 2, 9>, starts = array<i64: 0, 0>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  return
}

// -----

func.func @slice_start(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{slice [-1, 2) step 1 is not within dim 0 of size 2}}
  %0 = bm.slice %x {limits = array<i64: 2, 8>, starts = array<i64: -1, 0>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  return
}

// -----

func.func @slice_reversed(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{slice [5, 3) step 1 is not within dim 1 of size 8}}
  %0 = bm.slice %x {limits = array<i64: 2, 3>, starts = array<i64: 0, 5>, strides = array<i64: 1, 1>} : tensor<2x8xf32>
  return
}

// -----

func.func @slice_stride(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{slice [0, 8) step 0 is not within dim 1 of size 8}}
  %0 = bm.slice %x {limits = array<i64: 2, 8>, starts = array<i64: 0, 0>, strides = array<i64: 1, 0>} : tensor<2x8xf32>
  return
}

// -----

func.func @squeeze_axis(%x: tensor<2x1xf32>) {
  // expected-error @+1 {{squeeze axis 2 is out of range for rank 2}}
  %0 = bm.squeeze %x {axes = array<i64: 2>} : tensor<2x1xf32>
  return
}

// -----

func.func @squeeze_size(%x: tensor<2x1xf32>) {
  // expected-error @+1 {{squeeze axis 0 has size 2, not 1}}
  %0 = bm.squeeze %x {axes = array<i64: 0>} : tensor<2x1xf32>
  return
}

// -----

func.func @squeeze_twice(%x: tensor<2x1xf32>) {
  // expected-error @+1 {{squeeze axis 1 is listed twice}}
  %0 = bm.squeeze %x {axes = array<i64: 1, 1>} : tensor<2x1xf32>
  return
}

// -----

func.func @unsqueeze_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{unsqueeze axis 3 is out of range or repeated for result rank 3}}
  %0 = bm.unsqueeze %x {axes = array<i64: 3>} : tensor<2x8xf32>
  return
}

// -----

func.func @unsqueeze_twice(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{unsqueeze axis 0 is out of range or repeated for result rank 4}}
  %0 = bm.unsqueeze %x {axes = array<i64: 0, 0>} : tensor<2x8xf32>
  return
}

// -----

func.func @expand_element_type(%x: tensor<1x8xf32>) {
  // expected-error @+1 {{'bm.expand' op cannot change the element type from 'f32' to 'f16'}}
  %0 = bm.expand %x : tensor<1x8xf32> -> tensor<4x8xf16>
  return
}

// -----

func.func @expand_broadcast(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{shapes 'tensor<2x8xf32>', 'tensor<4x8xf32>' do not broadcast: dim 0 is 2 and 4}}
  %0 = bm.expand %x : tensor<2x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @expand_shrink(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'bm.expand' op 'tensor<4x8xf32>' does not expand to 'tensor<1x8xf32>'}}
  %0 = bm.expand %x : tensor<4x8xf32> -> tensor<1x8xf32>
  return
}

// -----

func.func @flatten_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{flatten axis 3 is out of range for rank 2}}
  %0 = bm.flatten %x {axis = 3 : i64} : tensor<2x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

// -----

func.func @pool_rank(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{pooling needs a tensor of rank >= 3, got 'tensor<2x8xf32>'}}
  %0 = bm.max_pool %x {kernel_shape = array<i64>, pads = array<i64>, strides = array<i64>} : tensor<2x8xf32>
  return
}

// -----

func.func @pool_attr_sizes(%x: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{pooling over 2 spatial dims needs 2 kernel sizes and strides and 4 pads, got 2, 1 and 4}}
  %0 = bm.avg_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2>} : tensor<1x2x8x8xf32>
  return
}

// -----

func.func @pool_kernel(%x: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{pooling window 0, stride 1 and pads 0/0 must be positive}}
  %0 = bm.avg_pool %x {kernel_shape = array<i64: 2, 0>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x2x8x8xf32>
  return
}

// -----

func.func @pool_pads(%x: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{pooling window 2, stride 1 and pads -1/0 must be positive}}
  %0 = bm.max_pool %x {kernel_shape = array<i64: 2, 2>, pads = array<i64: -1, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x2x8x8xf32>
  return
}

// -----

func.func @pool_window(%x: tensor<1x2x8x8xf32>) {
  // expected-error @+1 {{pooling window 11 is larger than padded dim 10}}
  %0 = bm.max_pool %x {kernel_shape = array<i64: 2, 11>, pads = array<i64: 0, 1, 0, 1>, strides = array<i64: 1, 1>} : tensor<1x2x8x8xf32>
  return
}

// -----

func.func @global_pool_rank(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{global pooling needs rank >= 3, got 'tensor<2x8xf32>'}}
  %0 = bm.global_avg_pool %x : tensor<2x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// The custom parser infers result types before the op is verified: missing
// or mistyped attributes are reported, not read as null
//===----------------------------------------------------------------------===//

// -----

func.func @missing_attr(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.top_k' op requires attribute 'k'}}
  %0:2 = bm.top_k %x {axis = 0 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @missing_array_attr(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.transpose' op requires attribute 'permutation'}}
  %0 = bm.transpose %x : tensor<2x8xf32>
  return
}

// -----

func.func @mistyped_attr(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.reduce_sum' op attribute 'axes' failed to satisfy constraint: i64 dense array attribute}}
  %0 = bm.reduce_sum %x {axes = 1 : i64} : tensor<2x8xf32>
  return
}

// -----

func.func @mistyped_default_attr(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.gemm' op attribute 'trans_a' failed to satisfy constraint: bool attribute}}
  %0 = bm.gemm %x, %x {trans_a = 1 : i64} : tensor<2x8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @missing_conv_attr(%x: tensor<1x3x8x8xf32>, %w: tensor<8x3x3x3xf32>) {
  // expected-error @+1 {{'bm.conv' op requires attribute 'dilations'}}
  %0 = bm.conv %x, %w {pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<8x3x3x3xf32>
  return
}

// -----

func.func @generic_missing_attr(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'bm.gather' op requires attribute 'axis'}}
  %0 = "bm.gather"(%x, %x) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @gather_elements_rank(%x: tensor<2x8xf32>, %i: tensor<3xi64>) {
  // expected-error @+1 {{gather_elements indices 'tensor<3xi64>' need the rank of the data 'tensor<2x8xf32>'}}
  %0 = bm.gather_elements %x, %i {axis = 1 : i64} : tensor<2x8xf32>, tensor<3xi64>
  return
}

// -----

func.func @gather_elements_longer(%x: tensor<2x8xf32>, %i: tensor<3x2xi64>) {
  // expected-error @+1 {{gather_elements indices 'tensor<3x2xi64>' are longer than the data 'tensor<2x8xf32>' in dim 0}}
  %0 = bm.gather_elements %x, %i {axis = 1 : i64} : tensor<2x8xf32>, tensor<3x2xi64>
  return
}

// -----

func.func @scatter_elements_axis(%x: tensor<2x8xf32>, %i: tensor<2x2xi64>, %u: tensor<2x2xf32>) {
  // expected-error @+1 {{scatter_elements axis 2 is out of range for rank 2}}
  %0 = bm.scatter_elements %x, %i, %u {axis = 2 : i64} : tensor<2x8xf32>, tensor<2x2xi64>, tensor<2x2xf32>
  return
}

// -----

func.func @scatter_elements_updates(%x: tensor<2x8xf32>, %i: tensor<2x2xi64>, %u: tensor<2x3xf32>) {
  // expected-error @+1 {{scatter_elements updates 'tensor<2x3xf32>' need the indices' shape 'tensor<2x2xi64>' and the data's element type 'tensor<2x8xf32>'}}
  %0 = bm.scatter_elements %x, %i, %u {axis = 1 : i64} : tensor<2x8xf32>, tensor<2x2xi64>, tensor<2x3xf32>
  return
}

// -----

func.func @scatter_elements_reduction(%x: tensor<2x8xf32>, %i: tensor<2x2xi64>, %u: tensor<2x2xf32>) {
  // expected-error @+1 {{'bm.scatter_elements' op reduction 'sum' is not one of none, add, mul, max, min}}
  %0 = bm.scatter_elements %x, %i, %u {axis = 1 : i64, reduction = "sum"} : tensor<2x8xf32>, tensor<2x2xi64>, tensor<2x2xf32>
  return
}

// -----

func.func @attention_head_dims(%q: tensor<2x8x16xf32>, %kt: tensor<2x8x8xf32>, %v: tensor<2x8x16xf32>) {
  // expected-error @+1 {{attention's kt rows ('tensor<2x8x8xf32>') must be q's head dim ('tensor<2x8x16xf32>')}}
  %0 = bm.attention %q, %kt, %v {scale = 1.0 : f32} : tensor<2x8x16xf32>, tensor<2x8x8xf32>, tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_leading(%q: tensor<2x8x16xf32>, %kt: tensor<1x16x8xf32>, %v: tensor<2x8x16xf32>) {
  // expected-error @+1 {{attention's leading dims differ: 'tensor<2x8x16xf32>', 'tensor<1x16x8xf32>' and 'tensor<2x8x16xf32>'}}
  %0 = bm.attention %q, %kt, %v {scale = 1.0 : f32} : tensor<2x8x16xf32>, tensor<1x16x8xf32>, tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_values(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<6x4xf32>) {
  // expected-error @+1 {{attention's v rows ('tensor<6x4xf32>') must be kt's keys ('tensor<16x8xf32>')}}
  %0 = bm.attention %q, %kt, %v {scale = 1.0 : f32} : tensor<8x16xf32>, tensor<16x8xf32>, tensor<6x4xf32>
  return
}

// -----

func.func @attention_positions_uncausal(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x4xf32>, %p: tensor<8xi64>) {
  // expected-error @+1 {{'bm.attention' op positions need a causal mask}}
  %0 = bm.attention %q, %kt, %v positions %p {scale = 1.0 : f32} : tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x4xf32>, tensor<8xi64>
  return
}

// -----

func.func @attention_positions_count(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x4xf32>, %p: tensor<6xi64>) {
  // expected-error @+1 {{'bm.attention' op positions must be [8], one per query, got 'tensor<6xi64>'}}
  %0 = bm.attention %q, %kt, %v positions %p {scale = 1.0 : f32, causal = true} : tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x4xf32>, tensor<6xi64>
  return
}

// -----

func.func @attention_grad_result(%q: tensor<8x16xf32>, %kt: tensor<16x8xf32>, %v: tensor<8x4xf32>, %o: tensor<8x5xf32>) {
  // expected-error @+1 {{'bm.attention_grad' op result must be the attention's result 'tensor<8x4xf32>', got 'tensor<8x5xf32>'}}
  %0:3 = bm.attention_grad %q, %kt, %v, %o, %o {scale = 1.0 : f32} : tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x4xf32>, tensor<8x5xf32>
  return
}
