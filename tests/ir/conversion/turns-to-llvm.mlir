// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s

// Consumer warpgroups taking turns in a warp-specialized loop (tile.turn_wait /
// tile.turn_pass, LowerSpecializedLoop.cpp). With 8 consumer warps (two warpgroups) the
// consumers' branch first lets warpgroup 0 (warps 0-3) arrive on its own turn barrier
// (2); each step then waits on barrier 2 + w before its product and, after issuing it,
// arrives on the other warpgroup's barrier 2 + (w + 1) mod 2, all of 256 threads. The
// producer's copy has none of them.

// CHECK-LABEL: llvm.func @ping_pong
// CHECK: scf.if
// CHECK: scf.for
// CHECK-NOT: nvvm.barrier id
// CHECK-NOT: barrier.cta.arrive
// CHECK: cp.async.bulk.tensor.2d
// CHECK: arith.cmpi ult, %{{.*}}, %{{.*}} : i32
// CHECK: scf.if
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.arrive.aligned.count"
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK: arith.divui
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %{{.*}}
// CHECK: wgmma.mma_async
// CHECK: arith.remui
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.arrive.aligned.count"
// CHECK: @p mbarrier.arrive.shared::cta.b64
func.func @ping_pong(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 256>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = tile.splat %z : f32 -> tensor<128x64xf32>
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %acc0) -> (tensor<128x64xf32>) : i32 {
    %parity = arith.xori %c1, %c0 {tile.producer} : i32
    tile.mbarrier_wait %c1, %parity {tile.producer}
    %k0 = arith.muli %i, %c64 {tile.producer} : i32
    %at = tile.async_block_load %a[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 128, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 128, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<128x64xbf16>
    %bt = tile.async_block_load %b[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    tile.mbarrier_wait %c0, %c0
    tile.turn_wait
    %bT = tile.trans %bt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %s = tile.dot %at, %bT, %acc : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    tile.turn_pass
    tile.mbarrier_arrive %c1
    scf.yield %s : tensor<128x64xf32>
  } {tile.warp_specialize}
  tile.block_store %o[%c0, %c0], %r {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<128x64xf32>
  return
}

// -----

// One consumer warpgroup: always its turn, no barrier at all.

// CHECK-LABEL: llvm.func @one_warpgroup
// CHECK-NOT: barrier.cta.arrive
// CHECK-NOT: nvvm.barrier id
// CHECK: wgmma.mma_async
// CHECK-NOT: barrier.cta.arrive
// CHECK: llvm.return
func.func @one_warpgroup(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 128>, tile.grid = array<i64: 1, 1, 1>} {
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
    tile.turn_wait
    %bT = tile.trans %bt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %s = tile.dot %at, %bT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    tile.turn_pass
    tile.mbarrier_arrive %c1
    scf.yield %s : tensor<64x64xf32>
  } {tile.warp_specialize}
  tile.block_store %o[%c0, %c0], %r {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}
