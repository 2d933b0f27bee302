// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared | FileCheck %s --check-prefix=SMEM
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers | FileCheck %s --check-prefix=BAR

// tile.async_block_load / tile.async_wait (cp.async copies into shared buffers) through
// the tile passes. -tile-assign-layouts (item 8) gives a copy's result the shared layout
// #tile.shared<{contiguousDim = 1}> (rows along the block's last dim); tile.trans of a
// shared tile stays in shared memory with the other dim contiguous; a tile.dot converts a
// shared operand straight into its dot-operand layout (ldmatrix from the slot), any other
// user first into the default blocked layout. -tile-allocate-shared puts each buffer id's
// region after the transient scratch (128-aligned, in id order): slots x the largest
// block copied into it (rounded up to 128 bytes), on every op naming the id as
// tile.scratch_offset / tile.slot_bytes. -tile-insert-barriers counts tile.async_wait as
// a barrier. (The SMEM and BAR runs canonicalize first, so the zero accumulators are
// rebuilt in the mma layout and need no scratch.)

// A K block of an attention step: one head ([1, 64, 1, 64]) of a [batch, seq, heads,
// dim] tensor into slot 0 of buffer 0, waited for, transposed and used as B of Q @ K^T.
// Transient scratch: the Q tile's dot-operand staging, 64 * 64 * 2 = 8192 bytes at 0;
// buffer 0 at 8192: 2 slots of 8192 bytes, 24576 bytes in all.

// CHECK-LABEL: func.func @kv_copy
// CHECK: %[[Q:.*]] = tile.block_load {{.*}} -> tensor<64x64xbf16, #tile.blocked<{{.*}}>>
// CHECK: %[[K:.*]] = tile.async_block_load %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}] slot %{{.*}} {block = array<i64: 1, 64, 1, 64>, buffer = 0 : i64, dims = array<i64: 2, 100, 3, 64>, slots = 2 : i64, strides = array<i64: 19200, 192, 64, 1>} : <bf16> -> tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>>
// CHECK-NEXT: tile.async_wait
// CHECK-NEXT: %[[KT:.*]] = tile.trans %[[K]] [1, 0] : tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>> -> tensor<64x64xbf16, #tile.shared<{contiguousDim = 0}>>
// CHECK: %[[A:.*]] = tile.convert_layout %[[Q]] : {{.*}} -> tensor<64x64xbf16, #tile.dot_op<{opIdx = 0, parent = #tile.mma<{warpsPerCTA = [4, 1]}>, kWidth = 2}>>
// CHECK-NEXT: %[[B:.*]] = tile.convert_layout %[[KT]] : tensor<64x64xbf16, #tile.shared<{contiguousDim = 0}>> -> tensor<64x64xbf16, #tile.dot_op<{opIdx = 1, parent = #tile.mma<{warpsPerCTA = [4, 1]}>, kWidth = 2}>>
// CHECK-NEXT: %[[ACC:.*]] = tile.convert_layout
// CHECK-NEXT: tile.dot %[[A]], %[[B]], %[[ACC]] : {{.*}} -> tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>

// SMEM-LABEL: func.func @kv_copy
// SMEM-SAME: tile.shared_bytes = 24576 : i64
// SMEM: tile.async_block_load {{.*}}tile.scratch_offset = 8192 : i64, tile.slot_bytes = 8192 : i64}

// BAR-LABEL: func.func @kv_copy
// BAR-NOT: tile.barrier
// BAR: tile.async_wait
// BAR-NOT: tile.barrier
// BAR: tile.dot
func.func @kv_copy(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c1, %c0, %c1, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// The double-buffered K loop: the loop carries the shared tile of this step and its
// slot; each step waits, copies the next block into the other slot (1 - slot) and
// multiplies by the carried one. The carried tile keeps the shared layout: the yield of
// the next copy needs no conversion, and only the dot's read (per iteration) and Q's
// (once, before the loop) convert. Both copies name buffer 0: one region, one offset.
// Nothing in the loop uses transient scratch, and the wait is a barrier anyway: no
// tile.barrier in the body.

// CHECK-LABEL: func.func @kv_loop
// CHECK: %[[K0:.*]] = tile.async_block_load {{.*}} -> tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>>
// CHECK: tile.convert_layout %{{.*}} -> tensor<64x64xbf16, #tile.dot_op<{opIdx = 0, parent = #tile.mma<{warpsPerCTA = [4, 1]}>, kWidth = 2}>>
// CHECK-NEXT: %{{.*}}:3 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[KT:.*]] = %[[K0]], %[[SLOT:.*]] = %{{.*}}, %{{.*}} = %{{.*}}) -> (tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>>, i32, tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>)
// CHECK-NEXT: tile.async_wait
// CHECK-NEXT: %[[NEXT:.*]] = arith.subi %{{.*}}, %[[SLOT]] : i32
// CHECK: %[[KN:.*]] = tile.async_block_load %{{.*}}[%{{.*}}, %{{.*}}] slot %[[NEXT]] {{.*}} -> tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>>
// CHECK-NEXT: %[[T:.*]] = tile.trans %[[KT]] [1, 0] : tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>> -> tensor<64x64xbf16, #tile.shared<{contiguousDim = 0}>>
// CHECK-NEXT: %[[B:.*]] = tile.convert_layout %[[T]] : tensor<64x64xbf16, #tile.shared<{contiguousDim = 0}>> -> tensor<64x64xbf16, #tile.dot_op<{opIdx = 1, parent = #tile.mma<{warpsPerCTA = [4, 1]}>, kWidth = 2}>>
// CHECK-NEXT: %[[S:.*]] = tile.dot %{{.*}}, %[[B]], %{{.*}}
// CHECK-NEXT: scf.yield %[[KN]], %[[NEXT]], %[[S]] : tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>>, i32, tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>
// CHECK-NEXT: }
// CHECK-NEXT: tile.async_wait

// SMEM-LABEL: func.func @kv_loop
// SMEM-SAME: tile.shared_bytes = 24576 : i64
// SMEM: tile.async_block_load {{.*}}tile.scratch_offset = 8192 : i64, tile.slot_bytes = 8192 : i64}
// SMEM: scf.for
// SMEM: tile.async_block_load {{.*}}tile.scratch_offset = 8192 : i64, tile.slot_bytes = 8192 : i64}

// BAR-LABEL: func.func @kv_loop
// BAR: scf.for
// BAR-NEXT: tile.async_wait
// BAR-NOT: tile.barrier
// BAR: scf.yield
func.func @kv_loop(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
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

// Any other user reads the shared tile into registers first: arith.extf gets the default
// blocked layout of the 32x128 bf16 tile. That read needs no scratch (it loads from the
// slot): the kernel's shared memory is buffer 0 alone, at 0.

// CHECK-LABEL: func.func @widen
// CHECK: %[[T:.*]] = tile.async_block_load {{.*}} -> tensor<32x128xbf16, #tile.shared<{contiguousDim = 1}>>
// CHECK-NEXT: tile.async_wait
// CHECK-NEXT: %[[R:.*]] = tile.convert_layout %[[T]] : tensor<32x128xbf16, #tile.shared<{contiguousDim = 1}>> -> tensor<32x128xbf16, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>>
// CHECK-NEXT: %[[F:.*]] = arith.extf %[[R]] : tensor<32x128xbf16, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>> to tensor<32x128xf32, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>>
// CHECK-NEXT: tile.block_store %{{.*}}[%{{.*}}, %{{.*}}], %[[F]]

// SMEM-LABEL: func.func @widen
// SMEM-SAME: tile.shared_bytes = 8192 : i64
// SMEM: tile.async_block_load {{.*}}tile.scratch_offset = 0 : i64, tile.slot_bytes = 8192 : i64}
func.func @widen(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %t = tile.async_block_load %x[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 32, 128>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<32x128xbf16>
  tile.async_wait
  %f = arith.extf %t : tensor<32x128xbf16> to tensor<32x128xf32>
  tile.block_store %y[%c0, %c0], %f {dims = array<i64: 32, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<32x128xf32>
  return
}

// -----

// Two buffers of different sizes, the larger id first in program order. Transient
// scratch: Q's staging, 8192 bytes at 0. Buffer 0 (two ops: a 64x64 block and a 16x64
// one, so 8192 bytes a slot) at 8192: 2 x 8192 bytes. Buffer 1 (a 2x8 bf16 block: 32
// bytes, rounded up to a 128-byte slot) at 8192 + 16384 = 24576: 3 x 128 bytes.
// 24576 + 384 = 24960 bytes in all.

// CHECK-LABEL: func.func @two_buffers
// CHECK: tile.async_block_load {{.*}} -> tensor<2x8xbf16, #tile.shared<{contiguousDim = 1}>>
// CHECK: tile.async_block_load {{.*}} -> tensor<64x64xbf16, #tile.shared<{contiguousDim = 1}>>
// CHECK: tile.async_block_load {{.*}} -> tensor<16x64xbf16, #tile.shared<{contiguousDim = 1}>>

// SMEM-LABEL: func.func @two_buffers
// SMEM-SAME: tile.shared_bytes = 24960 : i64
// SMEM: tile.async_block_load {{.*}}buffer = 1 : i64{{.*}}tile.scratch_offset = 24576 : i64, tile.slot_bytes = 128 : i64} : <bf16> -> tensor<2x8xbf16
// SMEM: tile.async_block_load {{.*}}buffer = 0 : i64{{.*}}tile.scratch_offset = 8192 : i64, tile.slot_bytes = 8192 : i64} : <bf16> -> tensor<64x64xbf16
// SMEM: tile.async_block_load {{.*}}buffer = 0 : i64{{.*}}tile.scratch_offset = 8192 : i64, tile.slot_bytes = 8192 : i64} : <bf16> -> tensor<16x64xbf16
// SMEM: tile.convert_layout {{.*}}#tile.dot_op<{opIdx = 0
// SMEM-NOT: tile.scratch_offset
// SMEM: tile.dot
func.func @two_buffers(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %small = tile.async_block_load %k[%c0, %c0, %c0, %c0] slot %c2 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 2, 1, 8>, buffer = 1 : i64, slots = 3 : i64} : <bf16> -> tensor<2x8xbf16>
  %kt = tile.async_block_load %k[%c0, %c0, %c1, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  %part = tile.async_block_load %k[%c1, %c0, %c1, %c0] slot %c1 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 16, 1, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<16x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// tile.async_wait ends in a block-wide barrier, so -tile-insert-barriers treats it as one:
// the cross-warp reduction before it reads transient scratch at 0, which Q's dot-operand
// staging right after the wait overwrites, and no tile.barrier goes between them.

// BAR-LABEL: func.func @wait_is_barrier
// BAR: tile.reduce
// BAR-NEXT: tile.block_store
// BAR-NEXT: tile.async_wait
// BAR-NEXT: tile.convert_layout
// BAR-NOT: tile.barrier
// BAR: tile.dot
func.func @wait_is_barrier(%x: !tile.ptr<f32>, %q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %xt = tile.block_load %x[%c0, %c0] {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<128x64xf32>
  %sum = tile.reduce sum %xt axis = 0 : tensor<128x64xf32> -> tensor<64xf32>
  tile.block_store %o[%c0], %sum {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<64xf32>
  tile.async_wait
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// The same kernel with the wait before the reduction: now the staging needs its barrier.

// BAR-LABEL: func.func @wait_before_reduce
// BAR: tile.async_wait
// BAR-NEXT: tile.block_load
// BAR-NEXT: tile.reduce
// BAR-NEXT: tile.block_store
// BAR-NEXT: tile.barrier
// BAR-NEXT: tile.convert_layout
func.func @wait_before_reduce(%x: !tile.ptr<f32>, %q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  tile.async_wait
  %xt = tile.block_load %x[%c0, %c0] {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<128x64xf32>
  %sum = tile.reduce sum %xt axis = 0 : tensor<128x64xf32> -> tensor<64xf32>
  tile.block_store %o[%c0], %sum {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<64xf32>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// A block copied before a loop and waited for inside it: the read of the shared tile
// (its conversion into registers) stays in the loop, after the wait, rather than being
// hoisted before the loop as a loop-invariant conversion would be.

// CHECK-LABEL: func.func @invariant_copy_waited_in_loop
// CHECK: tile.async_block_load
// CHECK: scf.for
// CHECK-NEXT: tile.async_wait
// CHECK-NEXT: tile.convert_layout %{{.*}} : tensor<32x128xbf16, #tile.shared<{contiguousDim = 1}>> -> tensor<32x128xbf16, #tile.blocked<{{.*}}>>
func.func @invariant_copy_waited_in_loop(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %t = tile.async_block_load %x[%c0, %c0] slot %c0 {block = array<i64: 32, 128>, buffer = 0 : i64, dims = array<i64: 32, 128>, slots = 1 : i64, strides = array<i64: 128, 1>} : !tile.ptr<bf16> -> tensor<32x128xbf16>
  scf.for %i = %c0 to %c4 step %c1 : i32 {
    tile.async_wait
    %f = arith.extf %t : tensor<32x128xbf16> to tensor<32x128xf32>
    tile.block_store %y[%i, %c0], %f {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : !tile.ptr<f32>, tensor<32x128xf32>
  }
  return
}
