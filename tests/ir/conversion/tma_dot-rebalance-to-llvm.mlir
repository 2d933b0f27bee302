// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s

// rebalance_registers (LowerTmaDot.cpp, splitLoop) on a persistent loop. The kernel
// gets a producer warpgroup (384 threads) and one 128-byte tensor map parameter per
// operand (grid constants; boxes [64 K] x [128 rows] for the K-major a and b). The ring's
// mbarriers are set up once, before the loop; then the warps split on their (shuffled,
// so warp-uniform) index and each role runs its own copy of the loop with its own
// register limit (launch 168 per thread: the producer drops to 40, the consumers take
// 232). The producer's first thread waits for a free stage, expects the stage's bytes
// and issues both TMA loads per K slice; its copy of the loop has no epilogue. The
// consumers wait for a full stage, fence, issue 4 wgmma per 64-wide slice, commit, wait
// for the previous group and release its stage with a predicated arrive (no branch
// near the .aligned instructions), then drain and release the last slice, and store
// (16 bytes per lane after a shuffle among lane pairs).

// CHECK-LABEL: llvm.func @rebalanced
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}
// CHECK-SAME: nvvm.maxnreg = 168 : i32, nvvm.maxntid = array<i32: 384, 1, 1>
// CHECK-SAME: tile.producer_warps = 4 : i32
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 0, 1, 64, 128, 128, 0>
// CHECK: mbarrier.init.shared::cta.b64 [$0], 1;
// CHECK: mbarrier.init.shared::cta.b64 [$0], 8;
// CHECK: fence.proxy.async.shared::cta;
// CHECK: nvvm.barrier0
// CHECK: nvvm.shfl.sync idx
// CHECK: scf.if
// CHECK-NEXT: nvvm.setmaxregister decrease 40
// CHECK-NEXT: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 32768;
// CHECK-COUNT-2: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK-NOT: st.global
// CHECK: } else {
// CHECK-NEXT: nvvm.setmaxregister increase 232
// CHECK-NEXT: scf.for
// CHECK-NOT: cp.async.bulk.tensor
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: llvm.inline_asm {{.*}}@p mbarrier.arrive.shared::cta.b64
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: llvm.inline_asm {{.*}}@p mbarrier.arrive.shared::cta.b64
// CHECK: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
// CHECK-NOT: setmaxregister
// CHECK: llvm.return
func.func @rebalanced(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 2, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %c6 = arith.constant 6 : i32
  %c128 = arith.constant 128 : i32
  %z = arith.constant 0.0 : f32
  %pid = tile.program_id 0 : i32
  scf.for %t = %pid to %c6 step %c2 : i32 {
    %m0 = arith.muli %t, %c128 : i32
    %acc = tile.splat %z : f32 -> tensor<128x128xf32>
    %r = tile.tma_dot %a, %b[%m0, %c0], %acc {a_dims = array<i64: 768, 256>, b_dims = array<i64: 128, 256>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true, rebalance_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
    tile.block_store %c[%m0, %c0], %r {dims = array<i64: 768, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  }
  return
}

// -----

// The same in a 2-CTA cluster: after its copy of the loop the producer waits for the
// last releases of both CTAs' consumers (the cluster's drain), inside its branch; the
// consumers release every stage in both CTAs.

// CHECK-LABEL: llvm.func @cluster_rebalanced
// CHECK-SAME: nvvm.cluster_dim = array<i32: 2, 1, 1>
// CHECK-SAME: tile.cluster = 2 : i32
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 0, 1, 64, 64, 128, 0>
// CHECK: %cluster_ctarank
// CHECK: mbarrier.init.shared::cta.b64 [$0], 16;
// CHECK: fence.mbarrier_init.release.cluster;
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// CHECK-NOT: nvvm.barrier0
// CHECK: nvvm.setmaxregister decrease 40
// CHECK: scf.for
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 32768;
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster {{.*}}"r,l,r,r,r,h"
// CHECK: arith.ceildivsi
// CHECK: mbarrier.try_wait.parity
// CHECK: } else {
// CHECK-NEXT: nvvm.setmaxregister increase 232
// CHECK-COUNT-2: mapa.shared::cluster.u32 remote
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-COUNT-2: mapa.shared::cluster.u32 remote
// CHECK: st.global.v4.b32
// CHECK: llvm.return
func.func @cluster_rebalanced(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 4, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %c6 = arith.constant 6 : i32
  %c128 = arith.constant 128 : i32
  %z = arith.constant 0.0 : f32
  %pid = tile.program_id 0 : i32
  scf.for %t = %pid to %c6 step %c2 : i32 {
    %m0 = arith.muli %t, %c128 : i32
    %acc = tile.splat %z : f32 -> tensor<128x128xf32>
    %r = tile.tma_dot %a, %b[%m0, %c0], %acc {a_dims = array<i64: 768, 256>, b_dims = array<i64: 128, 256>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true, cluster_m = 2 : i64, rebalance_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
    tile.block_store %c[%m0, %c0], %r {dims = array<i64: 768, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  }
  return
}


// -----

// With 4 consumer warps (256 threads) the launch already gives 248 registers per
// thread, more than rebalancing could: the loop is still lowered once per role, without
// setmaxnreg or a register limit on the kernel.

// CHECK-LABEL: llvm.func @four_warps
// CHECK-NOT: nvvm.maxnreg
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// CHECK-NOT: setmaxregister
// CHECK: nvvm.shfl.sync idx
// CHECK: scf.if
// CHECK-NEXT: scf.for
// CHECK: cp.async.bulk.tensor
// CHECK: } else {
// CHECK-NEXT: scf.for
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: st.global.v4.b32
func.func @four_warps(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 2, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %c6 = arith.constant 6 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %pid = tile.program_id 0 : i32
  scf.for %t = %pid to %c6 step %c2 : i32 {
    %m0 = arith.muli %t, %c64 : i32
    %acc = tile.splat %z : f32 -> tensor<64x128xf32>
    %r = tile.tma_dot %a, %b[%m0, %c0], %acc {a_dims = array<i64: 384, 256>, b_dims = array<i64: 128, 256>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true, rebalance_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x128xf32>
    tile.block_store %c[%m0, %c0], %r {dims = array<i64: 384, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<64x128xf32>
  }
  return
}
