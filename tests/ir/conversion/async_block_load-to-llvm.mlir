// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_80 | FileCheck %s
// RUN: not tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_75 2>&1 | FileCheck %s --check-prefix=ERR

// tile.async_block_load / tile.async_wait on the GPU (LowerAsyncCopy.cpp) and tile.dot
// reading shared tiles (LowerDot.cpp). A 64x64 bf16 copy is 64 rows of 8 16-byte chunks,
// 512 chunks: on 4 warps, 4 cp.async a thread (zero-filled outside the tensor, into the
// swizzled slot), then one commit_group. tile.async_wait {pending = N} is
// cp.async.wait_group N and a block barrier (nvvm.barrier0). A dot whose operand is a
// conversion out of a shared tile reads it per 16-wide K step with ldmatrix straight
// from the slot: nothing is stored to shared memory and there is no barrier before the
// mma.sync. ldmatrix transposes (.trans) when the stored rows run along the wrong
// dimension: (opIdx == 0) == (contiguousDim == 0).
//
// On sm_75 there is no cp.async: each of the five kernels below fails at its first copy
// (and nothing else is reported).
// ERR-COUNT-5: error: 'tile.async_block_load' op needs cp.async (sm_80 or newer), compiling for sm_75
// ERR-NOT: error:

// Q @ K^T with both operands copied: Q into buffer 0 (one slot, at 0: no transient
// scratch), one head of K ([1, 64, 1, 64] of [2, 100, 3, 64]) into buffer 1 (two
// slots at 8192). 4 warps along M (tile.mma_rows_per_warp): per K step each warp reads
// its 16 rows of A (stored [M][K], cd 1: one ldmatrix.x4) and all 64 columns of B = K^T
// (K stored [N][K], the trans has cd 0: four ldmatrix.x4, pairs of n-tiles), neither
// transposed, then issues 8 mma.sync m16n8k16. K = 64: four steps.

// CHECK-LABEL: llvm.mlir.global internal @qk_scratch() {{.*}} : !llvm.array<24576 x i8>
// CHECK-LABEL: llvm.func @qk
// CHECK-SAME: nvvm.maxntid = array<i32: 128, 1, 1>
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK-NOT: cp.async.cg
// CHECK: cp.async.commit_group;
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK-NOT: cp.async.cg
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 0;
// CHECK-NEXT: nvvm.barrier0
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0}}
// CHECK-COUNT-5: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0|ldmatrix}}
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0}}
// CHECK-COUNT-5: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0}}
// CHECK-COUNT-5: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0}}
// CHECK-COUNT-5: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: {{ldmatrix|mma.sync|nvvm.barrier0}}
// CHECK: st.global.v4.b32
// CHECK: llvm.return
func.func @qk(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.async_block_load %q[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c1, %c0, %c1, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>, buffer = 1 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// The other orientations: A = P^T (P stored [K][M], cd 0) and B = V (stored [K][N],
// cd 1) are both read with ldmatrix.trans.

// CHECK-LABEL: llvm.func @transposed_reads
// CHECK: cp.async.wait_group 0;
// CHECK-NEXT: nvvm.barrier0
// CHECK-NOT: {{llvm.store|nvvm.barrier0|ldmatrix.sync.aligned.m8n8.x4.shared}}
// CHECK-COUNT-5: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// CHECK-NOT: ldmatrix
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
func.func @transposed_reads(%p: !tile.ptr<bf16>, %v: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %pt = tile.async_block_load %p[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  %vt = tile.async_block_load %v[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %pT = tile.trans %pt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %pT, %vt, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// The double-buffered loop: the carried shared tile is its slot address (!llvm.ptr<3>).
// Each iteration waits (wait_group 0 + barrier), copies the next block (4 cp.async, one
// group) into slot 1 - slot of buffer 0 (at 8192, after Q's staging: the loop-invariant
// Q is converted once, before the loop, through scratch with its own barrier) and reads
// the current slot per K step. After the loop the last copy is waited for.

// CHECK-LABEL: llvm.func @kv_loop
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK: cp.async.commit_group;
// CHECK: scf.for {{.*}} -> (!llvm.ptr<3>, i32, f32,
// CHECK-NEXT: cp.async.wait_group 0;
// CHECK-NEXT: nvvm.barrier0
// CHECK-NEXT: %[[NEXT:.*]] = arith.subi %{{.*}}, %{{.*}} : i32
// CHECK: %[[OFF:.*]] = arith.muli %[[NEXT]], %{{.*}} : i32
// CHECK: %[[BUF:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK-NEXT: %[[SLOT:.*]] = llvm.getelementptr %[[BUF]][%[[OFF]]] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK: cp.async.commit_group;
// CHECK-NOT: {{llvm.store|nvvm.barrier0}}
// CHECK-COUNT-4: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-COUNT-8: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: {{llvm.store|nvvm.barrier0}}
// CHECK: scf.yield %[[SLOT]], %[[NEXT]],
// CHECK: cp.async.wait_group 0;
// CHECK-NEXT: nvvm.barrier0
func.func @kv_loop(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %k0 = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 256, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  %acc0 = tile.splat %z : f32 -> tensor<64x64xf32>
  %r:3 = scf.for %i = %c0 to %c4 step %c1 iter_args(%kt = %k0, %slot = %c0, %acc = %acc0) -> (tensor<64x64xbf16>, i32, tensor<64x64xf32>) : i32 {
    tile.async_wait
    %next = arith.subi %c1, %slot : i32
    %i1 = arith.addi %i, %c1 : i32
    %row = arith.muli %i1, %c64 : i32
    %kn = tile.async_block_load %k[%row, %c0] slot %next {dims = array<i64: 256, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
    %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    scf.yield %kn, %next, %s : tensor<64x64xbf16>, i32, tensor<64x64xf32>
  }
  tile.async_wait
  tile.block_store %o[%c0, %c0], %r#2 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// A non-dot reader: 32x128 bf16 (4 chunks a thread, slot at 0), then the conversion
// into the blocked layout loads each of the thread's 32 elements from the swizzled slot
// (no ldmatrix, no scratch), widens them and stores.

// CHECK-LABEL: llvm.mlir.global internal @widen_scratch() {{.*}} : !llvm.array<8192 x i8>
// CHECK-LABEL: llvm.func @widen
// CHECK-COUNT-4: cp.async.cg.shared.global [$0], [$1], 16, $2;
// CHECK-NEXT: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 0;
// CHECK-NEXT: nvvm.barrier0
// CHECK-NOT: ldmatrix
// CHECK-COUNT-32: llvm.load %{{.*}} : !llvm.ptr<3> -> bf16
// CHECK-NOT: {{llvm.load .*ptr<3>|ldmatrix|nvvm.barrier0}}
// CHECK: arith.extf
// CHECK: st.global.v4.b32
func.func @widen(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %t = tile.async_block_load %x[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 32, 128>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<32x128xbf16>
  tile.async_wait
  %f = arith.extf %t : tensor<32x128xbf16> to tensor<32x128xf32>
  tile.block_store %y[%c0, %c0], %f {dims = array<i64: 32, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<32x128xf32>
  return
}

// -----

// tile.async_wait {pending = 1} leaves the newest group in flight: here the second copy.

// CHECK-LABEL: llvm.func @pending
// CHECK: cp.async.commit_group;
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 1;
// CHECK-NEXT: nvvm.barrier0
func.func @pending(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c32 = arith.constant 32 : i32
  %t = tile.async_block_load %x[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 32, 128>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<32x128xbf16>
  %u = tile.async_block_load %x[%c32, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 32, 128>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<32x128xbf16>
  tile.async_wait {pending = 1 : i32}
  %f = arith.extf %t : tensor<32x128xbf16> to tensor<32x128xf32>
  tile.block_store %y[%c0, %c0], %f {dims = array<i64: 32, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<32x128xf32>
  return
}
