// RUN: bmc-opt %s --bm-annotate=plan=%t.does-not-exist.json -verify-diagnostics -split-input-file
// RUN: echo '{"schema_version": 99}' > %t.v99.json
// RUN: not bmc-opt %s --bm-annotate=plan=%t.v99.json 2>&1 | FileCheck %s --check-prefix=VERSION

// A plan file that cannot be read, or is of another schema version, stops
// the pass with one error naming it.

// expected-error @below {{cannot read plan}}
module {
  func.func @main(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
    return %x : tensor<4x16xf32>
  }
}
// VERSION: error: plan '{{.*}}v99.json': {{.*}}schema{{.*}}99
