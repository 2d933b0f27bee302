// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of tile.async_block_load (AsyncBlockLoadOp::verify in TileOps.cpp).
// Each case changes one thing of a valid copy: a [1, 64, 1, 64] bf16 block of a
// [2, 100, 3, 64] tensor into slot 0 of a two-slot shared buffer, a 64x64 result.

func.func @async_block_load_valid(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %t = tile.async_block_load %k[%c1, %c0, %c1, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  tile.async_wait
  // A 2-D block of f32, already in shared memory (what -tile-assign-layouts gives it).
  %f = tile.async_block_load %k[%c0, %c0] slot %c1 {dims = array<i64: 200, 64>, strides = array<i64: 64, 1>, block = array<i64: 16, 64>, buffer = 1 : i64, slots = 2 : i64} : <bf16> -> tensor<16x64xbf16, #tile.shared<{contiguousDim = 1}>>
  tile.async_wait {pending = 1 : i32}
  return
}

// -----

// The block has one entry per tensor dimension.
func.func @block_rank(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op block has 2 dims, the tensor 4}}
  %t = tile.async_block_load %k[%c0, %c0, %c0, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  return
}

// -----

// The result is the block with its unit dims dropped: [1, 64, 1, 64] gives 64x64.
func.func @result_not_block(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op result must be the block without its unit dims (2-D), got 'tensor<64x32xbf16>'}}
  %t = tile.async_block_load %k[%c0, %c0, %c0, %c0] slot %c0 {dims = array<i64: 2, 100, 3, 64>, strides = array<i64: 19200, 192, 64, 1>, block = array<i64: 1, 64, 1, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x32xbf16>
  return
}

// -----

// ... and always 2-D (a single row is 1 x N, never 1-D).
func.func @result_not_2d(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op result must be the block without its unit dims (2-D), got 'tensor<64xbf16>'}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 100, 64>, strides = array<i64: 64, 1>, block = array<i64: 1, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64xbf16>
  return
}

// -----

// The contiguous last dim carries the 16-byte chunks: it cannot be a unit dim.
func.func @unit_last_dim(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op the block's last dim must not be a unit dim (it is the contiguous one)}}
  %t = tile.async_block_load %k[%c0, %c0, %c0] slot %c0 {dims = array<i64: 64, 64, 8>, strides = array<i64: 512, 8, 1>, block = array<i64: 64, 64, 1>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  return
}

// -----

// cp.async copies 16-byte chunks of fp8, 16- or 32-bit elements: no other 8-bit (i8) copies.
func.func @eight_bit(%k: !tile.ptr<i8>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op copies fp8, 16- or 32-bit elements, got 'i8'}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <i8> -> tensor<64x64xi8>
  return
}

// -----

// Chunks are contiguous runs of the last dim.
func.func @last_stride_not_1(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op the last dim must be contiguous (stride 1), got stride 2}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 128, 2>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  return
}

// -----

// The tensor's rows must be whole chunks too: 60 bf16 are 120 bytes (the last chunk of
// a row would run into the next one).
func.func @last_dim_not_whole_chunks(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op the block's and the tensor's last dims must be whole 16-byte chunks (multiples of 8), got 64 and 60}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 60>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  return
}

// -----

// f32 chunks are 4 elements: a 2-wide block is half a chunk.
func.func @block_last_dim_not_whole_chunks(%k: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op the block's and the tensor's last dims must be whole 16-byte chunks (multiples of 4), got 2 and 64}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 2>, buffer = 0 : i64, slots = 2 : i64} : <f32> -> tensor<64x2xf32>
  return
}

// -----

// Every chunk's global address must be 16-byte aligned: rows padded to 68 bf16 are 136
// bytes apart.
func.func @stride_not_16_bytes(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op stride 68 of dim 0 is not a multiple of 16 bytes}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 100, 64>, strides = array<i64: 68, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16>
  return
}

// -----

// A buffer has at least one slot.
func.func @zero_slots(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op needs slots >= 1 and buffer >= 0}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 0 : i64} : <bf16> -> tensor<64x64xbf16>
  return
}

// -----

// The result lives in shared memory: no register layout.
func.func @register_layout(%k: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.async_block_load' op result lives in shared memory (#tile.shared), got #tile.blocked<}}
  %t = tile.async_block_load %k[%c0, %c0] slot %c0 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<64x64xbf16, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [4, 8], warpsPerCTA = [4, 1], order = [1, 0]}>>
  return
}
