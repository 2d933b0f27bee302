// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-insert-barriers | FileCheck %s
// The pass is idempotent: a user already preceded by a barrier gets no second one.
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-insert-barriers -tile-insert-barriers | FileCheck %s

// Layouts come from -tile-assign-layouts (hand-written #tile.blocked does not parse, see
// layout-roundtrip.mlir). Scratch users: tile.reshape, tile.convert_layout (those that
// move elements between threads: [32, 64] -> [8, 256] does, [32, 64] -> [2048] renames
// registers) and reductions that cross warps.

// No barrier before the first user; one right before each later user; none before
// operations that do not use scratch (a reduction inside a warp).

// CHECK-LABEL: func.func @straight_line
// CHECK-NOT: tile.barrier
// CHECK: %[[A:.*]] = tile.reshape %{{.*}} -> tensor<8x256xf32
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: %[[B:.*]] = tile.reshape %[[A]] {{.*}} -> tensor<32x64xf32
// CHECK-NOT: tile.barrier
// CHECK: tile.reduce sum %{{.*}} axis = 1 : tensor<4x256xf32
// CHECK-NEXT: tile.block_load
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.reduce max %{{.*}} axis = 1 : tensor<2x2048xf32
// CHECK-NOT: tile.barrier
// CHECK: return
func.func @straight_line(%x: !tile.ptr<f32>, %y: !tile.ptr<bf16>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
  %2 = tile.reshape %1 : tensor<8x256xf32> -> tensor<32x64xf32>
  %3 = tile.block_load %y[%c0, %c0] {dims = array<i64: 8, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %4 = tile.cast %3 : tensor<4x256xbf16> to tensor<4x256xf32>
  %5 = tile.reduce sum %4 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  %6 = tile.block_load %x[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %7 = tile.reduce max %6 axis = 1 : tensor<2x2048xf32> -> tensor<2xf32>
  return
}

// -----

// A kernel with a single user needs no barrier.

// CHECK-LABEL: func.func @single_user
// CHECK-NOT: tile.barrier
// CHECK: tile.reshape
// CHECK-NOT: tile.barrier
// CHECK: return
func.func @single_user(%x: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
  return
}

// -----

// Inside a loop the previous iteration's user may still be reading: even the first
// user gets a barrier, inside the loop body. A user after the loop gets one too.

// CHECK-LABEL: func.func @loop
// CHECK-NOT: tile.barrier
// CHECK: scf.for
// CHECK-NEXT: tile.block_load
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.reshape
// CHECK-NEXT: {{^ *\}$}}
// CHECK-NEXT: tile.block_load
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.reshape
// CHECK-NOT: tile.barrier
// CHECK: return
func.func @loop(%x: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  scf.for %i = %c0 to %n step %c1 : i32 {
    %0 = tile.block_load %x[%i, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
    %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
  }
  %2 = tile.block_load %x[%c0, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %3 = tile.reshape %2 : tensor<32x64xf32> -> tensor<8x256xf32>
  return
}

// -----

// Conversions inserted by layout assignment are users too: here the f32 tile is
// converted to the carried bf16-derived layout twice per iteration (for the add and
// for the yield). Every one of them follows another user or sits in the loop.

// CHECK-LABEL: func.func @loop_conversions
// CHECK: scf.for
// CHECK: tile.block_load
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.convert_layout
// CHECK-NEXT: arith.addf
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.convert_layout
// CHECK-NEXT: scf.yield
func.func @loop_conversions(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %1, %last = %1) -> (tensor<4x256xf32>, tensor<4x256xf32>) : i32 {
    %3 = tile.block_load %y[%i, %c0] {dims = array<i64: 1024, 256>, strides = array<i64: 256, 1>} : <f32> -> tensor<4x256xf32>
    %4 = arith.addf %acc, %3 : tensor<4x256xf32>
    scf.yield %4, %3 : tensor<4x256xf32>, tensor<4x256xf32>
  }
  return
}

// -----

// A user inside an scf.if that follows another user is separated from it.

// CHECK-LABEL: func.func @branch
// CHECK-NOT: tile.barrier
// CHECK: tile.reshape
// CHECK-NOT: tile.barrier
// CHECK: scf.if
// CHECK-NEXT: tile.block_load
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.reshape
// CHECK-NOT: tile.barrier
// CHECK: return
func.func @branch(%x: !tile.ptr<f32>, %c: i1) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
  scf.if %c {
    %2 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
    %3 = tile.reshape %2 : tensor<32x64xf32> -> tensor<8x256xf32>
  }
  return
}

// -----

// A double-buffered user alternates between two buffers, so a fixed user of the same
// bytes in the loop is ordered after it by a barrier on every iteration (which buffer is
// this iteration's alternates): the back edge does not hide the conflict.

// CHECK-LABEL: func.func @fixed_after_double_buffered
// CHECK: scf.for
// CHECK-NEXT: tile.block_load
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.reshape %{{.*}} : tensor<32x64xf32
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: tile.reshape %{{.*}} {tile.scratch_stride = 8192 : i64}
func.func @fixed_after_double_buffered(%x: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  scf.for %i = %c0 to %n step %c1 : i32 {
    %0 = tile.block_load %x[%i, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
    %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
    %2 = tile.reshape %1 {tile.scratch_stride = 8192 : i64} : tensor<8x256xf32> -> tensor<32x64xf32>
  }
  return
}

// -----

// A loop whose user would overwrite what a user before the loop reads, where the back
// edge alone needs no barrier (each iteration's two users take disjoint regions, as
// -tile-allocate-shared gives attention's K and V blocks): one barrier before the loop,
// none inside it.

// CHECK-LABEL: func.func @barrier_before_loop
// CHECK: tile.reshape
// CHECK-NEXT: tile.barrier
// CHECK-NEXT: scf.for
// CHECK-NOT: tile.barrier
// CHECK: return
func.func @barrier_before_loop(%x: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
  scf.for %i = %c0 to %n step %c1 : i32 {
    %2 = tile.block_load %x[%i, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
    %3 = tile.reshape %2 {tile.scratch_offset = 0 : i64} : tensor<32x64xf32> -> tensor<8x256xf32>
    %4 = tile.block_load %x[%i, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
    %5 = tile.reshape %4 {tile.scratch_offset = 8192 : i64} : tensor<32x64xf32> -> tensor<8x256xf32>
    scf.yield
  }
  return
}
