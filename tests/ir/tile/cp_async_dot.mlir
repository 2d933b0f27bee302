// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-allocate-shared | FileCheck %s --check-prefix=SMEM
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers | FileCheck %s --check-prefix=BAR

// tile.cp_async_dot (the sm_80 main loop): -tile-assign-layouts gives its result, and its
// accumulator, tile.dot's mma.sync layout over the kernel's warps (128 x 128 on 4 warps:
// 2 x 2 warps of 64 x 64). -tile-allocate-shared reserves its ring (getCpAsyncDotSmem):
// `stages` stages of A's [BM, block_k] and B's [block_k, BN] slices.

// 128x128 bf16, block_k 32, 4 stages: (128 * 32 + 32 * 128) * 2 * 4 = 65536 bytes.

// CHECK-LABEL: func.func @ring_w4
// CHECK: %[[ACC:.*]] = tile.convert_layout %{{.*}} : tensor<128x128xf32, #tile.blocked<{{.*}}>> -> tensor<128x128xf32, #tile.mma<{warpsPerCTA = [2, 2]}>>
// CHECK: tile.cp_async_dot %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}], %[[ACC]] {{.*}} : <bf16>, <bf16>, tensor<128x128xf32, #tile.mma<{warpsPerCTA = [2, 2]}>>
// SMEM-LABEL: func.func @ring_w4
// SMEM-SAME: tile.shared_bytes = 65536 : i64
func.func @ring_w4(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 32 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  return
}

// -----

// 8 warps over 64 x 128 (2 x 4 warps), f32 (tf32) transposed, block_k 16, 3 stages:
// (64 * 16 + 16 * 128) * 4 * 3 = 36864 bytes (more than the accumulator conversion's
// 32768).

// CHECK-LABEL: func.func @ring_f32_w8
// CHECK: tile.cp_async_dot {{.*}} : <f32>, <f32>, tensor<64x128xf32, #tile.mma<{warpsPerCTA = [2, 4]}>>
// SMEM-LABEL: func.func @ring_f32_w8
// SMEM-SAME: tile.shared_bytes = 36864 : i64
func.func @ring_f32_w8(%a: !tile.ptr<f32>, %b: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x128xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 40, 256>, b_dims = array<i64: 512, 40>, block_k = 16 : i64, stages = 3 : i64, trans_a = true, trans_b = true} : !tile.ptr<f32>, !tile.ptr<f32>, tensor<64x128xf32>
  return
}

// -----

// (Canonicalized: the accumulator splat is rebuilt in the mma layout, no conversion.)
// The ring is scratch like any other: a reduction before it may still be reading the
// shared region the prologue's copies overwrite, so -tile-insert-barriers puts a barrier
// between them, and one after it before the next reduction reuses the region.

// BAR-LABEL: func.func @after_reduce
// BAR: tile.block_load
// BAR-NEXT: tile.reduce
// BAR-NEXT: tile.splat
// BAR-NEXT: tile.barrier
// BAR-NEXT: tile.cp_async_dot
// BAR-NEXT: tile.barrier
// BAR-NEXT: tile.reduce
func.func @after_reduce(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %p: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %x = tile.block_load %p[%c0, %c0] {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<128x64xf32>
  %s = tile.reduce sum %x axis = 0 : tensor<128x64xf32> -> tensor<64xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 32 : i64, stages = 2 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  %t = tile.reduce sum %r axis = 0 : tensor<64x64xf32> -> tensor<64xf32>
  %u = arith.addf %s, %t : tensor<64xf32>
  tile.block_store %p[%c0], %u {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<64xf32>
  return
}
