// RUN: bmc-opt %s --pass-pipeline='builtin.module(func.func(bm-fuse-gelu))' --split-input-file | FileCheck %s

// GPT-2's export: x * (1 + tanh(...)) then * 0.5.
// CHECK-LABEL: func.func @product_then_half
// CHECK-NEXT: %[[G:.*]] = bm.gelu %arg0 {tanh_approximation = true} : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @product_then_half(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c3 = bm.constant dense<3.0> : tensor<f32>
  %p = bm.pow %x, %c3 : tensor<2x8xf32>, tensor<f32>
  %c = bm.constant dense<0.044715> : tensor<f32>
  %m = bm.mul %p, %c : tensor<2x8xf32>, tensor<f32>
  %a = bm.add %x, %m : tensor<2x8xf32>, tensor<2x8xf32>
  %k = bm.constant dense<0.797884583> : tensor<f32>
  %u = bm.mul %a, %k : tensor<2x8xf32>, tensor<f32>
  %t = bm.tanh %u : tensor<2x8xf32>
  %one = bm.constant dense<1.0> : tensor<f32>
  %s = bm.add %t, %one : tensor<2x8xf32>, tensor<f32>
  %xs = bm.mul %x, %s : tensor<2x8xf32>, tensor<2x8xf32>
  %half = bm.constant dense<0.5> : tensor<f32>
  %y = bm.mul %xs, %half : tensor<2x8xf32>, tensor<f32>
  return %y : tensor<2x8xf32>
}

// -----

// Hugging Face's export: (x * 0.5) * (1 + tanh(...)), constants first.
// CHECK-LABEL: func.func @half_first
// CHECK-NEXT: %[[G:.*]] = bm.gelu %arg0 {tanh_approximation = true}
// CHECK-NEXT: return %[[G]]
func.func @half_first(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = bm.constant dense<0.5> : tensor<f32>
  %h = bm.mul %half, %x : tensor<f32>, tensor<2x8xf32>
  %c3 = bm.constant dense<3.0> : tensor<f32>
  %p = bm.pow %x, %c3 : tensor<2x8xf32>, tensor<f32>
  %c = bm.constant dense<0.044715> : tensor<f32>
  %m = bm.mul %c, %p : tensor<f32>, tensor<2x8xf32>
  %a = bm.add %m, %x : tensor<2x8xf32>, tensor<2x8xf32>
  %k = bm.constant dense<0.797884583> : tensor<f32>
  %u = bm.mul %k, %a : tensor<f32>, tensor<2x8xf32>
  %t = bm.tanh %u : tensor<2x8xf32>
  %one = bm.constant dense<1.0> : tensor<f32>
  %s = bm.add %one, %t : tensor<f32>, tensor<2x8xf32>
  %y = bm.mul %h, %s : tensor<2x8xf32>, tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Another constant (0.05, not 0.044715) is another function: left alone.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: bm.gelu
// CHECK: bm.tanh
func.func @not_gelu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %c3 = bm.constant dense<3.0> : tensor<f32>
  %p = bm.pow %x, %c3 : tensor<2x8xf32>, tensor<f32>
  %c = bm.constant dense<0.05> : tensor<f32>
  %m = bm.mul %p, %c : tensor<2x8xf32>, tensor<f32>
  %a = bm.add %x, %m : tensor<2x8xf32>, tensor<2x8xf32>
  %k = bm.constant dense<0.797884583> : tensor<f32>
  %u = bm.mul %a, %k : tensor<2x8xf32>, tensor<f32>
  %t = bm.tanh %u : tensor<2x8xf32>
  %one = bm.constant dense<1.0> : tensor<f32>
  %s = bm.add %t, %one : tensor<2x8xf32>, tensor<f32>
  %xs = bm.mul %x, %s : tensor<2x8xf32>, tensor<2x8xf32>
  %half = bm.constant dense<0.5> : tensor<f32>
  %y = bm.mul %xs, %half : tensor<2x8xf32>, tensor<f32>
  return %y : tensor<2x8xf32>
}

// -----

// torch's exact GELU (ViT, BERT): x * (1 + erf(x / sqrt(2))) * 0.5; the
// attribute is false, its default, and not printed.
// CHECK-LABEL: func.func @erf_form
// CHECK-NEXT: %[[G:.*]] = bm.gelu %arg0 : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @erf_form(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %r2 = bm.constant dense<1.41421354> : tensor<f32>
  %d = bm.div %x, %r2 : tensor<2x8xf32>, tensor<f32>
  %e = bm.erf %d : tensor<2x8xf32>
  %one = bm.constant dense<1.0> : tensor<f32>
  %s = bm.add %e, %one : tensor<2x8xf32>, tensor<f32>
  %xs = bm.mul %x, %s : tensor<2x8xf32>, tensor<2x8xf32>
  %half = bm.constant dense<0.5> : tensor<f32>
  %y = bm.mul %xs, %half : tensor<2x8xf32>, tensor<f32>
  return %y : tensor<2x8xf32>
}

// -----

// The scale written as a product by 1/sqrt(2), the half first.
// CHECK-LABEL: func.func @erf_times_inverse
// CHECK-NEXT: %[[G:.*]] = bm.gelu %arg0 :
// CHECK-NEXT: return %[[G]]
func.func @erf_times_inverse(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = bm.constant dense<0.5> : tensor<f32>
  %h = bm.mul %half, %x : tensor<f32>, tensor<2x8xf32>
  %k = bm.constant dense<0.707106769> : tensor<f32>
  %d = bm.mul %x, %k : tensor<2x8xf32>, tensor<f32>
  %e = bm.erf %d : tensor<2x8xf32>
  %one = bm.constant dense<1.0> : tensor<f32>
  %s = bm.add %one, %e : tensor<f32>, tensor<2x8xf32>
  %y = bm.mul %h, %s : tensor<2x8xf32>, tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// erf of x / 2 is not GELU: left alone.
// CHECK-LABEL: func.func @erf_not_gelu
// CHECK-NOT: bm.gelu
// CHECK: bm.erf
func.func @erf_not_gelu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %two = bm.constant dense<2.0> : tensor<f32>
  %d = bm.div %x, %two : tensor<2x8xf32>, tensor<f32>
  %e = bm.erf %d : tensor<2x8xf32>
  %one = bm.constant dense<1.0> : tensor<f32>
  %s = bm.add %e, %one : tensor<2x8xf32>, tensor<f32>
  %xs = bm.mul %x, %s : tensor<2x8xf32>, tensor<2x8xf32>
  %half = bm.constant dense<0.5> : tensor<f32>
  %y = bm.mul %xs, %half : tensor<2x8xf32>, tensor<f32>
  return %y : tensor<2x8xf32>
}
