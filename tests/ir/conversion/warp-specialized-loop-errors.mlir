// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize -tile-allocate-shared -tile-insert-barriers -convert-tile-to-llvm=arch=sm_90a -verify-diagnostics

// What a warp-specialized loop's producer may not do (LowerSpecializedLoop.cpp): use a
// value of the consumers, or anything with side effects besides TMA copies and mbarriers.

func.func @uses_consumer_value(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%n = %c0) -> (i32) : i32 {
    // expected-error @+1 {{runs on the producer warpgroup but uses a value of the consumers}}
    %k0 = arith.muli %n, %c64 {tile.producer} : i32
    %t = tile.async_block_load %a[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    %m = arith.addi %n, %c1 : i32
    scf.yield %m : i32
  } {tile.warp_specialize}
  return
}

// -----

// The producer may not use a value the consumers carry through the steps.

func.func @producer_uses_step_carried(%a: !tile.ptr<bf16>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.mbarriers = array<i64: 1>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  scf.for %t = %c0 to %c3 step %c1 : i32 {
    %r = scf.for %s = %c0 to %c3 step %c1 iter_args(%n = %c0) -> (i32) : i32 {
      // expected-error @+1 {{runs on the producer warpgroup but uses a value of the consumers}}
      %k0 = arith.muli %n, %c64 {tile.producer} : i32
      %t0 = tile.async_block_load %a[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 0 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
      %m = arith.addi %n, %c1 : i32
      scf.yield %m : i32
    }
  } {tile.warp_specialize}
  return
}

// -----

func.func @producer_store(%a: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.wgmma_dots, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %z = arith.constant 0.0 : f32
  scf.for %i = %c0 to %c3 step %c1 : i32 {
    %t = tile.splat %z {tile.producer} : f32 -> tensor<64xf32>
    // expected-error @+1 {{cannot run on the producer warpgroup of a warp-specialized loop}}
    tile.block_store %a[%i], %t {tile.producer, dims = array<i64: 1000>, strides = array<i64: 1>} : <f32>, tensor<64xf32>
  } {tile.warp_specialize}
  return
}

// -----

// A barrier among the consumers inside a turn (here: A read from registers into its
// operand layout through shared memory) would deadlock: the other warpgroup waits for
// the turn before it could reach the barrier.
func.func @barrier_in_turn(%a: !tile.ptr<bf16>, %b: !tile.ptr<bf16>, %o: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 8 : i32, tile.mma_rows_per_warp, tile.wgmma_dots, tile.mbarriers = array<i64: 1, 256>, tile.grid = array<i64: 1, 1, 1>} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  %c64 = arith.constant 64 : i32
  %z = arith.constant 0.0 : f32
  %acc0 = tile.splat %z : f32 -> tensor<128x64xf32>
  %r = scf.for %i = %c0 to %c3 step %c1 iter_args(%acc = %acc0) -> (tensor<128x64xf32>) : i32 {
    %parity = arith.xori %c1, %c0 {tile.producer} : i32
    tile.mbarrier_wait %c1, %parity {tile.producer}
    %k0 = arith.muli %i, %c64 {tile.producer} : i32
    %bt = tile.async_block_load %b[%c0, %k0] slot %c0 barrier %c0 {tile.producer, dims = array<i64: 64, 1000>, strides = array<i64: 1000, 1>, block = array<i64: 64, 64>, buffer = 1 : i64, slots = 1 : i64} : <bf16> -> tensor<64x64xbf16>
    tile.mbarrier_wait %c0, %c0
    %at = tile.block_load %a[%c0, %c0] {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<128x64xbf16>
    tile.turn_wait
    %bT = tile.trans %bt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %s = tile.dot %at, %bT, %acc : tensor<128x64xbf16>, tensor<64x64xbf16> -> tensor<128x64xf32>
    // expected-error @+1 {{ends a turn with a barrier among the consumers inside it}}
    tile.turn_pass
    tile.mbarrier_arrive %c1
    scf.yield %s : tensor<128x64xf32>
  } {tile.warp_specialize}
  tile.block_store %o[%c0, %c0], %r {dims = array<i64: 128, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<128x64xf32>
  return
}
