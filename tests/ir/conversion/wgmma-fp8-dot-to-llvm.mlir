// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_89 | FileCheck %s --check-prefix=SM89
// RUN: not tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_80 2>&1 | FileCheck %s --check-prefix=SM80

// fp8 products (kWidth 4: four K elements a 32-bit register) in an attention step: S =
// Q K^T with both operands read from shared tiles by descriptors, 32 bytes (32 fp8
// elements) a K step: one wgmma m64n64k32 per step, the 128-byte swizzle's descriptor
// as for 16-bit rows of the same bytes. P = S cast to fp8 moves into the next product's
// A fragments by two shuffles a word inside each quad (no shared memory, no barrier):
// thread t holds columns 2t, 2t + 1 of each 8-wide accumulator tile and needs 4t .. 4t
// + 3 of each 16-wide half of a K step. V is read transposed ([Hv, keys], K-major: wgmma
// has no transpose for fp8). On sm_89 the same products run on mma.sync m16n8k32; sm_80
// has no fp8 products.

// CHECK-LABEL: llvm.func @qk_then_pv_fp8
// CHECK: fence.proxy.async.shared::cta;
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-4: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}, $32, $33, acc, 1, 1;
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0|ldmatrix}}
// CHECK-COUNT-16: nvvm.shfl.sync idx
// CHECK-NOT: {{llvm.store|st.shared|nvvm.barrier0|ldmatrix}}
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-2: wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {{.*}}, {$32, $33, $34, $35}, $36, acc, 1, 1;
// CHECK-NOT: wgmma.mma_async
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// SM89-LABEL: llvm.func @qk_then_pv_fp8
// SM89-NOT: wgmma
// SM89-COUNT-32: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SM89-COUNT-16: nvvm.shfl.sync idx
// SM89-COUNT-16: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32
// SM89-NOT: mma.sync
// SM80: error: 'tile.dot' op takes fp8 operands on sm_89 or newer, the target is sm_80
func.func @qk_then_pv_fp8(%q: !tile.ptr<f8E4M3FN>, %k: !tile.ptr<f8E4M3FN>, %v: !tile.ptr<f8E4M3FN>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
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
  %out = tile.dot %p, %vT, %acc : tensor<64x64xf8E4M3FN>, tensor<64x64xf8E4M3FN> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %out {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}
