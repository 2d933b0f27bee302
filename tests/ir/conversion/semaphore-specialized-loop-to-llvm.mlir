// RUN: tokamax-opt %s -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s

// tile.semaphore_wait / tile.semaphore_signal inside a loop split between warp roles (the
// hopper attention VJP's ordered fused dq: each step waits for its turn at a counter,
// adds its product into an f32 sum by TMA, then counts itself in). They are the
// consumers' (unmarked ops with memory effects): the producer's copy of the loop holds
// neither. In the consumers' copy thread 0 (a consumer: the producer warpgroup follows
// the kernel's 4 warps) spins on ld.acquire.gpu and the barrier after it is the
// consumers' named barrier 1 of 128 threads, not the block's (the producer never reaches
// it); the signal waits for thread 0's bulk groups (the reduce-adds), the same named
// barrier, then thread 0's red.release.gpu.

// CHECK-LABEL: llvm.func @ordered_steps
// CHECK: %[[TID:.*]] = nvvm.read.ptx.sreg.tid.x
// Producer: its copy of the loop, no counter.
// CHECK: arith.cmpi eq, %[[TID]], %c128_i32
// CHECK: scf.for
// CHECK-NOT: {{ld.acquire|red.release|nvvm.barrier}}
// CHECK: cp.async.bulk.tensor.2d
// CHECK-NOT: {{ld.acquire|red.release|nvvm.barrier}}
// CHECK: cp.async.bulk.tensor.2d
// Consumers: the wait, the reduce-add, the signal.
// CHECK: scf.for
// CHECK: wgmma.mma_async
// CHECK: %[[WAITER:.*]] = arith.cmpi eq, %[[TID]], %c0_i32
// CHECK-NEXT: scf.if %[[WAITER]]
// CHECK-NEXT: scf.while
// CHECK-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "ld.acquire.gpu.global.b32 $0, [$1];", "=r,l"
// CHECK-NEXT: arith.cmpi ne
// CHECK-NEXT: scf.condition
// CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT: %[[N:.*]] = llvm.mlir.constant(128 : i32) : i32
// CHECK-NEXT: nvvm.barrier id = %[[ONE]] number_of_threads = %[[N]]
// CHECK-NOT: nvvm.barrier0
// CHECK: cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group
// CHECK-NOT: nvvm.barrier0
// CHECK: %[[SIGNALLER:.*]] = arith.cmpi eq, %[[TID]], %c0_i32
// CHECK-NEXT: scf.if %[[SIGNALLER]]
// CHECK-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "cp.async.bulk.wait_group 0;"
// CHECK: %[[ONE2:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT: %[[N2:.*]] = llvm.mlir.constant(128 : i32) : i32
// CHECK-NEXT: nvvm.barrier id = %[[ONE2]] number_of_threads = %[[N2]]
// CHECK-NEXT: scf.if %[[SIGNALLER]]
// CHECK-NEXT: llvm.inline_asm has_side_effects asm_dialect = att "red.release.gpu.global.add.s32 [$0], $1;", "l,r"
// CHECK-NOT: nvvm.barrier0
// CHECK: llvm.return
func.func @ordered_steps(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %sum: !tile.ptr<f32>, %order: !tile.ptr<i32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 128>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %zero = tile.splat %z : f32 -> tensor<64x64xf32>
  scf.for %i = %c0 to %c3 step %c1 : i32 {
    %parity = arith.xori %c1, %c0 {tile.producer} : i32
    tile.mbarrier_wait %c1, %parity {tile.producer}
    %k0 = arith.muli %i, %c64 {tile.producer} : i32
    %at = tile.async_block_load %a[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    %bt = tile.async_block_load %b[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    tile.mbarrier_wait %c0, %c0
    %bT = tile.trans %bt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %s = tile.dot %at, %bT, %zero : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    tile.mbarrier_arrive %c1
    tile.semaphore_wait %order[%i], %i {dims = array<i64: 3>, strides = array<i64: 1>} : <i32>
    tile.tma_store add %sum[%k0, %c0], %s {dims = array<i64: 192, 64>} : <f32>, tensor<64x64xf32>
    tile.semaphore_signal %order[%i], %c1 {dims = array<i64: 3>, strides = array<i64: 1>} : <i32>
    scf.yield
  } {tile.warp_specialize}
  return
}
