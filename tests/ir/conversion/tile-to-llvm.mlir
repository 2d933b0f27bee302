// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm | FileCheck %s --check-prefix=NOTILE

// The input runs through the tile stages of the pipeline first (hand-written
// #tile.blocked layouts do not parse, see tile/layout-roundtrip.mlir).

// No tile operation and no func.func survives the lowering.
// NOTILE-NOT: func.func
// NOTILE-NOT: {{(= |^ *)tile\.[a-z_]+ }}

// A kernel becomes an llvm.func marked nvvm.kernel, with global pointers for tile
// pointers, maxntid = 32 x num_warps, and the launch attributes kept. A bf16 4x256
// block at a provably 8-aligned column is one 16-byte predicated access per thread.

// CHECK: module {
// CHECK-NEXT: llvm.func @copy(%{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>)
// CHECK-SAME: nvvm.kernel
// CHECK-SAME: nvvm.maxntid = array<i32: 128, 1, 1>
// CHECK-SAME: tile.grid = array<i64: 16, 1, 1>
// CHECK-SAME: tile.num_warps = 4 : i32
// CHECK-SAME: tile.shared_bytes = 0 : i64
// CHECK: nvvm.read.ptx.sreg.tid.x : i32
// CHECK: nvvm.read.ptx.sreg.ctaid.x : i32
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "{{.*}}@p ld.global.v4.b32 {$0, $1, $2, $3}, [$4];{{.*}}", "=r,=r,=r,=r,l,r" {{.*}} -> !llvm.struct<(i32, i32, i32, i32)>
// CHECK-NOT: ld.global
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "{{.*}}@p st.global.v4.b32 [$1], {$2, $3, $4, $5};{{.*}}", "r,l,r,r,r,r"
// CHECK-NOT: st.global
// CHECK: llvm.return
func.func @copy(%x: !tile.ptr<bf16>, %y: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 16, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c4 = arith.constant 4 : i32
  %pid = tile.program_id 0 : i32
  %row = arith.muli %pid, %c4 : i32
  %0 = tile.block_load %x[%row, %c0] {dims = array<i64: 64, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  tile.block_store %y[%row, %c0], %0 {dims = array<i64: 64, 256>, strides = array<i64: 256, 1>} : <bf16>, tensor<4x256xbf16>
  return
}

// -----

// A column offset that is not provably a multiple of 8 (a kernel parameter) gives one
// 2-byte access per element: 8 per thread.

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.func @unaligned(%{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %{{.*}}: i32)
// CHECK-NOT: ld.global.v
// CHECK-COUNT-8: @p ld.global.b16 $0, [$1];
// CHECK-NOT: ld.global
// CHECK: st.global.v4.b32
// CHECK: llvm.return
func.func @unaligned(%x: !tile.ptr<bf16>, %y: !tile.ptr<bf16>, %off: i32) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %off] {dims = array<i64: 4, 1000>, strides = array<i64: 1000, 1>} : <bf16> -> tensor<4x256xbf16>
  tile.block_store %y[%c0, %c0], %0 {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16>, tensor<4x256xbf16>
  return
}

// -----

// A store below a run-time row limit (tile.block_store's `below`): each thread's
// predicate also compares its row with the limit, and the 16-byte vectors stay.

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.func @store_below(%{{.*}}: !llvm.ptr<1>, %{{.*}}: !llvm.ptr<1>, %[[LIMIT:.*]]: i32)
// CHECK: arith.cmpi slt, %{{.*}}, %[[LIMIT]] : i32
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "{{.*}}@p st.global.v4.b32 [$1], {$2, $3, $4, $5};{{.*}}", "r,l,r,r,r,r"
// CHECK-NOT: st.global
// CHECK: llvm.return
func.func @store_below(%x: !tile.ptr<bf16>, %y: !tile.ptr<bf16>, %limit: i32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  tile.block_store %y[%c0, %c0], %0 below %limit {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>, limit_dim = 0 : i64} : <bf16>, tensor<4x256xbf16>
  return
}

// -----

// A row reduction inside a warp: registers first, then butterfly shuffles over the 32
// lanes of the row (offsets 16, 8, 4, 2, 1); no scratch, no barrier.

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.func @row_sum(
// CHECK-SAME: tile.shared_bytes = 0 : i64
// CHECK: ld.global.v4.b32
// CHECK: arith.constant 16 : i32
// CHECK-NEXT: arith.constant -1 : i32
// CHECK-NEXT: nvvm.shfl.sync bfly %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : i32 -> i32
// CHECK-COUNT-4: nvvm.shfl.sync bfly
// CHECK-NOT: nvvm.shfl.sync
// CHECK-NOT: nvvm.barrier0
// CHECK-NOT: !llvm.ptr<3>
// CHECK: st.global.b32
// CHECK: llvm.return
func.func @row_sum(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2 = tile.reduce sum %1 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  tile.block_store %y[%c0], %2 {dims = array<i64: 4>, strides = array<i64: 1>} : <f32>, tensor<4xf32>
  return
}

// -----

// tile.exp2 with 1 of every 4 registers on the FMA pipes: a thread's 8 registers are
// registers 0 and 4 by the polynomial (clamp, floor by add.rm, cubic, 2^floor from
// exponent bits), the other 6 by ex2.approx.

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.func @exp2_share(
// CHECK: ld.global.v4.b32
// CHECK: max.NaN.f32 c, $1, 0fC2FE0000;{{.*}}add.rm.f32 r, c, 0f4B400000;{{.*}}fma.rn.f32 p, p, t, 0f3F800000;{{.*}}mad.lo.u32 e, e, 8388608, 1065353216;{{.*}}mul.f32 $0, p, t;
// CHECK-COUNT-3: "ex2.approx.ftz.f32 $0, $1;", "=f,f"
// CHECK: max.NaN.f32
// CHECK-COUNT-3: "ex2.approx.ftz.f32 $0, $1;", "=f,f"
// CHECK-NOT: ex2.approx
// CHECK-NOT: max.NaN
// CHECK: llvm.return
func.func @exp2_share(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2 = tile.exp2 %1 fma 1 of 4 : tensor<4x256xf32>
  tile.block_store %y[%c0, %c0], %2 {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <f32>, tensor<4x256xf32>
  return
}

// -----

// A reduction across 4 warps: the kernel gets a 16-byte-aligned scratch global in
// address space 3 of tile.shared_bytes bytes; after the shuffles, lane 0 of each warp
// stores its partial, a barrier, then every thread combines the 4 partials.

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.mlir.global internal @cross_warp_scratch() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<32 x i8>
// CHECK-NEXT: llvm.func @cross_warp(
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>
// CHECK-SAME: tile.shared_bytes = 32 : i64
// CHECK-NEXT: %[[SCRATCH:.*]] = llvm.mlir.addressof @cross_warp_scratch : !llvm.ptr<3>
// CHECK-COUNT-5: nvvm.shfl.sync bfly
// CHECK-NOT: nvvm.shfl.sync
// CHECK: scf.if
// CHECK-NEXT: arith.constant 0 : i32
// CHECK-NEXT: llvm.getelementptr %[[SCRATCH]]
// CHECK-NEXT: llvm.getelementptr
// CHECK-NEXT: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr<3>
// CHECK-NEXT: }
// CHECK-NEXT: nvvm.barrier0
// CHECK-COUNT-4: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
// CHECK-NOT: llvm.load
// CHECK: st.global.b32
func.func @cross_warp(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 2, 2048>, strides = array<i64: 2048, 1>} : <f32> -> tensor<2x2048xf32>
  %1 = tile.reduce max %0 axis = 1 : tensor<2x2048xf32> -> tensor<2xf32>
  tile.block_store %y[%c0], %1 {dims = array<i64: 2>, strides = array<i64: 1>} : <f32>, tensor<2xf32>
  return
}

// -----

// A layout conversion goes through scratch: stores, a barrier, loads. Two conversions
// are separated by the barrier tile-insert-barriers put in (so two barriers in all
// before the second one's loads).

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.mlir.global internal @convert_scratch() {addr_space = 3 : i32, alignment = 16 : i64} : !llvm.array<16384 x i8>
// CHECK-NEXT: llvm.func @convert(
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr<3>
// CHECK: nvvm.barrier0
// CHECK: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
// CHECK: nvvm.barrier0
// CHECK-NEXT: arith.constant
// CHECK: llvm.store %{{.*}}, %{{.*}} : f32, !llvm.ptr<3>
// CHECK: nvvm.barrier0
// CHECK: llvm.load %{{.*}} : !llvm.ptr<3> -> f32
// CHECK-NOT: nvvm.barrier0
// CHECK: llvm.return
func.func @convert(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>) attributes {tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %1 = tile.cast %0 : tensor<64x64xbf16> to tensor<64x64xf32>
  %2 = tile.block_load %y[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<64x64xf32>
  %3 = arith.addf %1, %2 : tensor<64x64xf32>
  %4 = tile.block_load %y[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<64x64xf32>
  %5 = arith.mulf %3, %4 : tensor<64x64xf32>
  tile.block_store %y[%c0, %c0], %5 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// -----

// A carried tile becomes one carried scalar per register (8 f32 per thread for 1024
// elements over 128 threads). The induction variable steps by 1024 from 0, so its
// offsets are 4-aligned and the loads stay vectorized.

// CHECK: {{^// [-]{5}$}}
// CHECK-NEXT: module {
// CHECK-NEXT: llvm.func @loop(
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32) : i32 {
// CHECK-COUNT-2: ld.global.v4.b32
// CHECK-NOT: ld.global
// CHECK: scf.yield %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : f32, f32, f32, f32, f32, f32, f32, f32
// CHECK: st.global.v4.b32
func.func @loop(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1024 = arith.constant 1024 : i32
  %z = arith.constant 0.0 : f32
  %init = tile.splat %z : f32 -> tensor<1024xf32>
  %r = scf.for %i = %c0 to %n step %c1024 iter_args(%acc = %init) -> (tensor<1024xf32>) : i32 {
    %0 = tile.block_load %x[%i] {dims = array<i64: 1048576>, strides = array<i64: 1>} : <f32> -> tensor<1024xf32>
    %1 = arith.addf %acc, %0 : tensor<1024xf32>
    scf.yield %1 : tensor<1024xf32>
  }
  tile.block_store %y[%c0], %r {dims = array<i64: 1024>, strides = array<i64: 1>} : <f32>, tensor<1024xf32>
  return
}

// -----

// A [16, 32] bf16 tile on 4 warps: the default layout (8-element vectors, 128 threads)
// covers 1024 elements, so every element sits in two threads. Staged into a dot operand
// (sm_80), only the owning thread stores it: the stores are inside a branch on the
// owner test, then one barrier, then ldmatrix.
// CHECK-LABEL: llvm.func @replicated_operand
// CHECK: scf.if
// CHECK: llvm.store {{.*}} : vector<8xbf16>, !llvm.ptr<3>
// CHECK-NEXT: }
// CHECK: nvvm.barrier0
// CHECK: ldmatrix
func.func @replicated_operand(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %c: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %ta = tile.block_load %a[%c0, %c0] {dims = array<i64: 16, 32>, strides = array<i64: 32, 1>} : !tile.ptr<bf16> -> tensor<16x32xbf16>
  %tb = tile.block_load %b[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : !tile.ptr<bf16> -> tensor<32x64xbf16>
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<16x64xf32>
  %d = tile.dot %ta, %tb, %acc : tensor<16x32xbf16>, tensor<32x64xbf16> -> tensor<16x64xf32>
  tile.block_store %c[%c0, %c0], %d {dims = array<i64: 16, 64>, strides = array<i64: 64, 1>} : !tile.ptr<f32>, tensor<16x64xf32>
  return
}
