// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-fuse-attention))' --split-input-file | FileCheck %s

// The zoo's GPT: scores * 0.25, plus trilu(-1e9, k=1) (the keys after each
// query hidden), softmax, context. The mask's ops go with the chain.
// CHECK-LABEL: func.func @zoo_causal
// CHECK-NEXT: %[[A:.*]] = bm.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f32}
// CHECK-NEXT: return %[[A]]
func.func @zoo_causal(%q: tensor<2x4x8x16xf32>, %kt: tensor<2x4x16x8xf32>,
                      %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %big = bm.constant dense<-1.0e9> : tensor<8x8xf32>
  %mask = bm.trilu %big {k = 1 : i64} : tensor<8x8xf32>
  %s = bm.matmul %q, %kt : tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>
  %c = bm.constant dense<0.25> : tensor<f32>
  %scaled = bm.mul %s, %c : tensor<2x4x8x8xf32>, tensor<f32>
  %masked = bm.add %scaled, %mask : tensor<2x4x8x8xf32>, tensor<8x8xf32>
  %p = bm.softmax %masked {axis = 3 : i64} : tensor<2x4x8x8xf32>
  %o = bm.matmul %p, %v : tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Hugging Face GPT-2: scores / 4, where(causal bool, scores, lowest), plus
// the attention mask's constant (0 where seen, lowest above the diagonal).
// CHECK-LABEL: func.func @hf_where_then_add
// CHECK-NEXT: %[[A:.*]] = bm.attention %arg0, %arg1, %arg2 {causal = true, scale = 2.500000e-01 : f32}
// CHECK-NEXT: return %[[A]]
func.func @hf_where_then_add(%q: tensor<2x2x3x4xf32>, %kt: tensor<2x2x4x3xf32>,
                             %v: tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32> {
  %s = bm.matmul %q, %kt : tensor<2x2x3x4xf32>, tensor<2x2x4x3xf32>
  %c = bm.constant dense<4.0> : tensor<f32>
  %scaled = bm.div %s, %c : tensor<2x2x3x3xf32>, tensor<f32>
  %seen = bm.constant dense<[[[[true, false, false], [true, true, false], [true, true, true]]]]> : tensor<1x1x3x3xi1>
  %lowest = bm.constant dense<-3.40282347E+38> : tensor<f32>
  %w = bm.where %seen, %scaled, %lowest : tensor<1x1x3x3xi1>, tensor<2x2x3x3xf32>, tensor<f32>
  %m = bm.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]], [[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0]]]]> : tensor<2x1x3x3xf32>
  %masked = bm.add %w, %m : tensor<2x2x3x3xf32>, tensor<2x1x3x3xf32>
  %p = bm.softmax %masked {axis = 3 : i64} : tensor<2x2x3x3xf32>
  %o = bm.matmul %p, %v : tensor<2x2x3x3xf32>, tensor<2x2x3x4xf32>
  return %o : tensor<2x2x3x4xf32>
}

// -----

// BERT with an all-ones attention mask: the added padding mask is 0
// everywhere (-0.0 as exported), so nothing is hidden. v has its own width.
// CHECK-LABEL: func.func @padding_mask_of_zeros
// CHECK-NEXT: %[[A:.*]] = bm.attention %arg0, %arg1, %arg2 {scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[A]]
func.func @padding_mask_of_zeros(%q: tensor<2x3x5x4xf32>, %kt: tensor<2x3x4x5xf32>,
                                 %v: tensor<2x3x5x6xf32>) -> tensor<2x3x5x6xf32> {
  %s = bm.matmul %q, %kt : tensor<2x3x5x4xf32>, tensor<2x3x4x5xf32>
  %c = bm.constant dense<2.0> : tensor<f32>
  %scaled = bm.div %s, %c : tensor<2x3x5x5xf32>, tensor<f32>
  %m = bm.constant dense<-0.0> : tensor<2x1x1x5xf32>
  %masked = bm.add %scaled, %m : tensor<2x3x5x5xf32>, tensor<2x1x1x5xf32>
  %p = bm.softmax %masked {axis = 3 : i64} : tensor<2x3x5x5xf32>
  %o = bm.matmul %p, %v : tensor<2x3x5x5xf32>, tensor<2x3x5x6xf32>
  return %o : tensor<2x3x5x6xf32>
}

// -----

// No scale, no mask (the scale folded into q by the model): scale 1.
// CHECK-LABEL: func.func @bare
// CHECK-NEXT: %[[A:.*]] = bm.attention %arg0, %arg1, %arg2 {scale = 1.000000e+00 : f32}
func.func @bare(%q: tensor<3x5x4xf32>, %kt: tensor<3x4x7xf32>,
                %v: tensor<3x7x2xf32>) -> tensor<3x5x2xf32> {
  %s = bm.matmul %q, %kt : tensor<3x5x4xf32>, tensor<3x4x7xf32>
  %p = bm.softmax %s {axis = 2 : i64} : tensor<3x5x7xf32>
  %o = bm.matmul %p, %v : tensor<3x5x7xf32>, tensor<3x7x2xf32>
  return %o : tensor<3x5x2xf32>
}

// -----

// A padding mask that hides a key is neither causal nor empty: unchanged.
// CHECK-LABEL: func.func @padding_that_hides
// CHECK-NOT: bm.attention
// CHECK: bm.softmax
func.func @padding_that_hides(%q: tensor<1x1x2x4xf32>, %kt: tensor<1x1x4x2xf32>,
                              %v: tensor<1x1x2x4xf32>) -> tensor<1x1x2x4xf32> {
  %s = bm.matmul %q, %kt : tensor<1x1x2x4xf32>, tensor<1x1x4x2xf32>
  %m = bm.constant dense<[[[[0.0, -1.0e9]]]]> : tensor<1x1x1x2xf32>
  %masked = bm.add %s, %m : tensor<1x1x2x2xf32>, tensor<1x1x1x2xf32>
  %p = bm.softmax %masked {axis = 3 : i64} : tensor<1x1x2x2xf32>
  %o = bm.matmul %p, %v : tensor<1x1x2x2xf32>, tensor<1x1x2x4xf32>
  return %o : tensor<1x1x2x4xf32>
}

// -----

// T5's learned position bias is a run-time value: unchanged.
// CHECK-LABEL: func.func @learned_bias
// CHECK-NOT: bm.attention
// CHECK: bm.softmax
func.func @learned_bias(%q: tensor<1x2x3x4xf32>, %kt: tensor<1x2x4x3xf32>,
                        %v: tensor<1x2x3x4xf32>, %bias: tensor<1x2x3x3xf32>)
    -> tensor<1x2x3x4xf32> {
  %s = bm.matmul %q, %kt : tensor<1x2x3x4xf32>, tensor<1x2x4x3xf32>
  %b = bm.add %s, %bias : tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>
  %p = bm.softmax %b {axis = 3 : i64} : tensor<1x2x3x3xf32>
  %o = bm.matmul %p, %v : tensor<1x2x3x3xf32>, tensor<1x2x3x4xf32>
  return %o : tensor<1x2x3x4xf32>
}

// -----

// A mask added before the scale would be scaled with the scores; and
// ALiBi-like constants (neither 0 nor hiding) are biases: both unchanged.
// CHECK-LABEL: func.func @mask_before_scale
// CHECK-NOT: bm.attention
// CHECK-LABEL: func.func @constant_bias
// CHECK-NOT: bm.attention
// CHECK: bm.softmax
func.func @mask_before_scale(%q: tensor<1x2x4xf32>, %kt: tensor<1x4x2xf32>,
                             %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %s = bm.matmul %q, %kt : tensor<1x2x4xf32>, tensor<1x4x2xf32>
  %m = bm.constant dense<[[0.0, -1.0e9], [0.0, 0.0]]> : tensor<2x2xf32>
  %masked = bm.add %s, %m : tensor<1x2x2xf32>, tensor<2x2xf32>
  %c = bm.constant dense<0.5> : tensor<f32>
  %scaled = bm.mul %masked, %c : tensor<1x2x2xf32>, tensor<f32>
  %p = bm.softmax %scaled {axis = 2 : i64} : tensor<1x2x2xf32>
  %o = bm.matmul %p, %v : tensor<1x2x2xf32>, tensor<1x2x4xf32>
  return %o : tensor<1x2x4xf32>
}
func.func @constant_bias(%q: tensor<1x2x4xf32>, %kt: tensor<1x4x2xf32>,
                         %v: tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  %s = bm.matmul %q, %kt : tensor<1x2x4xf32>, tensor<1x4x2xf32>
  %m = bm.constant dense<[[0.0, -1.0], [-1.0, 0.0]]> : tensor<2x2xf32>
  %masked = bm.add %s, %m : tensor<1x2x2xf32>, tensor<2x2xf32>
  %p = bm.softmax %masked {axis = 2 : i64} : tensor<1x2x2xf32>
  %o = bm.matmul %p, %v : tensor<1x2x2xf32>, tensor<1x2x4xf32>
  return %o : tensor<1x2x4xf32>
}

// -----

// Probabilities read twice (returned as well): the scores must exist, so
// nothing is fused.
// CHECK-LABEL: func.func @probabilities_kept
// CHECK-NOT: bm.attention
func.func @probabilities_kept(%q: tensor<1x2x4xf32>, %kt: tensor<1x4x2xf32>,
                              %v: tensor<1x2x4xf32>)
    -> (tensor<1x2x4xf32>, tensor<1x2x2xf32>) {
  %s = bm.matmul %q, %kt : tensor<1x2x4xf32>, tensor<1x4x2xf32>
  %p = bm.softmax %s {axis = 2 : i64} : tensor<1x2x2xf32>
  %o = bm.matmul %p, %v : tensor<1x2x2xf32>, tensor<1x2x4xf32>
  return %o, %p : tensor<1x2x4xf32>, tensor<1x2x2xf32>
}

// -----

// Causal with more keys than queries (a cached prefix): query i sees keys
// up to i + (t - s), the trilu's k = t - s + 1.
// CHECK-LABEL: func.func @causal_with_prefix
// CHECK-NEXT: bm.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.000000e+00 : f32}
func.func @causal_with_prefix(%q: tensor<1x2x4xf32>, %kt: tensor<1x4x5xf32>,
                              %v: tensor<1x5x4xf32>) -> tensor<1x2x4xf32> {
  %big = bm.constant dense<-1.0e4> : tensor<2x5xf32>
  %mask = bm.trilu %big {k = 4 : i64} : tensor<2x5xf32>
  %s = bm.matmul %q, %kt : tensor<1x2x4xf32>, tensor<1x4x5xf32>
  %masked = bm.add %mask, %s : tensor<2x5xf32>, tensor<1x2x5xf32>
  %p = bm.softmax %masked {axis = 2 : i64} : tensor<1x2x5xf32>
  %o = bm.matmul %p, %v : tensor<1x2x5xf32>, tensor<1x5x4xf32>
  return %o : tensor<1x2x4xf32>
}

// -----

// A long sequence's mask (16384 x 16384: 2^28 elements, too many to
// evaluate on the host) is read from its form, a trilu of a hiding splat.
// CHECK-LABEL: func.func @long_causal
// CHECK-NEXT: %[[A:.*]] = bm.attention %arg0, %arg1, %arg2 {causal = true, scale = 1.250000e-01 : f32}
// CHECK-NEXT: return %[[A]]
func.func @long_causal(%q: tensor<1x1x16384x64xf32>, %kt: tensor<1x1x64x16384xf32>,
                       %v: tensor<1x1x16384x64xf32>) -> tensor<1x1x16384x64xf32> {
  %big = bm.constant dense<-1.0e9> : tensor<16384x16384xf32>
  %mask = bm.trilu %big {k = 1 : i64} : tensor<16384x16384xf32>
  %s = bm.matmul %q, %kt : tensor<1x1x16384x64xf32>, tensor<1x1x64x16384xf32>
  %c = bm.constant dense<0.125> : tensor<f32>
  %scaled = bm.mul %s, %c : tensor<1x1x16384x16384xf32>, tensor<f32>
  %masked = bm.add %scaled, %mask : tensor<1x1x16384x16384xf32>, tensor<16384x16384xf32>
  %p = bm.softmax %masked {axis = 3 : i64} : tensor<1x1x16384x16384xf32>
  %o = bm.matmul %p, %v : tensor<1x1x16384x16384xf32>, tensor<1x1x16384x64xf32>
  return %o : tensor<1x1x16384x64xf32>
}

// -----

// The triangle of a splat that adds a bias (not below the hiding value)
// is no mask: nothing fuses.
// CHECK-LABEL: func.func @long_bias
// CHECK: bm.softmax
func.func @long_bias(%q: tensor<1x1x16384x64xf32>, %kt: tensor<1x1x64x16384xf32>,
                     %v: tensor<1x1x16384x64xf32>) -> tensor<1x1x16384x64xf32> {
  %big = bm.constant dense<-2.0> : tensor<16384x16384xf32>
  %mask = bm.trilu %big {k = 1 : i64} : tensor<16384x16384xf32>
  %s = bm.matmul %q, %kt : tensor<1x1x16384x64xf32>, tensor<1x1x64x16384xf32>
  %masked = bm.add %s, %mask : tensor<1x1x16384x16384xf32>, tensor<16384x16384xf32>
  %p = bm.softmax %masked {axis = 3 : i64} : tensor<1x1x16384x16384xf32>
  %o = bm.matmul %p, %v : tensor<1x1x16384x16384xf32>, tensor<1x1x16384x64xf32>
  return %o : tensor<1x1x16384x64xf32>
}
