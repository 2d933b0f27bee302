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
