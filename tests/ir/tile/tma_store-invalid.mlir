// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of tile.tma_store (TmaStoreOp::verify in TileOps.cpp).

func.func @tma_store_valid(%c: !tile.ptr<bf16>, %v: tensor<128x64xbf16>) {
  %c0 = arith.constant 0 : i32
  tile.tma_store %c[%c0, %c0], %v {dims = array<i64: 100, 72>} : <bf16>, tensor<128x64xbf16>
  return
}

// -----

func.func @tma_store_add_valid(%c: !tile.ptr<f32>, %v: tensor<128x32xf32>) {
  %c0 = arith.constant 0 : i32
  tile.tma_store add %c[%c0, %c0], %v {dims = array<i64: 100, 36>} : <f32>, tensor<128x32xf32>
  return
}

// -----

// PTX adds f16 and bf16 tensors too; the op refuses them (a sum rounded at each add).
func.func @tma_store_add_bf16(%c: !tile.ptr<bf16>, %v: tensor<128x64xbf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.tma_store' op add accumulates f32 only (a 16-bit sum would round at every partial sum: add f32 and convert once), got 'bf16'}}
  tile.tma_store add %c[%c0, %c0], %v {dims = array<i64: 100, 72>} : <bf16>, tensor<128x64xbf16>
  return
}

// -----

func.func @tma_store_unknown_kind(%c: !tile.ptr<f32>, %v: tensor<128x32xf32>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{unknown tile.tma_store kind 'max' (store or add)}}
  tile.tma_store max %c[%c0, %c0], %v {dims = array<i64: 100, 36>} : <f32>, tensor<128x32xf32>
  return
}

// -----

// TMA needs the tensor map the runtime encodes for a kernel parameter.
func.func @tma_store_computed_pointer(%c: !tile.ptr<bf16>, %v: tensor<128x64xbf16>) {
  %c0 = arith.constant 0 : i32
  %p = tile.addptr %c, %c0 : !tile.ptr<bf16>, i32
  // expected-error @+1 {{'tile.tma_store' op base must be a kernel tensor parameter (TMA needs its tensor map)}}
  tile.tma_store %p[%c0, %c0], %v {dims = array<i64: 100, 72>} : <bf16>, tensor<128x64xbf16>
  return
}

// -----

func.func @tma_store_f64(%c: !tile.ptr<f64>, %v: tensor<64x16xf64>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.tma_store' op stores bf16, f16 or f32, got 'f64'}}
  tile.tma_store %c[%c0, %c0], %v {dims = array<i64: 64, 16>} : <f64>, tensor<64x16xf64>
  return
}

// -----

func.func @tma_store_row_bytes(%c: !tile.ptr<bf16>, %v: tensor<128x64xbf16>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.tma_store' op rows of the tensor must be multiples of 16 bytes, got 73 elements}}
  tile.tma_store %c[%c0, %c0], %v {dims = array<i64: 100, 73>} : <bf16>, tensor<128x64xbf16>
  return
}

// -----

// Strips are 128 bytes of columns: 32 of f32.
func.func @tma_store_partial_strip(%c: !tile.ptr<f32>, %v: tensor<64x16xf32>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.tma_store' op the block must have at most 256 rows and whole 128-byte strips (32 columns)}}
  tile.tma_store %c[%c0, %c0], %v {dims = array<i64: 64, 64>} : <f32>, tensor<64x16xf32>
  return
}

// -----

func.func @tma_store_rank(%c: !tile.ptr<f32>, %v: tensor<64xf32>) {
  %c0 = arith.constant 0 : i32
  // expected-error @+1 {{'tile.tma_store' op stores 2-D blocks of 2-D tensors, got 1 dims}}
  tile.tma_store %c[%c0], %v {dims = array<i64: 64>} : <f32>, tensor<64xf32>
  return
}
