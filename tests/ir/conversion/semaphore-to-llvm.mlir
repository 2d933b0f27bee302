// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm | FileCheck %s
// RUN: tokamax-opt %s -split-input-file | tokamax-opt -split-input-file | FileCheck %s --check-prefix=ROUNDTRIP

// tile.semaphore_wait / tile.semaphore_signal (LowerMemory.cpp) on counter (%i, %j) of a
// [4, 8] i32 tensor: thread 0 spins on ld.acquire.gpu until the counter holds %v, then a
// barrier releases the other threads; the program's store; a barrier (every thread's
// writes done), then thread 0 adds %v with red.release.gpu. No TMA stores: no bulk wait.

// CHECK-LABEL: llvm.func @ordered
// CHECK: %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x
// CHECK: llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<1>, i64) -> !llvm.ptr<1>, i32
// CHECK: arith.cmpi eq, %[[TID]]
// CHECK: scf.if
// CHECK-NEXT: scf.while
// CHECK-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l"
// CHECK-NEXT: arith.cmpi ne
// CHECK-NEXT: scf.condition
// CHECK: nvvm.barrier0
// CHECK: st.global
// CHECK-NOT: cp.async.bulk.wait_group
// CHECK: nvvm.barrier0
// CHECK: scf.if
// CHECK-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "red.release.gpu.global.add.s32 [$0], $1;", "l,r"
// CHECK: llvm.return

// ROUNDTRIP-LABEL: func.func @ordered
// ROUNDTRIP: tile.semaphore_wait %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
// ROUNDTRIP: tile.semaphore_signal %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
func.func @ordered(%s: !tile.ptr<i32>, %y: !tile.ptr<f32>, %i: i32, %j: i32, %v: i32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  tile.semaphore_wait %s[%i, %j], %v {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
  %c0 = arith.constant 0 : i32
  %x = arith.constant dense<1.0> : tensor<128xf32>
  tile.block_store %y[%c0], %x {dims = array<i64: 128>, strides = array<i64: 1>} : <f32>, tensor<128xf32>
  tile.semaphore_signal %s[%i, %j], %v {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
  return
}
