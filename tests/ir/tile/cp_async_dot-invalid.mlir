// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of tile.cp_async_dot (CpAsyncDotOp::verify in TileOps.cpp). Each
// case changes one thing of a valid 64x64 bf16 product.

func.func @cp_async_dot_valid(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 100, 72>, b_dims = array<i64: 72, 64>, block_k = 32 : i64, stages = 3 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  return
}

// -----

// mma.sync takes no 8-bit operands here: fp8 goes through tile.tma_dot.
func.func @fp8_operands(%a: !tile.ptr<f8E4M3FN>, %b: !tile.ptr<f8E4M3FN>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  // expected-error @+1 {{'tile.cp_async_dot' op operands must be bf16, f16 or f32 (as tf32), got 'f8E4M3FN'}}
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 32 : i64, stages = 3 : i64, trans_a = false, trans_b = true} : !tile.ptr<f8E4M3FN>, !tile.ptr<f8E4M3FN>, tensor<64x64xf32>
  return
}

// -----

// A K slice holds whole mma K steps (32 bytes).
func.func @block_k_partial_step(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  // expected-error @+1 {{'tile.cp_async_dot' op block_k must be a multiple of 16 elements up to 128, got 24}}
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 24 : i64, stages = 3 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  return
}

// -----

// At most 256 bytes of K per stored row.
func.func @block_k_too_wide(%a: !tile.ptr<f32>, %b: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  // expected-error @+1 {{'tile.cp_async_dot' op block_k must be a multiple of 8 elements up to 64, got 128}}
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 128>, b_dims = array<i64: 128, 64>, block_k = 128 : i64, stages = 3 : i64, trans_a = false, trans_b = false} : !tile.ptr<f32>, !tile.ptr<f32>, tensor<64x64xf32>
  return
}

// -----

// At most 256 rows or columns per program.
func.func @block_m_too_large(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<512x64xf32>
  // expected-error @+1 {{'tile.cp_async_dot' op block M and N must be powers of two in [16, 256], got 512 x 64}}
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 32 : i64, stages = 3 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<512x64xf32>
  return
}

// -----

// Shared by both main-loop dots.
func.func @stages(%a: !tile.ptr<f16>, %b: !tile.ptr<f16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  // expected-error @+1 {{'tile.cp_async_dot' op stages must be in [2, 8], got 9}}
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 64>, b_dims = array<i64: 64, 64>, block_k = 32 : i64, stages = 9 : i64, trans_a = false, trans_b = false} : !tile.ptr<f16>, !tile.ptr<f16>, tensor<64x64xf32>
  return
}

// -----

// cp.async moves whole 16-byte chunks: rows of 60 bf16 (120 bytes) would split one.
func.func @row_not_whole_chunks(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<64x64xf32>
  // expected-error @+1 {{'tile.cp_async_dot' op rows of a and b must be multiples of 16 bytes, got a row of 60 elements}}
  %r = tile.cp_async_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 64, 60>, b_dims = array<i64: 60, 64>, block_k = 32 : i64, stages = 3 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<64x64xf32>
  return
}
