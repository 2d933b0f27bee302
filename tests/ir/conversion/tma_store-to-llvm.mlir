// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s
// RUN: tokamax-opt %s -split-input-file | tokamax-opt -split-input-file | FileCheck %s --check-prefix=ROUNDTRIP --strict-whitespace

// tile.tma_store (LowerTmaStore.cpp) of a bf16 [128, 128] product: two strips of 64
// columns. The kernel gets a tensor map for c (box [128 rows][64 columns], after a's and
// b's) and a 1024-byte aligned scratch; per strip thread 0 waits until at most one bulk
// group still reads its buffer, a barrier, every thread writes its pairs into the
// swizzled strip (4-byte shared stores), fences the async proxy, a barrier, then thread 0
// issues the TMA store and commits the group. Before returning, thread 0 waits for every
// group.

// CHECK: llvm.mlir.global external @store_scratch() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK-LABEL: llvm.func @store
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 0, 1, 64, 128, 128, 0, 2, 64, 128, 128, 0>
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: cp.async.bulk.wait_group.read 1;
// CHECK: nvvm.barrier0
// CHECK: llvm.store {{.*}} {alignment = 4 : i64} : vector<2xbf16>, !llvm.ptr<3>
// CHECK: fence.proxy.async.shared::cta;
// CHECK: nvvm.barrier0
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];
// CHECK: cp.async.bulk.commit_group;
// CHECK: cp.async.bulk.wait_group.read 1;
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// CHECK: cp.async.bulk.commit_group;
// CHECK-NOT: cp.async.bulk.tensor.2d.global
// CHECK: cp.async.bulk.wait_group 0;
// CHECK-NEXT: }
// CHECK: llvm.return
func.func @store(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 128, 256>, b_dims = array<i64: 128, 256>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  %h = tile.cast %r : tensor<128x128xf32> to tensor<128x128xbf16>
  tile.tma_store %c[%c0, %c0], %h {dims = array<i64: 100, 120>} : <bf16>, tensor<128x128xbf16>
  return
}

// -----

// An odd number of strips (one, bf16 [64, 64] from one warpgroup): the first strip
// waits for every earlier group to have been read, as the last one before it may have
// used the same buffer. f32 strips (32 columns) take 8-byte pairs.

// CHECK-LABEL: llvm.func @odd_strips
// CHECK: cp.async.bulk.wait_group.read 0;
// CHECK-COUNT-1: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
// CHECK: cp.async.bulk.wait_group.read 1;
// CHECK: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// CHECK-COUNT-2: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group
func.func @odd_strips(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<bf16>, %d: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 64 : i64, stages = 2 : i64, trans_a = false, trans_b = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  %h = tile.cast %r : tensor<64x64xf32> to tensor<64x64xbf16>
  tile.tma_store %c[%c0, %c0], %h {dims = array<i64: 64, 64>} : <bf16>, tensor<64x64xbf16>
  tile.tma_store %d[%c0, %c0], %r {dims = array<i64: 64, 64>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// The add kind (f32 only): the same strips, buffers, barriers and bulk groups, each strip
// handed to TMA's reduce-add instead of its store, which adds it into the tensor (rows
// and columns outside it dropped). A plain store prints no kind; the add a leading `add`.
// f32 pairs rotate by the row's parity (odd rows write the pair 16 columns on, 64 bytes
// on mod 128, so a half-warp's 8-byte stores reach all 16 slots of a row's banks): a
// select of the values and of the byte before the swizzle.

// ROUNDTRIP-LABEL: func.func @add
// ROUNDTRIP: tile.tma_store add %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {dims = array<i64: 100, 72>} : <f32>, tensor<64x64xf32>
// ROUNDTRIP-NEXT: tile.tma_store %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}} {dims = array<i64: 100, 72>} : <f32>, tensor<64x64xf32>

// CHECK-LABEL: llvm.func @add
// CHECK: cp.async.bulk.wait_group.read 1;
// CHECK: nvvm.barrier0
// CHECK: %[[ODD:.*]] = arith.andi %{{.*}}, %c1_i32{{.*}} : i32
// CHECK: %[[IS_ODD:.*]] = arith.cmpi ne, %[[ODD]], %{{.*}} : i32
// CHECK: arith.select %[[IS_ODD]], %{{.*}}#8, %{{.*}}#0 : f32
// CHECK: arith.select %[[IS_ODD]], %{{.*}}#9, %{{.*}}#1 : f32
// CHECK: arith.muli %[[ODD]], %c64_i32{{.*}} : i32
// CHECK: llvm.store {{.*}} {alignment = 8 : i64} : vector<2xf32>, !llvm.ptr<3>
// CHECK: fence.proxy.async.shared::cta;
// CHECK: nvvm.barrier0
// CHECK: cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [$0, {$1, $2}], [$3];
// CHECK-NEXT: cp.async.bulk.commit_group;
// CHECK: cp.async.bulk.wait_group.read 1;
// CHECK: cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [$0, {$1, $2}], [$3];
// CHECK-NEXT: cp.async.bulk.commit_group;
// CHECK-NOT: cp.reduce.async.bulk.tensor
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];
// CHECK: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [$0, {$1, $2}], [$3];
// CHECK-NOT: cp.reduce.async.bulk.tensor
// CHECK: cp.async.bulk.wait_group 0;
// CHECK: llvm.return
func.func @add(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %d: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c40 = arith.constant 40 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 64 : i64, stages = 2 : i64, trans_a = false, trans_b = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  tile.tma_store add %d[%c40, %c40], %r {dims = array<i64: 100, 72>} : <f32>, tensor<64x64xf32>
  tile.tma_store %d[%c0, %c0], %r {dims = array<i64: 100, 72>} : <f32>, tensor<64x64xf32>
  return
}
