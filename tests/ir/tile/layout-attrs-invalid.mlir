// Verifier diagnostics of the layout attributes (TileDialect.cpp:
// BlockedLayoutAttr::verify, SliceLayoutAttr::verify).
//
// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{blocked layout parameters must all have rank 2}}
func.func @rank_mismatch(%x: tensor<4x8xf32, #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [32], warpsPerCTA = [1, 1], order = [1, 0]}>>) {
  return
}

// -----

// expected-error @+1 {{blocked layout sizes must be powers of two}}
func.func @size_not_power_of_two(%x: tensor<4x8xf32, #tile.blocked<{sizePerThread = [1, 3], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>>) {
  return
}

// -----

// expected-error @+1 {{blocked layout sizes must be powers of two}}
func.func @zero_warps(%x: tensor<4x8xf32, #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [0, 1], order = [1, 0]}>>) {
  return
}

// -----

// expected-error @+1 {{threadsPerWarp must multiply to 32, got 16}}
func.func @lanes_not_32(%x: tensor<4x8xf32, #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [2, 8], warpsPerCTA = [4, 1], order = [1, 0]}>>) {
  return
}

// -----

// expected-error @+1 {{order must be a permutation of 0..1}}
func.func @order_repeats(%x: tensor<4x8xf32, #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 1]}>>) {
  return
}

// -----

// expected-error @+1 {{order must be a permutation of 0..1}}
func.func @order_out_of_range(%x: tensor<4x8xf32, #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [2, 0]}>>) {
  return
}

// -----

// expected-error @+1 {{slice dim 2 out of range of the parent layout}}
func.func @slice_dim(%x: tensor<4xf32, #tile.slice<{dim = 2, parent = #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>}>>) {
  return
}
