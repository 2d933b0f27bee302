// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-allocate-shared | FileCheck %s

// Layouts come from -tile-assign-layouts (as in the pipeline): laid-out IR cannot be
// written by hand because #tile.blocked does not parse back (see layout-roundtrip.mlir).
//
// Scratch is transient, so a kernel's tile.shared_bytes is the largest single need,
// rounded up to 16 bytes.

// A row reduction whose rows stay inside one warp (bf16 4x256: 32 lanes x 8 registers
// per row, one row per warp) needs no scratch.

// CHECK-LABEL: func.func @reduce_inside_warp
// CHECK-SAME: tile.shared_bytes = 0 : i64
func.func @reduce_inside_warp(%x: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2 = tile.reduce sum %1 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  return
}

// -----

// f32 2x2048 over 8 warps: warpsPerCTA = [2, 4], so 4 warps split each row. Each writes
// one partial per row: 4 warps x 2 rows x 4 bytes = 32 bytes.

// CHECK-LABEL: func.func @reduce_across_warps
// CHECK-SAME: tile.shared_bytes = 32 : i64
func.func @reduce_across_warps(%x: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %1 = tile.reduce max %0 axis = 1 : tensor<2x2048xf32> -> tensor<2xf32>
  return
}

// -----

// argmax also keeps an i32 index per partial: 4 x 2 x (4 + 4) = 64 bytes.

// CHECK-LABEL: func.func @argmax_across_warps
// CHECK-SAME: tile.shared_bytes = 64 : i64
func.func @argmax_across_warps(%x: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %1 = tile.reduce argmax %0 axis = 1 : tensor<2x2048xf32> -> tensor<2xi32>
  return
}

// -----

// Only warps holding distinct elements count: f16 512 over 8 warps of 32 lanes x 8
// registers spans 2 warps (the other 6 hold replicas): 2 x 1 x 2 = 4 bytes, rounded up
// to 16.

// CHECK-LABEL: func.func @reduce_replicated_warps
// CHECK-SAME: tile.shared_bytes = 16 : i64
func.func @reduce_replicated_warps(%x: !tile.ptr<f16>) -> f16 attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0] {dims = array<i64: 512>, strides = array<i64: 1>} : <f16> -> tensor<512xf16>
  %1 = tile.reduce sum %0 axis = 0 : tensor<512xf16> -> f16
  return %1 : f16
}

// -----

// A layout conversion moves the whole tile through scratch: the f32 64x64 tile loaded
// with 4-wide vectors is converted to the 8-wide layout of the bf16 tile it is added
// to (64 x 64 x 4 = 16384 bytes); the largest user wins over the 32-byte reduction.

// CHECK-LABEL: func.func @convert_layout
// CHECK-SAME: tile.shared_bytes = 16384 : i64
// CHECK: tile.convert_layout
func.func @convert_layout(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %1 = tile.cast %0 : tensor<64x64xbf16> to tensor<64x64xf32>
  %2 = tile.block_load %y[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<64x64xf32>
  %3 = arith.addf %1, %2 : tensor<64x64xf32>
  %4 = tile.block_load %y[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %5 = tile.reduce max %4 axis = 1 : tensor<2x2048xf32> -> tensor<2xf32>
  return
}

// -----

// A reshape that moves elements between threads goes through scratch (32 x 64 x 4
// bytes); users inside loops count.

// CHECK-LABEL: func.func @reshape_in_loop
// CHECK-SAME: tile.shared_bytes = 8192 : i64
func.func @reshape_in_loop(%x: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  scf.for %i = %c0 to %n step %c1 : i32 {
    %0 = tile.block_load %x[%i, %c0] {dims = array<i64: 1024, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
    %1 = tile.reshape %0 : tensor<32x64xf32> -> tensor<8x256xf32>
  }
  return
}

// -----

// Each kernel of a module gets its own size.

// CHECK-LABEL: func.func @first
// CHECK-SAME: tile.shared_bytes = 32 : i64
// CHECK-LABEL: func.func @second
// CHECK-SAME: tile.shared_bytes = 0 : i64
func.func @first(%x: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %1 = tile.reduce sum %0 axis = 1 : tensor<2x2048xf32> -> tensor<2xf32>
  return
}
func.func @second(%x: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  return
}

// -----

// Without layouts (the pass run on its own), reductions need nothing; reshapes are
// sized from their result type alone (32 x 32 x 4 bytes). With layouts this reshape
// only renames registers and the cross-warp reduction alone needs scratch.

// RUN: tokamax-opt %s -split-input-file -tile-allocate-shared | FileCheck %s --check-prefix=ALONE
// ALONE-LABEL: func.func @no_layouts
// ALONE-SAME: tile.shared_bytes = 4096 : i64
// CHECK-LABEL: func.func @no_layouts
// CHECK-SAME: tile.shared_bytes = 32 : i64
func.func @no_layouts(%x: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %1 = tile.reduce sum %0 axis = 1 : tensor<2x2048xf32> -> tensor<2xf32>
  %2 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 32>, strides = array<i64: 32, 1>} : <f32> -> tensor<32x32xf32>
  %3 = tile.reshape %2 : tensor<32x32xf32> -> tensor<1024xf32>
  return
}
