// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-allocate-shared | FileCheck %s --check-prefix=SMEM
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-allocate-shared -tile-insert-barriers | FileCheck %s --check-prefix=BAR

// tile.tma_dot (the Hopper main loop): -tile-assign-layouts gives its result, and its
// accumulator (converted there from the splat's blocked layout), the mma layout with
// every warp along M (warpsPerCTA = [num_warps, 1]: each warpgroup owns 64-row slabs, as
// wgmma writes them). -tile-allocate-shared reserves the op's ring (getTmaDotSmem in
// LayoutUtils.cpp), at a 1 KiB-aligned offset (the swizzle's alignment): `stages` stages
// of A's [BM, 64] and B's [64, BN] slices (each stage rounded up to 1 KiB) and a full and
// an empty mbarrier (8 bytes each) per stage.

// 128x256 bf16, 4 stages: a stage is (128 * 64 + 64 * 256) * 2 = 49152 bytes, so
// 4 * 49152 + 16 * 4 = 196672 (more than the 131072 the accumulator's
// conversion needs).

// CHECK-LABEL: func.func @tma_dot_w8
// CHECK-SAME: tile.num_warps = 8 : i32
// CHECK: %[[ACC:.*]] = tile.convert_layout %{{.*}} : tensor<128x256xf32, #tile.blocked<{{.*}}>> -> tensor<128x256xf32, #tile.mma<{warpsPerCTA = [8, 1]}>>
// CHECK: tile.tma_dot %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}], %[[ACC]] {{.*}} : <bf16>, <bf16>, tensor<128x256xf32, #tile.mma<{warpsPerCTA = [8, 1]}>>
// SMEM-LABEL: func.func @tma_dot_w8
// SMEM-SAME: tile.shared_bytes = 196672 : i64
func.func @tma_dot_w8(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

// Transposes change neither the layout nor the ring. f16 128x128, 6 stages: a stage is
// (128 * 64 + 64 * 128) * 2 = 32768 bytes: 6 * 32768 + 16 * 6 = 196704.

// CHECK-LABEL: func.func @tma_dot_f16_transposed
// CHECK: tile.tma_dot {{.*}} : <f16>, <f16>, tensor<128x128xf32, #tile.mma<{warpsPerCTA = [8, 1]}>>
// SMEM-LABEL: func.func @tma_dot_f16_transposed
// SMEM-SAME: tile.shared_bytes = 196704 : i64
func.func @tma_dot_f16_transposed(%a: !tile.ptr<f16>, %b: !tile.ptr<f16>) attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 320, 256>, b_dims = array<i64: 512, 320>, block_k = 64 : i64, stages = 6 : i64, trans_a = true, trans_b = true} : !tile.ptr<f16>, !tile.ptr<f16>, tensor<128x128xf32>
  return
}

// -----

// 4 warps (one warpgroup), 64x64, 2 stages: (64 * 64 + 64 * 64) * 2 = 16384 bytes a
// stage: 2 * 16384 + 16 * 2 = 32800.

// CHECK-LABEL: func.func @tma_dot_w4
// CHECK: %[[ACC:.*]] = tile.convert_layout {{.*}} -> tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>
// CHECK: tile.tma_dot {{.*}}, %[[ACC]] {{.*}} : <bf16>, <bf16>, tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>
// SMEM-LABEL: func.func @tma_dot_w4
// SMEM-SAME: tile.shared_bytes = 32800 : i64
func.func @tma_dot_w4(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 64 : i64, stages = 2 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  return
}

// -----

// Warp-specialized in a persistent loop: the ring is in use while the rest of the loop
// body runs (the producer loads the next tile meanwhile), so -tile-allocate-shared puts
// it after every other scratch user, 1 KiB-aligned: after the accumulator's conversion
// (131072 bytes at 0; canonicalization would fold it), 131072 + 196672 = 327744 bytes in
// all. The conversion of the loop-invariant accumulator sits before the loop;
// -tile-insert-barriers puts a barrier before the reduction, none before the tma_dot: its
// mbarriers order the ring.

// SMEM-LABEL: func.func @tma_dot_specialized_persistent
// SMEM-SAME: tile.shared_bytes = 327744 : i64
// SMEM: tile.tma_dot {{.*}}tile.scratch_offset = 131072 : i64{{.*}}warp_specialize = true
// BAR-LABEL: func.func @tma_dot_specialized_persistent
// BAR: tile.convert_layout
// BAR-NEXT: scf.for
// BAR-NEXT: tile.tma_dot
// BAR-NEXT: tile.barrier
// BAR-NEXT: tile.reduce
func.func @tma_dot_specialized_persistent(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  scf.for %i = %c0 to %c4 step %c1 : i32 {
    %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
    %s = tile.reduce sum %r axis = 0 : tensor<128x256xf32> -> tensor<256xf32>
  }
  return
}
