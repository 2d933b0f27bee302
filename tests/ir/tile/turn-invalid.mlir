// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of tile.turn_wait / tile.turn_pass (TileOps.cpp): they order the
// consumer warpgroups of a warp-specialized loop, so they sit inside one and are not
// the producer's.

func.func @turns_valid() attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  scf.for %i = %c0 to %c3 step %c1 : i32 {
    tile.turn_wait
    tile.turn_pass
  } {tile.warp_specialize}
  return
}

// -----

func.func @outside_loop() attributes {tile.kernel, tile.num_warps = 8 : i32} {
  // expected-error @+1 {{must sit inside a warp-specialized loop (an scf.for marked tile.warp_specialize)}}
  tile.turn_wait
  return
}

// -----

func.func @plain_loop() attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  scf.for %i = %c0 to %c3 step %c1 : i32 {
    // expected-error @+1 {{must sit inside a warp-specialized loop}}
    tile.turn_pass
  }
  return
}

// -----

func.func @on_producer() attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  scf.for %i = %c0 to %c3 step %c1 : i32 {
    // expected-error @+1 {{orders the consumer warpgroups and cannot run on the producer warpgroup}}
    tile.turn_wait {tile.producer}
  } {tile.warp_specialize}
  return
}
