// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s

// A loop split between warp roles (LowerSpecializedLoop.cpp). The kernel's 4 warps are the
// consumers; a producer warpgroup follows them (maxntid 256), so the launch gives each
// thread 255 registers and no rebalancing is needed. The producer's copy of the loop holds
// only the ops marked tile.producer: its wait on the slot's release (mbarrier 1) and the
// TMA copy, all run by its first thread (thread 128) alone, so the copy checks no thread
// of its own; nothing carried. The consumers' copy
// waits for the copy (mbarrier 0), multiplies with both operands from shared memory and
// releases the slot; the copy there is only its slot's address. The store after the loop
// is the consumers'.

// CHECK-LABEL: llvm.func @pipelined
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// CHECK: nvvm.shfl.sync idx
// CHECK: scf.if
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %{{.*}}, %c128_i32
// CHECK-NEXT: scf.if %[[FIRST]]
// CHECK: scf.for
// CHECK-NOT: wgmma.mma_async
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: arith.cmpi eq
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;
// CHECK: cp.async.bulk.tensor.2d
// CHECK-NOT: wgmma.mma_async
// CHECK: scf.if
// CHECK: scf.for
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}}, $32, $33, acc, 1, 1, 0, 0;
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: @p mbarrier.arrive.shared::cta.b64
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: st.global.v4.b32
func.func @pipelined(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 128>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %acc0) -> (tensor<64x64xf32>) : i32 {
    %parity = arith.xori %c1, %c0 {tile.producer} : i32
    tile.mbarrier_wait %c1, %parity {tile.producer}
    %k0 = arith.muli %i, %c64 {tile.producer} : i32
    %at = tile.async_block_load %a[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    %bt = tile.async_block_load %b[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    tile.mbarrier_wait %c0, %c0
    %bT = tile.trans %bt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %s = tile.dot %at, %bT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    tile.mbarrier_arrive %c1
    scf.yield %s : tensor<64x64xf32>
  } {tile.warp_specialize}
  tile.block_store %o[%c0, %c0], %r {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// Two blocks meant to share an SM (tile.blocks_per_sm = 2): 4 consumer warps and the
// producer warpgroup launch with 128 registers a thread (half the register file for 256
// threads), ptxas told of 2 blocks an SM, and the consumers take the 232 the producer's
// 24 leave of the block's share.

// CHECK-LABEL: llvm.func @two_blocks
// CHECK-SAME: nvvm.maxnreg = 128
// CHECK-SAME: nvvm.minctasm = 2
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK: nvvm.setmaxregister  increase 232
func.func @two_blocks(%p: !tile.ptr<f32>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.blocks_per_sm = 2 : i32, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c128 = arith.constant 128 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = tile.splat %z : f32 -> tensor<128xf32>
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %acc0) -> (tensor<128xf32>) : i32 {
    %t = arith.muli %i, %c128 : i32
    %x = tile.block_load %p[%t] {dims = array<i64: 1024>, strides = array<i64: 1>} : <f32> -> tensor<128xf32>
    %s = arith.addf %acc, %x : tensor<128xf32>
    scf.yield %s : tensor<128xf32>
  } {tile.warp_specialize}
  tile.block_store %o[%c0], %r {dims = array<i64: 128>, strides = array<i64: 1>} : <f32>, tensor<128xf32>
  return
}

// -----

// A value loaded before the loop only to enter it as a carried value is the consumers':
// loaded in their branch (after their setmaxnreg), not before the split, where it would
// be live through the producer's region and its 24 registers. The zero accumulator, a
// constant, stays before the split.

// CHECK-LABEL: llvm.func @carried_load
// CHECK-NOT: ld.global
// CHECK: nvvm.setmaxregister  decrease 24
// CHECK-NOT: ld.global
// CHECK: nvvm.setmaxregister  increase 240
// CHECK-NOT: scf.for
// CHECK: llvm.inline_asm {{.*}}ld.global
// CHECK: scf.for
// CHECK: llvm.inline_asm {{.*}}ld.global
func.func @carried_load(%p: !tile.ptr<f32>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c128 = arith.constant 128 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = tile.splat %z : f32 -> tensor<128xf32>
  %x0 = tile.block_load %p[%c0] {dims = array<i64: 1024>, strides = array<i64: 1>} : <f32> -> tensor<128xf32>
  %r:2 = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %acc0, %x = %x0) -> (tensor<128xf32>, tensor<128xf32>) : i32 {
    %i1 = arith.addi %i, %c1 : i32
    %t = arith.muli %i1, %c128 : i32
    %xn = tile.block_load %p[%t] {dims = array<i64: 1024>, strides = array<i64: 1>} : <f32> -> tensor<128xf32>
    %s = arith.addf %acc, %x : tensor<128xf32>
    scf.yield %s, %xn : tensor<128xf32>, tensor<128xf32>
  } {tile.warp_specialize}
  tile.block_store %o[%c0], %r#0 {dims = array<i64: 128>, strides = array<i64: 1>} : <f32>, tensor<128xf32>
  return
}
