// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s

// A warp-specialized loop over tiles holding a loop of K steps split between the roles
// (DSL Kernel::specialized_steps; LowerSpecializedLoop.cpp). The producer's copy, run by
// its first thread alone (thread 128: a thread that only waited could miss a phase), keeps
// both loops with only the marked ops in the inner one (its wait on the slot's release
// and the two TMA copies), nothing carried; the consumers' copy keeps both loops too,
// the inner one carrying the accumulator (wait for the copies, products, release), and
// stores each tile after its steps, inside the outer loop.

// CHECK-LABEL: llvm.func @tiles_of_steps
// CHECK: arith.cmpi uge
// CHECK-NEXT: scf.if
// CHECK: %[[FIRST:.*]] = arith.cmpi eq, %{{.*}}, %c128_i32
// CHECK-NEXT: scf.if %[[FIRST]]
// CHECK-NEXT: scf.for
// CHECK-NOT: wgmma.mma_async
// CHECK: scf.for
// CHECK-NOT: wgmma.mma_async
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: wgmma.mma_async
// CHECK: cp.async.bulk.tensor.2d
// CHECK-NOT: wgmma.mma_async
// CHECK: cp.async.bulk.tensor.2d
// CHECK-NOT: wgmma.mma_async
// CHECK: arith.cmpi ult
// CHECK-NEXT: scf.if
// CHECK-NEXT: scf.for
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: scf.for {{.*}} iter_args
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: @p mbarrier.arrive.shared::cta.b64
// CHECK: scf.yield
// CHECK-NOT: scf.yield
// CHECK: st.global.v4.b32
func.func @tiles_of_steps(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 1, 128, 128>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = tile.splat %z : f32 -> tensor<64x64xf32>
  scf.for %t = %c0 to %c3 step %c1 : i32 {
    %first = arith.muli %t, %c2 : i32
    %r = scf.for %s = %c0 to %c2 step %c1 iter_args(%acc = %acc0) -> (tensor<64x64xf32>) : i32 {
      %i = arith.addi %first, %s {tile.producer} : i32
      %slot = arith.remui %i, %c2 {tile.producer} : i32
      %free = arith.addi %slot, %c2 {tile.producer} : i32
      tile.mbarrier_wait %free, %c0 {tile.producer}
      %k0 = arith.muli %s, %c64 {tile.producer} : i32
      %m0 = arith.muli %t, %c64 {tile.producer} : i32
      %at = tile.async_block_load %a[%m0, %k0] slot %slot barrier %slot {tile.producer, dims = array<i64: 192, 128>, strides = array<i64: 128, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
      %bt = tile.async_block_load %b[%c0, %k0] slot %slot barrier %slot {tile.producer, dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
      %j = arith.addi %first, %s : i32
      %full = arith.remui %j, %c2 : i32
      tile.mbarrier_wait %full, %c0
      %bT = tile.trans %bt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
      %d = tile.dot %at, %bT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
      %release = arith.addi %full, %c2 : i32
      tile.mbarrier_arrive %release
      scf.yield %d : tensor<64x64xf32>
    }
    %m = arith.muli %t, %c64 : i32
    tile.block_store %o[%m, %c0], %r {dims = array<i64: 192, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  } {tile.warp_specialize}
  return
}
