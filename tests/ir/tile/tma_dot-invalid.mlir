// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of tile.tma_dot (TmaDotOp::verify in TileOps.cpp). Each case
// changes one thing of a valid 128x256 bf16 product (A [256, 320], B [320, 512]).

func.func @tma_dot_valid(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

// The runtime encodes tensor maps for kernel parameters only: a pointer computed in
// the kernel cannot be an operand.
func.func @tma_dot_operand_not_parameter(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  %p = tile.addptr %a, %c64 : !tile.ptr<bf16>, i32
  // expected-error @+1 {{'tile.tma_dot' op a and b must be kernel tensor parameters}}
  %r = tile.tma_dot %p, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

func.func @tma_dot_f32_operands(%a: !tile.ptr<f32>, %b: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op operands must be bf16, f16, f8E4M3FN or f8E5M2, got 'f32'}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<f32>, !tile.ptr<f32>, tensor<128x256xf32>
  return
}

// -----

func.func @tma_dot_mixed_operands(%a: !tile.ptr<bf16>, %b: !tile.ptr<f16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op a and b must have one element type}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<f16>, tensor<128x256xf32>
  return
}

// -----

// wgmma works on 64-row slabs: block M 32 is not one.
func.func @tma_dot_block_m(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<32x64xf32>
  // expected-error @+1 {{'tile.tma_dot' op block M must be 64, 128 or 256 (wgmma works on 64-row slabs), got 32}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<32x64xf32>
  return
}

// -----

func.func @tma_dot_block_m_too_large(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<512x64xf32>
  // expected-error @+1 {{'tile.tma_dot' op block M must be 64, 128 or 256 (wgmma works on 64-row slabs), got 512}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<512x64xf32>
  return
}

// -----

func.func @tma_dot_block_n(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x32xf32>
  // expected-error @+1 {{'tile.tma_dot' op block N must be 64, 128 or 256, got 32}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x32xf32>
  return
}

// -----

func.func @tma_dot_block_k(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op block_k must span a 32-, 64- or 128-byte swizzle row (16, 32 or 64 elements), got 48}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 48 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

func.func @tma_dot_stages(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op stages must be in [2, 8], got 1}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 1 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

// With trans_b, b is [N, K]: its K is b_dims[1] = 512, not a's 320.
func.func @tma_dot_inner_dims(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op inner dimensions differ: op(a) has K = 320, op(b) has K = 512}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

// TMA needs 16-byte rows: a [256, 17] bf16 a (K = 17, not transposed) has 34-byte rows.
func.func @tma_dot_row_bytes(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op rows of a and b must be multiples of 16 bytes, got a row of 17 elements}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 17>, b_dims = array<i64: 17, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

func.func @tma_dot_accumulator_type(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f16
  %acc = tile.splat %z : f16 -> tensor<128x256xf16>
  // expected-error @+1 {{'tile.tma_dot' op the accumulator must be a 2-D f32 tile, got 'tensor<128x256xf16>'}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf16>
  return
}

// -----

// A warp-specialized tma_dot's producer warps skip the rest of its block, so the block
// must be the kernel body or a loop directly in it ...
func.func @tma_dot_specialized_in_branch(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %p: i1) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  scf.if %p {
    // expected-error @+1 {{'tile.tma_dot' op with warp_specialize must sit in the kernel body or in a loop directly in it}}
    %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  }
  return
}

// -----

// ... and nothing computed after it may leave the block.
func.func @tma_dot_specialized_carries(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  %out = scf.for %i = %c0 to %c4 step %c1 iter_args(%carried = %acc) -> (tensor<128x256xf32>) : i32 {
    // expected-error @+1 {{'tile.tma_dot' op with warp_specialize: its loop may not carry values computed after it}}
    %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
    %s = arith.addf %r, %carried : tensor<128x256xf32>
    scf.yield %s : tensor<128x256xf32>
  }
  return
}

// -----

// wgmma reads 8-bit operands K-major only: b must come as [N, K] (trans_b).
func.func @tma_dot_fp8_mn_major(%a: !tile.ptr<f8E4M3FN>, %b: !tile.ptr<f8E4M3FN>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op 8-bit operands must both be K-major (trans_a = false, trans_b = true)}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 128 : i64, stages = 4 : i64, trans_a = false, trans_b = false} : !tile.ptr<f8E4M3FN>, !tile.ptr<f8E4M3FN>, tensor<128x256xf32>
  return
}

// -----

func.func @tma_dot_cluster_size(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op cluster_m must be 1 or 2, got 4}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true, cluster_m = 4 : i64} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

// Only the warp-specialized ring counts releases from both CTAs of a cluster.
func.func @tma_dot_cluster_in_order(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x256xf32>
  // expected-error @+1 {{'tile.tma_dot' op cluster_m = 2 needs warp_specialize}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, cluster_m = 2 : i64} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x256xf32>
  return
}

// -----

// An N-major b multicasts whole 64-column boxes: one per CTA at least.
func.func @tma_dot_cluster_narrow_b(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x64xf32>
  // expected-error @+1 {{'tile.tma_dot' op cluster_m = 2 with b as [K, N] needs block N of at least 128 (two 64-column boxes), got 64}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 320>, b_dims = array<i64: 320, 512>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true, cluster_m = 2 : i64} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x64xf32>
  return
}

// -----

func.func @tma_dot_a_in_registers_transposed(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  // expected-error @+1 {{'tile.tma_dot' op a_in_registers needs a as [M, K] (trans_a = false)}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 128>, b_dims = array<i64: 256, 128>, block_k = 64 : i64, stages = 4 : i64, trans_a = true, trans_b = false, a_in_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  return
}

// -----

// Rebalancing registers splits the loop holding the op by warp role: at the top level
// there is no loop to split.
func.func @tma_dot_rebalance_outside_loop(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f32
  %acc = tile.splat %z : f32 -> tensor<128x128xf32>
  // expected-error @+1 {{'tile.tma_dot' op with rebalance_registers must be warp-specialized and sit directly in a loop that carries no values}}
  %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 128>, b_dims = array<i64: 128, 128>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true, rebalance_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  return
}

// -----

func.func @tma_dot_rebalance_in_order(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %z = arith.constant 0.0 : f32
  scf.for %t = %c0 to %c4 step %c1 : i32 {
    %acc = tile.splat %z : f32 -> tensor<128x128xf32>
    // expected-error @+1 {{'tile.tma_dot' op with rebalance_registers must be warp-specialized}}
    %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 128>, b_dims = array<i64: 128, 128>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, rebalance_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  }
  return
}

// -----

// Each role keeps one warp-specialized product per loop copy.
func.func @tma_dot_rebalance_two_in_loop(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %z = arith.constant 0.0 : f32
  scf.for %t = %c0 to %c4 step %c1 : i32 {
    %acc = tile.splat %z : f32 -> tensor<128x128xf32>
    // expected-error @+1 {{'tile.tma_dot' op with rebalance_registers must be the only warp-specialized tma_dot of its loop}}
    %r = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 128>, b_dims = array<i64: 128, 128>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true, rebalance_registers = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
    %s = tile.tma_dot %a, %b[%c0, %c0], %acc {a_dims = array<i64: 256, 128>, b_dims = array<i64: 128, 128>, block_k = 64 : i64, stages = 4 : i64, trans_a = false, trans_b = false, warp_specialize = true} : !tile.ptr<bf16>, !tile.ptr<bf16>, tensor<128x128xf32>
  }
  return
}
