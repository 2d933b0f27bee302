// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_80 | FileCheck %s --check-prefix=SM80

// tile.dot on wgmma (LowerWgmmaDot.cpp): in kernels marked tile.wgmma_dots, on sm_90a, a
// dot whose B operand is a shared tile and whose warps all run along M issues one
// wgmma.mma_async m64nNk16 per 16-wide K step with A from registers (mma.sync's A
// words) and B read through a shared-memory descriptor straight from the slot: no
// ldmatrix of B. The async wait fences the copies into the async proxy; the scratch is
// 1024-byte aligned and so is each slot. On sm_80 the same kernels stay on mma.sync.
//
// SM80-NOT: wgmma
// SM80-NOT: fence.proxy.async

// Q @ K^T at H 64: K's rows (128 bytes) are K-major B with the 128-byte swizzle:
// descriptor leading 16, stride 1024 (8 rows), mode 1 = 0x4000004000010000, 32 bytes of K
// per step inside the row. Q goes through scratch once (its conversion: ldmatrix of A).

// CHECK-LABEL: llvm.mlir.global internal @qk_scratch() {addr_space = 3 : i32, alignment = 1024 : i64}
// CHECK-LABEL: llvm.func @qk
// CHECK: cp.async.commit_group;
// CHECK-NEXT: cp.async.wait_group 0;
// CHECK-NEXT: fence.proxy.async.shared::cta;
// CHECK-NEXT: nvvm.barrier0
// CHECK-COUNT-4: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// CHECK-NOT: ldmatrix
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-NOT: ldmatrix
// CHECK-COUNT-4: llvm.mlir.constant(4611686293305360384 : i64) : i64
// CHECK-NOT: {{ldmatrix|mma.sync}}
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: "wgmma.wait_group.sync.aligned 0;"
// CHECK-NOT: mma.sync
// CHECK: st.global.v4.b32
// SM80-LABEL: llvm.func @qk
// SM80-COUNT-32: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
func.func @qk(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c1, %c0, %c1, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>, buffer = 1 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// P @ V at Hv 128 on 8 warps (two warpgroups, one 64-row slab each): V's 256-byte rows
// are stored as two 128-byte panels, N-major B (transpose immediate 1): leading byte
// offset = one panel (64 rows x 128 bytes = 8192), stride 1024, mode 1; each K step
// moves 16 rows (2048 bytes). V is never read with ldmatrix.trans.

// CHECK-LABEL: llvm.func @pv
// CHECK: cp.async.wait_group 0;
// CHECK-NEXT: fence.proxy.async.shared::cta;
// CHECK-NOT: ldmatrix.sync.aligned.m8n8.x4.trans
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK: llvm.mlir.constant(4611686293338849280 : i64) : i64
// CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, acc, 1, 1, 1;
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, acc, 1, 1, 1;
// CHECK-NOT: {{ldmatrix|mma.sync|wgmma.mma_async}}
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: "wgmma.wait_group.sync.aligned 0;"
// SM80-LABEL: llvm.func @pv
// SM80: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// SM80: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
func.func @pv(%p: !tile.ptr<bf16>, %v: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %vt = tile.async_block_load %v[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 64, 128>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x128xbf16>
  %pb = tile.block_load %p[%c0, %c0] {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<128x64xbf16>
  tile.async_wait
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  %s = tile.dot %pb, %vt, %acc : tensor<128x64xbf16>, tensor<64x128xbf16> -> tensor<128x128xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 128, 128>, strides = array<i64: 128, 1>} : <f32>, tensor<128x128xf32>
  return
}

// -----

// Q @ K^T at H 128: K-major B in two panels; steps 0-3 read the first panel (32 bytes
// apart inside its rows), steps 4-7 the second (64 rows x 128 bytes = 8192 further).

// CHECK-LABEL: llvm.func @qk128
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-8: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, acc, 1, 1, 0;
// CHECK-NOT: wgmma.mma_async
// CHECK: "wgmma.wait_group.sync.aligned 0;"
func.func @qk128(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>} : <bf16> -> tensor<64x128xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 64, 128>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x128xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x128xbf16> -> tensor<128x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x128xbf16>, tensor<128x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// Without tile.wgmma_dots the dot stays on mma.sync on sm_90a too, and the wait has no
// async-proxy fence.

// CHECK-LABEL: llvm.mlir.global internal @plain_scratch() {addr_space = 3 : i32, alignment = 16 : i64}
// CHECK-LABEL: llvm.func @plain
// CHECK-NOT: {{wgmma|fence.proxy.async}}
// CHECK: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-NOT: wgmma
// CHECK: llvm.return
func.func @plain(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %s {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// An async dot (tile.dot {async}) is committed but not waited for; what follows it runs
// while the product does, and tile.dot_wait is the wait_group its 32 f32 result
// registers flow through (tied asm operands). On sm_80 the wait is the identity.

// CHECK-LABEL: llvm.func @overlap
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK-NEXT: llvm.extractvalue
// CHECK-NOT: wgmma.wait_group
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: wgmma.wait_group
// CHECK: ld.global
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "wgmma.wait_group.sync.aligned 0;", "{{(=f,)+}}0,1,2,
// CHECK-NOT: wgmma.wait
// CHECK: st.global
// SM80-LABEL: llvm.func @overlap
// SM80: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
func.func @overlap(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %x: !tile.ptr<f32>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc {async} : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %xt = tile.block_load %x[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<64x64xf32>
  %y = arith.mulf %xt, %xt : tensor<64x64xf32>
  %w = tile.dot_wait %s {pending = 0 : i32} : tensor<64x64xf32>
  %r = arith.addf %w, %y : tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %r {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// Attention's step on wgmma: S = Q K^T, P = S cast to bf16, O = P V. The accumulator
// (every warp along M) cast to 16 bits is already the next wgmma's A fragments in
// registers: nothing goes through shared memory between the two products (no store, no
// barrier, no ldmatrix), and both read their B (K, then V, N-major) from the ring.

// CHECK-LABEL: llvm.func @qk_then_pv
// CHECK: cp.async.wait_group 0;
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, acc, 1, 1, 0;
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0|ldmatrix}}
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0|ldmatrix}}
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, acc, 1, 1, 1;
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, acc, 1, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 0;"
func.func @qk_then_pv(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %v: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  %vt = tile.async_block_load %v[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %p = tile.cast %s : tensor<64x64xf32> to tensor<64x64xbf16>
  %out = tile.dot %p, %vt, %acc : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %out {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// A fresh dot (tile.dot ... fresh %c): where %c holds the product starts from zero. On
// wgmma only the first K step's scale-d is !%c (0: the accumulator's registers are not
// read), the other steps accumulate with 1; on mma.sync the accumulator is selected to
// zero first.

// CHECK-LABEL: llvm.func @fresh
// CHECK: arith.xori %{{.*}}, %true
// CHECK-NEXT: %[[SCALE:.*]] = arith.extui %{{.*}} : i1 to i32
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}} %[[SCALE]],
// CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT: llvm.inline_asm {{.*}}wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}} %[[ONE]],
// SM80-LABEL: llvm.func @fresh
// SM80-COUNT-4: arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// SM80: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
func.func @fresh(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %x: !tile.ptr<f32>, %o: !tile.ptr<f32>, %n: i32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
  %acc = tile.block_load %x[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<64x64xf32>
  %first = arith.cmpi eq, %n, %c0 : i32
  %s = tile.dot %qt, %kT, %acc fresh %first {async} : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
  %w = tile.dot_wait %s {pending = 0 : i32} : tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %w {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}
