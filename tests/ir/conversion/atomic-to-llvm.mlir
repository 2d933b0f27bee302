// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm | FileCheck %s

// tile.atomic_rmw add whose old values nobody reads is a reduction (red.global: no
// value travels back to the thread); one whose result is used stays atom.global and
// its result is stored. 128 f32 elements on 4 warps: one per thread.

// CHECK-LABEL: llvm.func @accumulate
// CHECK: @p red.global.add.f32 [$0], $2;
// CHECK-NOT: atom.global
// CHECK: llvm.return
func.func @accumulate(%x: !tile.ptr<f32>, %v: f32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %r = tile.arange 0 to 128 : tensor<128xi32>
  %base = tile.splat %x : !tile.ptr<f32> -> tensor<128x!tile.ptr<f32>>
  %ptrs = tile.addptr %base, %r : tensor<128x!tile.ptr<f32>>, tensor<128xi32>
  %vals = tile.splat %v : f32 -> tensor<128xf32>
  %old = tile.atomic_rmw add %ptrs, %vals : tensor<128x!tile.ptr<f32>>, tensor<128xf32> -> tensor<128xf32>
  return
}

// -----

// CHECK-LABEL: llvm.func @fetch_add
// CHECK: @p atom.global.add.f32 $0, [$1], $3;
// CHECK-NOT: red.global
// CHECK: st.global
func.func @fetch_add(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %v: f32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %r = tile.arange 0 to 128 : tensor<128xi32>
  %base = tile.splat %x : !tile.ptr<f32> -> tensor<128x!tile.ptr<f32>>
  %ptrs = tile.addptr %base, %r : tensor<128x!tile.ptr<f32>>, tensor<128xi32>
  %vals = tile.splat %v : f32 -> tensor<128xf32>
  %old = tile.atomic_rmw add %ptrs, %vals : tensor<128x!tile.ptr<f32>>, tensor<128xf32> -> tensor<128xf32>
  %c0 = arith.constant 0 : i32
  tile.block_store %y[%c0], %old {dims = array<i64: 128>, strides = array<i64: 1>} : <f32>, tensor<128xf32>
  return
}

// -----

// tile.block_atomic_add of a dot result: the [64, 64] f32 mma accumulator (4 warps along
// M) goes into block [1, 64, 1, 64] of a [2, 100, 3, 64] tensor straight from the
// registers that hold it: 32 red.global.add per thread, each with its own bounds test,
// and no trip through shared memory after the dot.

// CHECK-LABEL: llvm.func @accumulate_dot
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: {{st.shared|llvm.store|nvvm.barrier0}}
// CHECK-COUNT-32: @p red.global.add.f32 [$0], $2;
// CHECK-NOT: red.global
// CHECK: llvm.return
func.func @accumulate_dot(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>, %row: i32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %ta = tile.block_load %a[%c0, %c0] {dims = array<i64: 64, 16>, strides = array<i64: 16, 1>} : !tile.ptr<bf16> -> tensor<64x16xbf16>
  %tb = tile.block_load %b[%c0, %c0] {dims = array<i64: 16, 64>, strides = array<i64: 64, 1>} : !tile.ptr<bf16> -> tensor<16x64xbf16>
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %d = tile.dot %ta, %tb, %acc : tensor<64x16xbf16>, tensor<16x64xbf16> -> tensor<64x64xf32>
  tile.block_atomic_add %c[%c1, %row, %c1, %c0], %d {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>} : !tile.ptr<f32>, tensor<64x64xf32>
  return
}
