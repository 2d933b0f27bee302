// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s

// A warp-specialized tile.tma_dot in a persistent loop (LowerTmaDot.cpp). The kernel
// gets a producer warpgroup (384 threads) and one 128-byte tensor map parameter per
// operand (grid constants; boxes [64 K] x [128 rows] for the K-major a and b). The ring's
// mbarriers are set up once, before the loop; in the loop the warps split on their
// (shuffled, so warp-uniform) index: the producer's first thread waits for a free stage,
// expects the stage's bytes and issues both TMA loads per K slice, while the consumers
// wait for a full stage, fence, issue 4 wgmma per 64-wide slice, commit, wait for the
// previous group and release its stage with a predicated arrive (no branch near the
// .aligned instructions), then drain and release the last slice. The epilogue's store
// is the consumers' alone (16 bytes per lane after a shuffle among lane pairs).

// CHECK-LABEL: llvm.func @persistent
// CHECK-SAME: %{{.*}}: !llvm.ptr {llvm.align = 64 : i64, llvm.byval = !llvm.array<128 x i8>, nvvm.grid_constant}
// CHECK-SAME: nvvm.maxntid = array<i32: 384, 1, 1>
// CHECK-SAME: tile.producer_warps = 4 : i32
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 0, 1, 64, 128, 128, 0>
// CHECK: mbarrier.init.shared::cta.b64 [$0], 1;
// CHECK: mbarrier.init.shared::cta.b64 [$0], 8;
// CHECK: fence.proxy.async.shared::cta;
// CHECK: nvvm.barrier0
// CHECK: scf.for
// CHECK: nvvm.shfl.sync idx
// CHECK: scf.if
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 32768;
// CHECK-COUNT-2: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// CHECK: } else {
// CHECK: scf.for
// CHECK: mbarrier.try_wait.parity
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: llvm.inline_asm {{.*}}@p mbarrier.arrive.shared::cta.b64
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: llvm.inline_asm {{.*}}@p mbarrier.arrive.shared::cta.b64
// CHECK: scf.if
// CHECK: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
func.func @persistent(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 2, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %c6 = arith.constant 6 : i32
  %c128 = arith.constant 128 : i32
  %z = arith.constant 0.0 : f32
  %pid = tile.program_id 0 : i32
  scf.for %t = %pid to %c6 step %c2 : i32 {
    %m0 = arith.muli %t, %c128 : i32
    %acc = tile.splat %z : f32 -> tensor<128x128xf32>
    %r = tile.tma_dot %a, %b[%m0, %c0], %acc {a_dims = array<i64: 768, 256>, b_dims = array<i64: 128, 256>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
    tile.block_store %c[%m0, %c0], %r {dims = array<i64: 768, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  }
  return
}

// -----

// At the kernel's top level the rest of the kernel is the consumers': a reduction across
// warps after the product synchronises only their 256 threads (named barrier 1), while
// the barrier after the ring's setup is the whole block's.

// CHECK-LABEL: llvm.func @top_level
// CHECK: nvvm.barrier0
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: scf.if
// CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK: nvvm.barrier id = %[[ONE]] number_of_threads = %{{.*}}
// CHECK-NOT: nvvm.barrier0
// CHECK: llvm.return
func.func @top_level(%a: !tile.ptr<f16>, %b: !tile.ptr<f16>, %s: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x64xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 128, 200>, b_dims = array<i64: 128, 64>, block_k = 64 : i64, stages = 3 : i64, trans_a = true, trans_b = false, warp_specialize = true} : !tile.ptr<f16>, !tile.ptr<f16>, tensor<128x64xf32>
  %sum = tile.reduce sum %r axis = 0 : tensor<128x64xf32> -> tensor<64xf32>
  tile.block_store %s[%c0], %sum {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<64xf32>
  return
}

// -----

// A 2-CTA cluster (cluster_m = 2) in a persistent loop: the kernel is marked with the
// cluster shape; empty barriers count the consumer warps of both CTAs (16); after the
// barriers' init a cluster-scope fence and a cluster barrier (not the CTA's) publish
// them. Each producer loads its own A box and half of B (a [64 rows] box of the K-major
// b) multicast to both CTAs; consumers release every stage in both CTAs (mapa + a
// remote arrive); after the loop the producer waits for the last releases.

// CHECK-LABEL: llvm.func @cluster
// CHECK-SAME: nvvm.cluster_dim = array<i32: 2, 1, 1>
// CHECK-SAME: tile.cluster = 2 : i32
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 64, 128, 128, 0, 1, 64, 64, 128, 0>
// CHECK: %cluster_ctarank
// CHECK: mbarrier.init.shared::cta.b64 [$0], 16;
// CHECK: fence.mbarrier_init.release.cluster;
// CHECK: nvvm.cluster.arrive {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// CHECK-NOT: nvvm.barrier0
// CHECK: scf.for
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 32768;
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [
// CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster {{.*}}"r,l,r,r,r,h"
// CHECK: } else {
// CHECK-COUNT-2: mapa.shared::cluster.u32 remote
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-COUNT-2: mapa.shared::cluster.u32 remote
// CHECK: st.global.v4.b32
// CHECK: arith.ceildivsi
// CHECK: mbarrier.try_wait.parity
// CHECK: llvm.return
func.func @cluster(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 4, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c2 = arith.constant 2 : i32
  %c6 = arith.constant 6 : i32
  %c128 = arith.constant 128 : i32
  %z = arith.constant 0.0 : f32
  %pid = tile.program_id 0 : i32
  scf.for %t = %pid to %c6 step %c2 : i32 {
    %m0 = arith.muli %t, %c128 : i32
    %acc = tile.splat %z : f32 -> tensor<128x128xf32>
    %r = tile.tma_dot %a, %b[%m0, %c0], %acc {a_dims = array<i64: 768, 256>, b_dims = array<i64: 128, 256>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true, cluster_m = 2 : i64} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
    tile.block_store %c[%m0, %c0], %r {dims = array<i64: 768, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  }
  return
}

// -----

// Narrower K slices swizzle narrower rows. block_k = 32 (bf16): a is K-major, so its
// boxes are [128 rows][32] with the 64-byte swizzle and its descriptors name it (mode 2,
// 8-row groups 512 bytes apart: 0x8000002000010000); b as [K, N] is MN-major, [32 K][64]
// boxes with the 128-byte swizzle, 4096 bytes apart along N (0x4000004001000000). One
// 32-wide slice is two k16 wgmma per slab.

// CHECK-LABEL: llvm.func @swizzle64
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 32, 128, 64, 0, 1, 64, 32, 128, 0>
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 16384;
// CHECK: } else {
// CHECK-DAG: llvm.mlir.constant(-9223371899415756800 : i64) : i64
// CHECK-DAG: llvm.mlir.constant(4611686293322072064 : i64) : i64
// CHECK-COUNT-2: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK-NOT: wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
func.func @swizzle64(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 128, 256>, b_dims = array<i64: 256, 128>, block_k = 32 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}

// -----

// block_k = 16 (bf16): K-major a and b (b as [N, K]) are [rows][16] boxes, rows of 32
// bytes with the 32-byte swizzle (mode 3, 8-row groups 256 bytes apart:
// 0xC000001000010000); one k16 wgmma per slab and slice.

// CHECK-LABEL: llvm.func @swizzle32
// CHECK-SAME: tile.tensor_maps = array<i64: 0, 16, 128, 32, 0, 1, 16, 128, 32, 0>
// CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 8192;
// CHECK: } else {
// CHECK: llvm.mlir.constant(-4611685949707845632 : i64) : i64
// CHECK-COUNT-1: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// CHECK-NOT: wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
func.func @swizzle32(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 128, 256>, b_dims = array<i64: 128, 256>, block_k = 16 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}

// -----

// a_in_registers: per k16 step each warp reads its A fragment from the 64-byte-swizzled
// slice with one ldmatrix.x4 (offset bits 4-5 XOR bits 7-8), fences, and issues the
// wgmma with A as four registers and only B as a descriptor (no transpose immediate
// for A: the last immediate is B's).

// CHECK-LABEL: llvm.func @a_in_registers
// CHECK: } else {
// CHECK: mbarrier.try_wait.parity
// CHECK-NOT: nvvm.wgmma.fence.aligned
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-NEXT: llvm.extractvalue
// CHECK-COUNT-3: llvm.extractvalue
// CHECK-NEXT: nvvm.wgmma.fence.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{.*}}, {$64, $65, $66, $67}, $68, acc, 1, 1, 0;
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{.*}}, {$64, $65, $66, $67}, $68, acc, 1, 1, 0;
// CHECK-NOT: wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
func.func @a_in_registers(%a: !tile.ptr<f16>, %b: !tile.ptr<f16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 128, 256>, b_dims = array<i64: 128, 256>, block_k = 32 : i64, stages = 4 : i64, trans_a = false, trans_b = true, warp_specialize = true, a_in_registers = true} : !tile.ptr<f16>, !tile.ptr<f16>, tensor<128x128xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}

// -----

// In order with A from registers: thread 0 refills the released stage inside a branch
// only it takes (waiting on the empty barrier), so the warp reconverges (bar.warp.sync)
// before the next iteration's ldmatrix and wgmma, which need the whole warp.

// CHECK-LABEL: llvm.func @in_order_a_in_registers
// CHECK: scf.for
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: scf.if
// CHECK: mbarrier.try_wait.parity
// CHECK: cp.async.bulk.tensor.2d
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "bar.warp.sync -1;"
// CHECK-NEXT: scf.yield
func.func @in_order_a_in_registers(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 1000>, b_dims = array<i64: 128, 1000>, block_k = 16 : i64, stages = 8 : i64, trans_a = false, trans_b = true, a_in_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x128xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<64x128xf32>
  return
}

// -----

// A window of b (b_k0, an i32 known at run time): b is [128, 1024] while op(a)'s K is 256,
// and b's slices load from K coordinate k0 + b_k0 while a's load from k0.

// CHECK-LABEL: llvm.func @window
// CHECK-SAME: %arg3: i32
// CHECK: %[[BK:.*]] = arith.addi %[[K:.*]], %arg3 : i32
// CHECK: cp.async.bulk.tensor.2d{{.*}}"r,l,r,r,r" %{{.*}}, %arg4, %[[K]], %{{.*}}, %{{.*}} :
// CHECK: cp.async.bulk.tensor.2d{{.*}}"r,l,r,r,r" %{{.*}}, %arg5, %[[BK]], %{{.*}}, %{{.*}} :
func.func @window(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>, %off: i32) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc b_k0 %off {a_dims = array<i64: 128, 256>, b_dims = array<i64: 128, 1024>, block_k = 64 : i64, stages = 2 : i64, trans_a = false, trans_b = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}
