// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_89 | FileCheck %s --check-prefix=SM89

// The attention step of wgmma-fp8-dot-to-llvm.mlir with P V marked a_k_interleaved (V's
// rows stored in the order the accumulator holds P's columns): P's bytes become the A
// operand by renaming registers, so no shuffle, store or barrier stands between the
// products; on sm_89 the same for mma.sync. (wgmma-fp8-interleaved-dot-errors.mlir: the
// error where a is not such a tile.)

// CHECK-LABEL: llvm.func @qk_then_pv_fp8_interleaved
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}, $32, $33, acc, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK-NOT: {{nvvm.shfl.sync|llvm.store|st.shared|nvvm.barrier0|ldmatrix}}
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-2: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}, {$32, $33, $34, $35}, $36, acc, 1, 1;
// CHECK-NOT: wgmma.mma_async
// SM89-LABEL: llvm.func @qk_then_pv_fp8_interleaved
// SM89-COUNT-32: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SM89-NOT: nvvm.shfl.sync
// SM89-COUNT-16: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SM89-NOT: mma.sync
func.func @qk_then_pv_fp8_interleaved(%q: !tile.ptr<f8E4M3FN>, %k: !tile.ptr<f8E4M3FN>, %v: !tile.ptr<f8E4M3FN>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %qt = tile.async_block_load %q[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 64, 128>, buffer = 2 : i64, slots = 1 : i64} : <f8E4M3FN> -> tensor<64x128xf8E4M3FN>
  %kt = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 128>, strides = array<i64: 128, 1>, block = array<i64: 64, 128>, buffer = 0 : i64, slots = 1 : i64} : <f8E4M3FN> -> tensor<64x128xf8E4M3FN>
  %vt = tile.async_block_load %v[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <f8E4M3FN> -> tensor<64x64xf8E4M3FN>
  tile.async_wait
  %kT = tile.trans %kt [1, 0] : tensor<64x128xf8E4M3FN> -> tensor<128x64xf8E4M3FN>
  %vT = tile.trans %vt [1, 0] : tensor<64x64xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %s = tile.dot %qt, %kT, %acc : tensor<64x128xf8E4M3FN>, tensor<128x64xf8E4M3FN> -> tensor<64x64xf32>
  %p = tile.cast %s : tensor<64x64xf32> to tensor<64x64xf8E4M3FN>
  %out = tile.dot %p, %vT, %acc {a_k_interleaved} : tensor<64x64xf8E4M3FN>, tensor<64x64xf8E4M3FN> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %out {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

