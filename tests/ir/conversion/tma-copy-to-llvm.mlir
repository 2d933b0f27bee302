// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared | FileCheck %s --check-prefix=SMEM

// TMA copies and mbarriers (LowerAsyncCopy.cpp) feeding a wgmma with both operands in
// shared memory (LowerWgmmaDot.cpp). The kernel's two mbarriers (2 arrivals: the two
// copies; 256: every thread) sit after its shared buffers, 8 bytes each, and thread 0
// initializes them before anything else, then a block barrier. Each copy: thread 0
// arrives on barrier 0 expecting the block's bytes (128 x 64 x 2 = 16384) and issues one
// box per 128-byte panel (a: one [128][64] box; b's 256-byte rows: two [64][64] boxes,
// 8192 bytes apart). Both tensors' maps are appended as parameters (box inner 64, outer
// 128 and 64, 128-byte swizzle). The dot reads A and B through descriptors: no ldmatrix,
// no register A fragments (both descriptors are operands: $64, $65; transpose
// immediates 0 for K-major A, 1 for N-major B); each of the 2 warpgroups starts 64 rows
// (8192 bytes) further into A. A's descriptor: leading 16, stride 1024, 128-byte swizzle
// (0x4000004000010000); B's: leading = one 64-row panel (8192), stride 1024
// (0x4000004002000000).

// SMEM-LABEL: func.func @tma_ss
// SMEM-SAME: tile.mbarrier_offset = 49152 : i64
// SMEM-SAME: tile.shared_bytes = 49168 : i64

// CHECK-LABEL: llvm.func @tma_ss
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 0, 1, 64, 64, 128, 0>
// CHECK: "mbarrier.init.shared::cta.b64 [$0], 2;"
// CHECK: "mbarrier.init.shared::cta.b64 [$0], 256;"
// CHECK: fence.mbarrier_init.release.cluster
// CHECK: nvvm.barrier0
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// CHECK-COUNT-1: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// CHECK-COUNT-2: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK-NOT: ldmatrix
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK: llvm.mlir.constant(4611686293338849280 : i64) : i64
// CHECK: llvm.mlir.constant(4611686293305360384 : i64) : i64
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}}, $64, $65, acc, 1, 1, 0, 1;
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}}, $64, $65, acc, 1, 1, 0, 1;
// CHECK-NOT: {{ldmatrix|mma.sync|wgmma.mma_async}}
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: @p mbarrier.arrive.shared::cta.b64
func.func @tma_ss(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 2, 256>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %z = arith.constant 0.0 : f32
  %at = tile.async_block_load %a[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 1000, 64>, strides = array<i64: 64, 1>, block = array<i64: 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  %bt = tile.async_block_load %b[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 128>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x128xbf16>
  tile.mbarrier_wait %c0, %c0
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %s = tile.dot %at, %bt, %acc : tensor<128x64xbf16>, tensor<64x128xbf16> -> tensor<128x128xf32>
  tile.mbarrier_arrive %c1
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}

// -----

// The same with A a 3-D tensor [4, 1000, 64] copied a batch at a time: its map records
// the batch's 1000 rows (its fifth entry; 0 for B's 2-D map), and the copy addresses
// (column, row, batch) with a 3-D box, so rows past the batch's last read zeros.

// CHECK-LABEL: llvm.func @tma_batched
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 1000, 1, 64, 64, 128, 0>
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// CHECK-COUNT-1: "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4}], [$5];"
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;"
// CHECK-COUNT-2: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
func.func @tma_batched(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 2, 256>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c960 = arith.constant 960 : i32
  %z = arith.constant 0.0 : f32
  %at = tile.async_block_load %a[%c3, %c960, %c0] slot %c0 barrier %c0 {dims = array<i64: 4, 1000, 64>, strides = array<i64: 64000, 64, 1>, block = array<i64: 1, 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  %bt = tile.async_block_load %b[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 128>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x128xbf16>
  tile.mbarrier_wait %c0, %c0
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %s = tile.dot %at, %bt, %acc : tensor<128x64xbf16>, tensor<64x128xbf16> -> tensor<128x128xf32>
  tile.mbarrier_arrive %c1
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}
