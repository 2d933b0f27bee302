// RUN: not tokamax-opt %s -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a 2>&1 | FileCheck %s

// An interleaved product whose a was loaded, not computed: its registers hold columns in
// the load's order, so nothing can rename them; the lowering says so.
// CHECK: error: 'tile.dot' op a_k_interleaved needs its a operand to be an fp8 tile in the accumulator layout of a product like it
func.func @interleaved_loaded_a(%p: !tile.ptr<f8E4M3FN>, %v: !tile.ptr<f8E4M3FN>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %pt = tile.block_load %p[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f8E4M3FN> -> tensor<64x64xf8E4M3FN>
  %vt = tile.async_block_load %v[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <f8E4M3FN> -> tensor<64x64xf8E4M3FN>
  tile.async_wait
  %vT = tile.trans %vt [1, 0] : tensor<64x64xf8E4M3FN> -> tensor<64x64xf8E4M3FN>
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %out = tile.dot %pt, %vT, %acc {a_k_interleaved} : tensor<64x64xf8E4M3FN>, tensor<64x64xf8E4M3FN> -> tensor<64x64xf32>
  tile.block_store %o[%c0, %c0], %out {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}
