// Laid-out IR prints and parses back: dumps of every stage after layout assignment can
// be fed to tokamax-opt again.
//
// RUN: tokamax-opt %s -split-input-file | tokamax-opt -split-input-file | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts | tokamax-opt -split-input-file -tile-allocate-shared | FileCheck %s --check-prefix=REPLAY

#blocked = #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>
// CHECK-LABEL: func.func @blocked
// CHECK-SAME: tensor<4x256xf32, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>>
func.func @blocked(%x: tensor<4x256xf32, #blocked>) {
  return
}

// -----

#l = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
// CHECK-LABEL: func.func @blocked_1d
// CHECK-SAME: tensor<512xf32, #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>>
func.func @blocked_1d(%x: tensor<512xf32, #l>) {
  return
}

// -----

#blocked = #tile.blocked<{sizePerThread = [1, 4], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>
// CHECK-LABEL: func.func @slice
// CHECK-SAME: tensor<64xf32, #tile.slice<{dim = 0, parent = #tile.blocked<{sizePerThread = [1, 4], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>}>>
func.func @slice(%x: tensor<64xf32, #tile.slice<{dim = 0, parent = #blocked}>>) {
  return
}

// -----

// Replaying a dumped stage: the layouts the pass printed are read back.

// REPLAY-LABEL: func.func @softmax_rows
// REPLAY-SAME: tile.shared_bytes = 0 : i64
// REPLAY: tile.reduce max {{.*}} -> tensor<4xf32, #tile.slice<{dim = 1, parent = #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>}>>
func.func @softmax_rows(%x: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2 = tile.reduce max %1 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  return
}
