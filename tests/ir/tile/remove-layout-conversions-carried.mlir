// RUN: tokamax-opt %s -split-input-file -tile-remove-layout-conversions | FileCheck %s

// tile-remove-layout-conversions, rule 5: loop-carried tiles take the layout their uses
// want (beside remove-layout-conversions.mlir, whose second RUN line would first give
// these hand-written layouts to tile-assign-layouts).

#a = #tile.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 5: row statistics loaded a step ahead and carried through a warp-specialized loop
// are carried in the layout their uses want. Rule 2 alone would convert each argument at
// every step (the first through the masking and scaling on it, which is rebuilt in #b
// too); instead the loads before the loop and in it are read in #b and no conversion is
// left in the loop. The second's result, used after the loop in #a, is converted there.

// CHECK-LABEL: func.func @carried_ahead
// CHECK: %[[L0:.*]] = tile.block_load %{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK: %[[D0:.*]] = tile.block_load %{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: %[[R:.*]]:3 = scf.for {{.*}} iter_args(%{{[^ ]*}} = %{{[^ ]*}}, %[[L:[^ ]*]] = %[[L0]], %[[D:[^ ]*]] = %[[D0]]) -> (tensor<128xf32, #tile.blocked<{sizePerThread = [4]{{.*}}>>, tensor<128xf32, #tile.blocked<{sizePerThread = [4]{{.*}}>>, tensor<128xf32, #tile.blocked<{sizePerThread = [4]{{.*}}>>)
// CHECK-NOT: tile.convert_layout
// CHECK: %[[LN:.*]] = tile.block_load %{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: %[[DN:.*]] = tile.block_load %{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: arith.select %{{.*}}, %[[L]], %{{.*}} : tensor<128xi1, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: arith.addf %{{.*}}, %[[D]] : tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: scf.yield %{{.*}}, %[[LN]], %[[DN]]
// CHECK-NEXT: } {tile.warp_specialize}
// CHECK-NEXT: %[[B:.*]] = tile.convert_layout %[[R]]#2 : tensor<128xf32, #tile.blocked<{sizePerThread = [4]{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [1]
// CHECK-NEXT: return %[[R]]#0, %[[B]]
func.func @carried_ahead(%lse: !tile.ptr<f32>, %delta: !tile.ptr<f32>, %n: i32) -> (tensor<128xf32, #b>, tensor<128xf32, #a>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c1000 = arith.constant 1000 : i32
  %init = arith.constant dense<0.0> : tensor<128xf32, #b>
  %l0 = tile.block_load %lse[%c0] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
  %d0 = tile.block_load %delta[%c0] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
  %r:3 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init, %l = %l0, %d = %d0) -> (tensor<128xf32, #b>, tensor<128xf32, #a>, tensor<128xf32, #a>) : i32 {
    %i1 = arith.addi %i, %c1 : i32
    %t1 = arith.muli %i1, %c128 : i32
    %ln = tile.block_load %lse[%t1] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
    %dn = tile.block_load %delta[%t1] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
    // lse: rows past the end masked (+inf), scaled, then wanted in #b.
    %t0 = arith.muli %i, %c128 : i32
    %rows = tile.arange 0 to 128 : tensor<128xi32, #a>
    %s = tile.splat %t0 : i32 -> tensor<128xi32, #a>
    %row = arith.addi %s, %rows : tensor<128xi32, #a>
    %end = tile.splat %c1000 : i32 -> tensor<128xi32, #a>
    %in = arith.cmpi slt, %row, %end : tensor<128xi32, #a>
    %inf = arith.constant dense<0x7F800000> : tensor<128xf32, #a>
    %masked = arith.select %in, %l, %inf : tensor<128xi1, #a>, tensor<128xf32, #a>
    %k = arith.constant dense<1.442695e+00> : tensor<128xf32, #a>
    %scaled = arith.mulf %masked, %k : tensor<128xf32, #a>
    %lb = tile.convert_layout %scaled : tensor<128xf32, #a> -> tensor<128xf32, #b>
    // delta: wanted in #b as it is.
    %db = tile.convert_layout %d : tensor<128xf32, #a> -> tensor<128xf32, #b>
    %0 = arith.addf %acc, %lb : tensor<128xf32, #b>
    %1 = arith.addf %0, %db : tensor<128xf32, #b>
    scf.yield %1, %ln, %dn : tensor<128xf32, #b>, tensor<128xf32, #a>, tensor<128xf32, #a>
  } {tile.warp_specialize}
  return %r#0, %r#2 : tensor<128xf32, #b>, tensor<128xf32, #a>
}

// An initial value that is not built in #b at no cost (an argument) is converted once,
// before the loop; a next value that is not either (a load too long to read again)
// keeps the conversion in the loop.

// CHECK-LABEL: func.func @carried_init_converted
// CHECK: %[[C:.*]] = tile.convert_layout %{{.*}} : tensor<128xf32, #tile.blocked<{sizePerThread = [1]{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NEXT: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %[[C]]) -> (tensor<128xf32, #tile.blocked<{sizePerThread = [4]{{.*}}>>, tensor<128xf32, #tile.blocked<{sizePerThread = [4]{{.*}}>>)
// CHECK-NOT: tile.convert_layout
// CHECK: scf.yield
func.func @carried_init_converted(%p: !tile.ptr<f32>, %x0: tensor<128xf32, #a>, %n: i32) -> tensor<128xf32, #b> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %init = arith.constant dense<0.0> : tensor<128xf32, #b>
  %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init, %x = %x0) -> (tensor<128xf32, #b>, tensor<128xf32, #a>) : i32 {
    %xn = tile.block_load %p[%i] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
    %xb = tile.convert_layout %x : tensor<128xf32, #a> -> tensor<128xf32, #b>
    %0 = arith.addf %acc, %xb : tensor<128xf32, #b>
    scf.yield %0, %xn : tensor<128xf32, #b>, tensor<128xf32, #a>
  }
  return %r#0 : tensor<128xf32, #b>
}

// CHECK-LABEL: func.func @carried_long_load_stays
// CHECK: scf.for {{.*}} -> (tensor<512xf32, #tile.blocked<{sizePerThread = [4]{{.*}}>>, tensor<512xf32, #tile.blocked<{sizePerThread = [1]{{.*}}>>)
// CHECK: tile.convert_layout
// CHECK: scf.yield
func.func @carried_long_load_stays(%p: !tile.ptr<f32>, %n: i32) -> tensor<512xf32, #b> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %init = arith.constant dense<0.0> : tensor<512xf32, #b>
  %x0 = tile.block_load %p[%c0] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<512xf32, #a>
  %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init, %x = %x0) -> (tensor<512xf32, #b>, tensor<512xf32, #a>) : i32 {
    %xn = tile.block_load %p[%i] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<512xf32, #a>
    %xb = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
    %0 = arith.addf %acc, %xb : tensor<512xf32, #b>
    scf.yield %0, %xn : tensor<512xf32, #b>, tensor<512xf32, #a>
  }
  return %r#0 : tensor<512xf32, #b>
}
