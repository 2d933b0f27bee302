// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of TMA copies (tile.async_block_load with a barrier) and of the
// mbarrier ops (AsyncBlockLoadOp::verifyTmaCopy, MbarrierWaitOp / MbarrierArriveOp in
// TileOps.cpp). Each case changes one thing of a valid kernel: a [128, 64] bf16 block of
// a 2-D [1000, 64] kernel tensor into slot 0 of a two-slot buffer, completing on
// mbarrier 0 of two, in a tile.wgmma_dots kernel.

func.func @tma_copy_valid(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 128>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %t = tile.async_block_load %a[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 1000, 64>, strides = array<i64: 64, 1>, block = array<i64: 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  tile.mbarrier_wait %c0, %c0
  tile.mbarrier_arrive %c1
  return
}

// -----

// The kernel must declare its mbarriers.
func.func @no_barriers(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{names an mbarrier, but its kernel declares none (tile.mbarriers)}}
  tile.mbarrier_wait %c0, %c0
  return
}

// -----

// A constant index names one of the declared barriers.
func.func @index_out_of_range(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mbarriers = array<i64: 1, 128>} {
  %c2 = arith.constant 2 : i32
  // expected-error @+1 {{names mbarrier 2, but the kernel declares 2}}
  tile.mbarrier_arrive %c2
  return
}

// -----

// TMA writes wgmma swizzle atoms: the kernel stores its shared tiles that way.
func.func @not_wgmma_kernel(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mbarriers = array<i64: 1>} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{a TMA copy needs a kernel with tile.wgmma_dots}}
  %t = tile.async_block_load %a[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 1000, 64>, strides = array<i64: 64, 1>, block = array<i64: 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  return
}

// -----

// Tensor maps are 2-D, or 3-D copied a batch at a time (block [1, rows, cols]).
func.func @four_dims(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{a TMA copy reads 2-D tensors or 3-D ones a batch at a time, got 4 dims}}
  %t = tile.async_block_load %a[%c0, %c0, %c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 2, 4, 1000, 64>, strides = array<i64: 256000, 64000, 64, 1>, block = array<i64: 1, 1, 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  return
}

// -----

// The batches must be contiguous rows of one row-major tensor.
func.func @strided_batches(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{a TMA copy reads row-major contiguous tensors (stride 64 for its rows), got strides [128000, 64, 1]}}
  %t = tile.async_block_load %a[%c0, %c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 4, 1000, 64>, strides = array<i64: 128000, 64, 1>, block = array<i64: 1, 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  return
}

// -----


func.func @row_bytes_power_of_two(%a: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{a TMA copy's block rows must be 32 or 64 bytes or a multiple of 128, got 16}}
  %t = tile.async_block_load %a[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 1000, 64>, strides = array<i64: 64, 1>, block = array<i64: 64, 4>, buffer = 0 : i64, slots = 2 : i64} : <f32> -> tensor<64x4xf32>
  return
}

// -----

// Boxes have at most 256 rows.
func.func @too_many_rows(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>} {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{a TMA copy's block must have a multiple of 8 rows, at most 256, got 512}}
  %t = tile.async_block_load %a[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 1000, 64>, strides = array<i64: 64, 1>, block = array<i64: 512, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<512x64xbf16>
  return
}

// -----

// The tensor is a kernel parameter (its tensor map is encoded at launch).
func.func @not_a_parameter(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>} {
  %c0 = arith.constant 0 : i32
  %c8 = arith.constant 8 : i32
  %p = tile.addptr %a, %c8 : !tile.ptr<bf16>, i32
  // expected-error @+1 {{a TMA copy reads a kernel tensor parameter}}
  %t = tile.async_block_load %p[%c0, %c0] slot %c0 barrier %c0 {dims = array<i64: 1000, 64>, strides = array<i64: 64, 1>, block = array<i64: 128, 64>, buffer = 0 : i64, slots = 2 : i64} : <bf16> -> tensor<128x64xbf16>
  return
}
