// RUN: tokamax-opt %s -split-input-file -canonicalize | FileCheck %s

// tile.convert_layout folds and canonicalization patterns. The patterns only compare
// types, so the encodings here are plain string attributes standing for three layouts
// "A", "B", "C" (hand-written #tile.blocked layouts do not parse, see
// layout-roundtrip.mlir; assign-layouts.mlir covers the folds on real layouts).

// A conversion to the type the tile already has folds away.

// CHECK-LABEL: func.func @same_type
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32, "A">)
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[X]]
func.func @same_type(%x: tensor<4x8xf32, "A">) -> tensor<4x8xf32, "A"> {
  %0 = tile.convert_layout %x : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "A">
  return %0 : tensor<4x8xf32, "A">
}

// -----

// Without layouts too.

// CHECK-LABEL: func.func @same_type_no_layout
// CHECK-SAME: (%[[X:.*]]: tensor<16xi32>)
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[X]]
func.func @same_type_no_layout(%x: tensor<16xi32>) -> tensor<16xi32> {
  %0 = tile.convert_layout %x : tensor<16xi32> -> tensor<16xi32>
  return %0 : tensor<16xi32>
}

// -----

// convert(convert(x)) converts x once.

// CHECK-LABEL: func.func @convert_of_convert
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32, "A">)
// CHECK-NEXT: %[[C:.*]] = tile.convert_layout %[[X]] : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "C">
// CHECK-NEXT: return %[[C]]
func.func @convert_of_convert(%x: tensor<4x8xf32, "A">) -> tensor<4x8xf32, "C"> {
  %0 = tile.convert_layout %x : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "B">
  %1 = tile.convert_layout %0 : tensor<4x8xf32, "B"> -> tensor<4x8xf32, "C">
  return %1 : tensor<4x8xf32, "C">
}

// -----

// A round trip A -> B -> A disappears entirely.

// CHECK-LABEL: func.func @round_trip
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xbf16, "A">)
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[X]]
func.func @round_trip(%x: tensor<4x8xbf16, "A">) -> tensor<4x8xbf16, "A"> {
  %0 = tile.convert_layout %x : tensor<4x8xbf16, "A"> -> tensor<4x8xbf16, "B">
  %1 = tile.convert_layout %0 : tensor<4x8xbf16, "B"> -> tensor<4x8xbf16, "A">
  return %1 : tensor<4x8xbf16, "A">
}

// -----

// A chain of three collapses to one conversion; an intermediate with another use stays.

// CHECK-LABEL: func.func @chain_with_use
// CHECK-SAME: (%[[X:.*]]: tensor<8xf16, "A">)
// CHECK-DAG: %[[B:.*]] = tile.convert_layout %[[X]] : tensor<8xf16, "A"> -> tensor<8xf16, "B">
// CHECK-DAG: %[[D:.*]] = tile.convert_layout %[[X]] : tensor<8xf16, "A"> -> tensor<8xf16, "D">
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[B]], %[[D]]
func.func @chain_with_use(%x: tensor<8xf16, "A">) -> (tensor<8xf16, "B">, tensor<8xf16, "D">) {
  %0 = tile.convert_layout %x : tensor<8xf16, "A"> -> tensor<8xf16, "B">
  %1 = tile.convert_layout %0 : tensor<8xf16, "B"> -> tensor<8xf16, "C">
  %2 = tile.convert_layout %1 : tensor<8xf16, "C"> -> tensor<8xf16, "D">
  return %0, %2 : tensor<8xf16, "B">, tensor<8xf16, "D">
}

// -----

// Splats and aranges are rebuilt directly in the converted layout.

// CHECK-LABEL: func.func @splat
// CHECK-SAME: (%[[S:.*]]: f32)
// CHECK-NEXT: %[[T:.*]] = tile.splat %[[S]] : f32 -> tensor<4x8xf32, "B">
// CHECK-NEXT: return %[[T]]
func.func @splat(%s: f32) -> tensor<4x8xf32, "B"> {
  %0 = tile.splat %s : f32 -> tensor<4x8xf32, "A">
  %1 = tile.convert_layout %0 : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "B">
  return %1 : tensor<4x8xf32, "B">
}

// -----

// CHECK-LABEL: func.func @arange
// CHECK-NEXT: %[[T:.*]] = tile.arange 16 to 48 : tensor<32xi32, "B">
// CHECK-NEXT: return %[[T]]
func.func @arange() -> tensor<32xi32, "B"> {
  %0 = tile.arange 16 to 48 : tensor<32xi32, "A">
  %1 = tile.convert_layout %0 : tensor<32xi32, "A"> -> tensor<32xi32, "B">
  return %1 : tensor<32xi32, "B">
}

// -----

// A splat used both before and after conversion is rebuilt for the conversion and kept
// for its other use.

// CHECK-LABEL: func.func @splat_two_uses
// CHECK-SAME: (%[[S:.*]]: i32)
// CHECK-DAG: %[[A:.*]] = tile.splat %[[S]] : i32 -> tensor<64xi32, "A">
// CHECK-DAG: %[[B:.*]] = tile.splat %[[S]] : i32 -> tensor<64xi32, "B">
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[A]], %[[B]]
func.func @splat_two_uses(%s: i32) -> (tensor<64xi32, "A">, tensor<64xi32, "B">) {
  %0 = tile.splat %s : i32 -> tensor<64xi32, "A">
  %1 = tile.convert_layout %0 : tensor<64xi32, "A"> -> tensor<64xi32, "B">
  return %0, %1 : tensor<64xi32, "A">, tensor<64xi32, "B">
}

// -----

// A conversion of a value that must move (a function argument, a load) stays.

// CHECK-LABEL: func.func @real_conversion
// CHECK: tile.convert_layout %{{.*}} : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "B">
func.func @real_conversion(%x: tensor<4x8xf32, "A">) -> tensor<4x8xf32, "B"> {
  %0 = tile.convert_layout %x : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "B">
  return %0 : tensor<4x8xf32, "B">
}

// -----

// Unused conversions are pure and go away.

// CHECK-LABEL: func.func @dead
// CHECK-NOT: tile.convert_layout
// CHECK: return
func.func @dead(%x: tensor<4x8xf32, "A">) {
  %0 = tile.convert_layout %x : tensor<4x8xf32, "A"> -> tensor<4x8xf32, "B">
  return
}

// -----

// A warp-specialized loop of one step folds into its parent; its turns (ping-pong
// between the consumer warpgroups) go with it: one step has no turns to take. A loop of
// more steps keeps them.

// CHECK-LABEL: func.func @one_step_turns
// CHECK-NOT: scf.for
// CHECK-NOT: tile.turn_wait
// CHECK-NOT: tile.turn_pass
// CHECK: return
func.func @one_step_turns() attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  scf.for %i = %c0 to %c1 step %c1 : i32 {
    tile.turn_wait
    tile.turn_pass
  } {tile.warp_specialize}
  return
}

// CHECK-LABEL: func.func @three_step_turns
// CHECK: scf.for
// CHECK-NEXT: tile.turn_wait
// CHECK-NEXT: tile.turn_pass
// CHECK: tile.warp_specialize
func.func @three_step_turns() attributes {tile.kernel, tile.num_warps = 8 : i32} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c3 = arith.constant 3 : i32
  scf.for %i = %c0 to %c3 step %c1 : i32 {
    tile.turn_wait
    tile.turn_pass
  } {tile.warp_specialize}
  return
}
