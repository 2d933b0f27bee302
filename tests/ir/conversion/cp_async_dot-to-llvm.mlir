// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_80 | FileCheck %s

// tile.cp_async_dot (LowerCpAsyncDot.cpp), 64x64 bf16 on 4 warps (2 x 2 warps of 32 x 32),
// 32-wide K slices, 3 stages of (64 * 32 + 32 * 64) * 2 = 8192 bytes. A stage is 256
// 16-byte chunks of A and 256 of B: two cp.async each per thread of 128. The prologue
// fills stages 0 and 1 (one group each); every iteration waits for its slice (at most
// one group pending), synchronises once, refills the stage the previous slice used
// when a slice is left (scf.if), commits (an empty group at the end) and, per 16-wide
// K step, reads its fragments with ldmatrix (B, stored [K][N], transposed) and issues
// 2 x 4 mma.sync m16n8k16. No copy is in flight after the loop. The f32 result is
// stored 16 bytes per lane: lane pairs of each quad first trade 8-byte pairs (shfl).

// CHECK-LABEL: llvm.mlir.global internal @ring_scratch() {{.*}} : !llvm.array<24576 x i8>
// CHECK-LABEL: llvm.func @ring
// CHECK-SAME: nvvm.maxntid = array<i32: 128, 1, 1>
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK: cp.async.commit_group;
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK: cp.async.commit_group;
// CHECK: scf.for
// CHECK: cp.async.wait_group 1;
// CHECK-NEXT: nvvm.barrier0
// CHECK: scf.if
// CHECK-COUNT-4: cp.async.cg.shared.global
// CHECK: }
// CHECK-NEXT: cp.async.commit_group;
// CHECK-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-2: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: mma.sync
// CHECK: scf.yield
// CHECK: cp.async.wait_group 0;
// CHECK-NOT: nvvm.barrier0
// CHECK: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
func.func @ring(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 100, 72>, b_dims = array<i64: 72, 64>, block_k = 32 : i64, stages = 3 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 100, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// Transposed operands change only the reads: A stored [K][M] is read with ldmatrix.trans,
// B stored [N][K] without. f32 operands are tf32 (m16n8k8, cvt.rna), and a 32-bit A
// stored [K][M] cannot use ldmatrix.trans: its elements are read one by one.

// CHECK-LABEL: llvm.func @transposed
// CHECK: scf.for
// CHECK: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
func.func @transposed(%a: !tile.ptr<f16>, %b: !tile.ptr<f16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 72, 64>, b_dims = array<i64: 64, 72>, block_k = 32 : i64, stages = 2 : i64, trans_a = true, trans_b = true} : !tile.ptr<f16>, !tile.ptr<f16>, tensor<64x64xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// CHECK-LABEL: llvm.func @tf32
// CHECK: scf.for
// CHECK-NOT: ldmatrix
// CHECK: cvt.rna.tf32.f32
// CHECK: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
func.func @tf32(%a: !tile.ptr<f32>, %b: !tile.ptr<f32>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 40, 64>, b_dims = array<i64: 40, 64>, block_k = 16 : i64, stages = 3 : i64, trans_a = true, trans_b = false} : !tile.ptr<f32>, !tile.ptr<f32>, tensor<64x64xf32>
  tile.block_store %c[%c0, %c0], %r {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// A bf16 result: each lane holds one 32-bit word (a pair) per row and n-repeat, so the
// four lanes of a quad trade words of four consecutive n-repeats (three shuffles per
// word, rounds 1-3) and each lane stores the 16 bytes of one repeat: 32 x 32 per warp is
// 2 row-halves x 2 m-repeats x (4 n-repeats / 4) = 4 vector stores a lane.

// CHECK-LABEL: llvm.func @bf16_out
// CHECK: cp.async.wait_group 0;
// CHECK-COUNT-3: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
// CHECK-COUNT-3: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
// CHECK-COUNT-3: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
// CHECK-COUNT-3: nvvm.shfl.sync idx
// CHECK: st.global.v4.b32
// CHECK-NOT: st.global
// CHECK: llvm.return
func.func @bf16_out(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 32 : i64, stages = 2 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  %h = arith.truncf %r : tensor<64x64xf32> to tensor<64x64xbf16>
  tile.block_store %c[%c0, %c0], %h {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16>, tensor<64x64xbf16>
  return
}
