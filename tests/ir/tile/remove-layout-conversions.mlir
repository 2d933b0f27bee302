// RUN: tokamax-opt %s -split-input-file -tile-remove-layout-conversions | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -tile-remove-layout-conversions | FileCheck %s --check-prefix=PIPE

// tile-remove-layout-conversions on hand-written layouts. Three 1-D blocked layouts of a
// 512-element tile, told apart by sizePerThread: #a = [4], #b = [8], #c = [2].

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 1: a conversion to the layout the tile already has goes.

// CHECK-LABEL: func.func @same_layout
// CHECK-SAME: (%[[X:.*]]: tensor<512xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[X]]
func.func @same_layout(%x: tensor<512xf32, #a>) -> tensor<512xf32, #a> {
  %0 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #a>
  return %0 : tensor<512xf32, #a>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#c = #tile.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 1: a round trip a -> b -> a disappears; a -> b -> c converts once.

// CHECK-LABEL: func.func @chains
// CHECK-SAME: (%[[X:[^:]*]]: tensor<512xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NEXT: %[[C:.*]] = tile.convert_layout %[[X]] : tensor<512xf32, #tile.blocked<{sizePerThread = [4]{{.*}} -> tensor<512xf32, #tile.blocked<{sizePerThread = [2]
// CHECK-NEXT: return %[[X]], %[[C]]
func.func @chains(%x: tensor<512xf32, #a>) -> (tensor<512xf32, #a>, tensor<512xf32, #c>) {
  %0 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %1 = tile.convert_layout %0 : tensor<512xf32, #b> -> tensor<512xf32, #a>
  %2 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %3 = tile.convert_layout %2 : tensor<512xf32, #b> -> tensor<512xf32, #c>
  return %1, %3 : tensor<512xf32, #a>, tensor<512xf32, #c>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2: splats, aranges and splat constants are rebuilt in the wanted layout. The
// splat keeps its other use in #a.

// CHECK-LABEL: func.func @cheap_producers
// CHECK-NOT: tile.convert_layout
// CHECK-DAG: %[[SA:.*]] = tile.splat %{{.*}} : f32 -> tensor<512xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-DAG: %[[SB:.*]] = tile.splat %{{.*}} : f32 -> tensor<512xf32, #tile.blocked<{sizePerThread = [8]
// CHECK-DAG: %[[R:.*]] = tile.arange 0 to 512 : tensor<512xi32, #tile.blocked<{sizePerThread = [8]
// CHECK-DAG: %[[K:.*]] = arith.constant dense<2.000000e+00> : tensor<512xf32, #tile.blocked<{sizePerThread = [8]
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[SA]], %[[SB]], %[[R]], %[[K]]
func.func @cheap_producers(%s: f32) -> (tensor<512xf32, #a>, tensor<512xf32, #b>, tensor<512xi32, #b>, tensor<512xf32, #b>) {
  %0 = tile.splat %s : f32 -> tensor<512xf32, #a>
  %1 = tile.convert_layout %0 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %2 = tile.arange 0 to 512 : tensor<512xi32, #a>
  %3 = tile.convert_layout %2 : tensor<512xi32, #a> -> tensor<512xi32, #b>
  %4 = arith.constant dense<2.0> : tensor<512xf32, #a>
  %5 = tile.convert_layout %4 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  return %0, %1, %3, %5 : tensor<512xf32, #a>, tensor<512xf32, #b>, tensor<512xi32, #b>, tensor<512xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2: convert(x * s + y) where x and y come from #b and s is a splat: the
// arithmetic is redone in #b and no conversion remains.

// CHECK-LABEL: func.func @elementwise_back
// CHECK-SAME: (%[[X:[^:]*]]: tensor<512xf32, #[[B:tile.blocked<{sizePerThread = \[8\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>, %[[Y:[^:]*]]: tensor<512xf32, #[[B]]>, %{{.*}}: f32)
// CHECK-NOT: tile.convert_layout
// CHECK: %[[S:.*]] = tile.splat %{{.*}} : f32 -> tensor<512xf32, #[[B]]>
// CHECK: %[[M:.*]] = arith.mulf %[[X]], %[[S]] : tensor<512xf32, #[[B]]>
// CHECK: %[[A:.*]] = arith.addf %[[M]], %[[Y]] : tensor<512xf32, #[[B]]>
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[A]]
func.func @elementwise_back(%x: tensor<512xf32, #b>, %y: tensor<512xf32, #b>, %s: f32) -> tensor<512xf32, #b> {
  %xa = tile.convert_layout %x : tensor<512xf32, #b> -> tensor<512xf32, #a>
  %ya = tile.convert_layout %y : tensor<512xf32, #b> -> tensor<512xf32, #a>
  %sa = tile.splat %s : f32 -> tensor<512xf32, #a>
  %0 = arith.mulf %xa, %sa : tensor<512xf32, #a>
  %1 = arith.addf %0, %ya : tensor<512xf32, #a>
  %2 = tile.convert_layout %1 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  return %2 : tensor<512xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#c = #tile.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2 through casts and math: convert(exp(cast(convert(x: #c -> #a)))) to #b becomes
// one conversion of the (narrower) source, #c -> #b, then the cast and exp in #b.

// CHECK-LABEL: func.func @through_cast
// CHECK-SAME: (%[[X:[^:]*]]: tensor<512xbf16, #tile.blocked<{sizePerThread = [2]
// CHECK: %[[C:.*]] = tile.convert_layout %[[X]] : tensor<512xbf16, #tile.blocked<{sizePerThread = [2]{{.*}} -> tensor<512xbf16, #[[B:tile.blocked<{sizePerThread = \[8\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK-NEXT: %[[F:.*]] = tile.cast %[[C]] : tensor<512xbf16, #[[B]]> to tensor<512xf32, #[[B]]>
// CHECK-NEXT: %[[E:.*]] = math.exp %[[F]] : tensor<512xf32, #[[B]]>
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[E]]
func.func @through_cast(%x: tensor<512xbf16, #c>) -> tensor<512xf32, #b> {
  %0 = tile.convert_layout %x : tensor<512xbf16, #c> -> tensor<512xbf16, #a>
  %1 = tile.cast %0 : tensor<512xbf16, #a> to tensor<512xf32, #a>
  %2 = math.exp %1 : tensor<512xf32, #a>
  %3 = tile.convert_layout %2 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  return %3 : tensor<512xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2 keeps the original when it has other users: the sum in #a is still stored,
// and a copy is computed in #b instead of converting it.

// CHECK-LABEL: func.func @keep_other_use
// CHECK-SAME: (%[[X:[^:]*]]: tensor<512xf32, #[[B:tile.blocked<{sizePerThread = \[8\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>, %[[Y:[^:]*]]: tensor<512xf32, #[[A:tile.blocked<{sizePerThread = \[4\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>)
// CHECK: %[[XA:.*]] = tile.convert_layout %[[X]] : tensor<512xf32, #[[B]]> -> tensor<512xf32, #[[A]]>
// CHECK: %[[SA:.*]] = arith.addf %[[XA]], %[[Y]] : tensor<512xf32, #[[A]]>
// CHECK: %[[SB:.*]] = math.sqrt %[[X]] : tensor<512xf32, #[[B]]>
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[SA]], %[[SB]]
func.func @keep_other_use(%x: tensor<512xf32, #b>, %y: tensor<512xf32, #a>) -> (tensor<512xf32, #a>, tensor<512xf32, #b>) {
  %0 = tile.convert_layout %x : tensor<512xf32, #b> -> tensor<512xf32, #a>
  %1 = arith.addf %0, %y : tensor<512xf32, #a>
  %2 = math.sqrt %0 : tensor<512xf32, #a>
  %3 = tile.convert_layout %2 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  return %1, %3 : tensor<512xf32, #a>, tensor<512xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#c = #tile.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2 does not trade one conversion for another: the source of %x (#c) is still
// needed in #a, so converting it to #b as well would not remove any.
// A tile that came from memory (an argument here) has to move.

// CHECK-LABEL: func.func @no_gain
// CHECK: %[[XA:.*]] = tile.convert_layout %{{.*}} -> tensor<512xf32, #tile.blocked<{sizePerThread = [4]
// CHECK: %[[E:.*]] = math.exp %[[XA]]
// CHECK: tile.convert_layout %[[E]] : {{.*}} -> tensor<512xf32, #tile.blocked<{sizePerThread = [8]
// CHECK: %[[L:.*]] = math.log %{{.*}} : tensor<512xf32, #tile.blocked<{sizePerThread = [4]
// CHECK: tile.convert_layout %[[L]] : {{.*}} -> tensor<512xf32, #tile.blocked<{sizePerThread = [8]
func.func @no_gain(%x: tensor<512xf32, #c>, %y: tensor<512xf32, #a>) -> (tensor<512xf32, #a>, tensor<512xf32, #b>, tensor<512xf32, #b>) {
  %0 = tile.convert_layout %x : tensor<512xf32, #c> -> tensor<512xf32, #a>
  %1 = math.exp %0 : tensor<512xf32, #a>
  %2 = tile.convert_layout %1 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %3 = math.log %y : tensor<512xf32, #a>
  %4 = tile.convert_layout %3 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  return %0, %2, %4 : tensor<512xf32, #a>, tensor<512xf32, #b>, tensor<512xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 3: conversions of one value to one layout share the first one, also inside a
// loop. A splat converted in the loop is rebuilt before the loop, where it was.

// CHECK-LABEL: func.func @duplicates
// CHECK-SAME: (%[[X:[^:]*]]: tensor<512xf32, #tile.blocked<{sizePerThread = [4]
// CHECK: %[[C:.*]] = tile.convert_layout %[[X]]
// CHECK-NOT: tile.convert_layout
// CHECK: %[[S:.*]] = tile.splat %{{.*}} -> tensor<512xf32, #tile.blocked<{sizePerThread = [8]
// CHECK-NOT: tile.convert_layout
// CHECK: scf.for
// CHECK: %[[M:.*]] = arith.mulf %{{.*}}, %[[C]]
// CHECK: arith.addf %[[M]], %[[S]]
// CHECK-NOT: tile.convert_layout
// CHECK: return %[[C]]
func.func @duplicates(%x: tensor<512xf32, #a>, %s: f32, %n: i32) -> (tensor<512xf32, #b>, tensor<512xf32, #b>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %0 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %s0 = tile.splat %s : f32 -> tensor<512xf32, #a>
  %1 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %0) -> (tensor<512xf32, #b>) : i32 {
    %2 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
    %3 = arith.mulf %acc, %2 : tensor<512xf32, #b>
    %4 = tile.convert_layout %s0 : tensor<512xf32, #a> -> tensor<512xf32, #b>
    %5 = arith.addf %3, %4 : tensor<512xf32, #b>
    scf.yield %5 : tensor<512xf32, #b>
  }
  %6 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
  return %6, %1 : tensor<512xf32, #b>, tensor<512xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Conversions in sibling branches: neither dominates the other, both stay.

// CHECK-LABEL: func.func @branches
// CHECK: scf.if
// CHECK: tile.convert_layout
// CHECK: } else {
// CHECK: tile.convert_layout
func.func @branches(%x: tensor<512xf32, #a>, %c: i1) -> tensor<512xf32, #b> {
  %0 = scf.if %c -> (tensor<512xf32, #b>) {
    %1 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
    scf.yield %1 : tensor<512xf32, #b>
  } else {
    %2 = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
    %3 = arith.addf %2, %2 : tensor<512xf32, #b>
    scf.yield %3 : tensor<512xf32, #b>
  }
  return %0 : tensor<512xf32, #b>
}

// -----

#blk = #tile.blocked<{sizePerThread = [1, 4], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>
#mma = #tile.mma<{warpsPerCTA = [2, 2]}>
#opa = #tile.dot_op<{opIdx = 0, parent = #mma, kWidth = 2}>
#opb = #tile.dot_op<{opIdx = 1, parent = #mma, kWidth = 2}>

// Rule 4: conversions into dot operands stay, even of a value whose producers could be
// rebuilt in that layout and even when duplicated (each dot stages its own operands),
// and so do conversions of the dot's result. A conversion into the reduction stays
// although its source could be rebuilt. Exact no-ops go.

// CHECK-LABEL: func.func @fixed_layouts
// CHECK: %[[XB:.*]] = tile.convert_layout %{{.*}} -> tensor<32x32xbf16, #tile.blocked
// CHECK: %[[E:.*]] = math.exp %[[XB]]
// CHECK: %[[A1:.*]] = tile.convert_layout %[[E]] : {{.*}} -> tensor<32x32xbf16, #tile.dot_op<{opIdx = 0
// CHECK: %[[B1:.*]] = tile.convert_layout %{{.*}} -> tensor<32x32xbf16, #tile.dot_op<{opIdx = 1
// CHECK: %[[D1:.*]] = tile.dot %[[A1]], %[[B1]], %{{.*}}
// CHECK: %[[A2:.*]] = tile.convert_layout %[[E]] : {{.*}} -> tensor<32x32xbf16, #tile.dot_op<{opIdx = 0
// CHECK: %[[B2:.*]] = tile.convert_layout %{{.*}} -> tensor<32x32xbf16, #tile.dot_op<{opIdx = 1
// CHECK: %[[D2:.*]] = tile.dot %[[A2]], %[[B2]], %[[D1]]
// CHECK: %[[R1:.*]] = tile.convert_layout %[[D2]] : {{.*}} -> tensor<32x32xf32, #tile.blocked
// CHECK: %[[R2:.*]] = tile.convert_layout %[[D2]] : {{.*}} -> tensor<32x32xf32, #tile.blocked
// CHECK: %[[T:.*]] = tile.convert_layout %[[S:.*]] : {{.*}} -> tensor<32x32xf32, #tile.mma
// CHECK: tile.reduce sum %[[T]]
// CHECK: return
func.func @fixed_layouts(%x: tensor<32x32xbf16, #mma>, %y: tensor<32x32xbf16, #blk>, %acc: tensor<32x32xf32, #mma>, %s: f32)
    -> (tensor<32x32xf32, #blk>, tensor<32x32xf32, #blk>, tensor<32xf32, #tile.slice<{dim = 1, parent = #mma}>>) {
  %xb = tile.convert_layout %x : tensor<32x32xbf16, #mma> -> tensor<32x32xbf16, #blk>
  %e = math.exp %xb : tensor<32x32xbf16, #blk>
  %a1 = tile.convert_layout %e : tensor<32x32xbf16, #blk> -> tensor<32x32xbf16, #opa>
  %b1 = tile.convert_layout %y : tensor<32x32xbf16, #blk> -> tensor<32x32xbf16, #opb>
  %d1 = tile.dot %a1, %b1, %acc : tensor<32x32xbf16, #opa>, tensor<32x32xbf16, #opb> -> tensor<32x32xf32, #mma>
  %a2 = tile.convert_layout %e : tensor<32x32xbf16, #blk> -> tensor<32x32xbf16, #opa>
  %b2 = tile.convert_layout %y : tensor<32x32xbf16, #blk> -> tensor<32x32xbf16, #opb>
  %d2 = tile.dot %a2, %b2, %d1 : tensor<32x32xbf16, #opa>, tensor<32x32xbf16, #opb> -> tensor<32x32xf32, #mma>
  %d2c = tile.convert_layout %d2 : tensor<32x32xf32, #mma> -> tensor<32x32xf32, #mma>
  %r1 = tile.convert_layout %d2c : tensor<32x32xf32, #mma> -> tensor<32x32xf32, #blk>
  %r2 = tile.convert_layout %d2c : tensor<32x32xf32, #mma> -> tensor<32x32xf32, #blk>
  %sp = tile.splat %s : f32 -> tensor<32x32xf32, #blk>
  %t = tile.convert_layout %sp : tensor<32x32xf32, #blk> -> tensor<32x32xf32, #mma>
  %sum = tile.reduce sum %t axis = 1 : tensor<32x32xf32, #mma> -> tensor<32xf32, #tile.slice<{dim = 1, parent = #mma}>>
  return %r1, %r2, %sum : tensor<32x32xf32, #blk>, tensor<32x32xf32, #blk>, tensor<32xf32, #tile.slice<{dim = 1, parent = #mma}>>
}

// -----

// After tile-assign-layouts (PIPE): a splat first operand and a loop body that converts
// one loaded tile twice (operand and yield) keep one conversion of it, and the splat is
// built in the layout it is used in.

// PIPE-LABEL: func.func @after_assign
// PIPE: %[[S:.*]] = tile.splat %{{.*}} : f32 -> tensor<4x256xf32, #[[B:tile.blocked<{sizePerThread = \[1, 8\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// PIPE: scf.for
// PIPE: %[[L:.*]] = tile.block_load {{.*}} -> tensor<4x256xf32, #[[F:tile.blocked<{sizePerThread = \[1, 4\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// PIPE-NEXT: %[[C:.*]] = tile.convert_layout %[[L]] : tensor<4x256xf32, #[[F]]> -> tensor<4x256xf32, #[[B]]>
// PIPE-NEXT: %[[M:.*]] = arith.mulf %[[S]], %[[C]] : tensor<4x256xf32, #[[B]]>
// PIPE-NEXT: %[[SUM:.*]] = arith.addf %{{.*}}, %[[M]] : tensor<4x256xf32, #[[B]]>
// PIPE-NEXT: scf.yield %[[SUM]], %[[C]]
// PIPE-NOT: tile.convert_layout
// PIPE: return
func.func @after_assign(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>, %n: i32, %s: f32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %sp = tile.splat %s : f32 -> tensor<4x256xf32>
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %1, %last = %1) -> (tensor<4x256xf32>, tensor<4x256xf32>) : i32 {
    %3 = tile.block_load %y[%i, %c0] {dims = array<i64: 1024, 256>, strides = array<i64: 256, 1>} : <f32> -> tensor<4x256xf32>
    %4 = arith.mulf %sp, %3 : tensor<4x256xf32>
    %5 = arith.addf %acc, %4 : tensor<4x256xf32>
    scf.yield %5, %3 : tensor<4x256xf32>, tensor<4x256xf32>
  }
  %6 = tile.cast %2#0 : tensor<4x256xf32> to tensor<4x256xbf16>
  tile.block_store %x[%c0, %c0], %6 {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16>, tensor<4x256xbf16>
  return
}

// -----

#a = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [8], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2 with as many conversions as before: one moved before a widening cast moves
// half the bytes, so the bf16 tile moves and the cast follows; before a narrowing cast
// it would move more, so that conversion stays where it is.

// CHECK-LABEL: func.func @widening_cast
// CHECK-SAME: (%[[X:[^:]*]]: tensor<512xbf16, #[[A:tile.blocked<{sizePerThread = \[4\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>, %[[Y:[^:]*]]: tensor<512xf32, #[[A]]>)
// CHECK-NEXT: %[[XB:.*]] = tile.convert_layout %[[X]] : tensor<512xbf16, #[[A]]> -> tensor<512xbf16, #[[B:tile.blocked<{sizePerThread = \[8\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK-NEXT: %[[W:.*]] = tile.cast %[[XB]] : tensor<512xbf16, #[[B]]> to tensor<512xf32, #[[B]]>
// CHECK-NEXT: %[[N:.*]] = tile.cast %[[Y]] : tensor<512xf32, #[[A]]> to tensor<512xbf16, #[[A]]>
// CHECK-NEXT: %[[NB:.*]] = tile.convert_layout %[[N]] : tensor<512xbf16, #[[A]]> -> tensor<512xbf16, #[[B]]>
// CHECK-NEXT: return %[[W]], %[[NB]]
func.func @widening_cast(%x: tensor<512xbf16, #a>, %y: tensor<512xf32, #a>) -> (tensor<512xf32, #b>, tensor<512xbf16, #b>) {
  %0 = tile.cast %x : tensor<512xbf16, #a> to tensor<512xf32, #a>
  %1 = tile.convert_layout %0 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %2 = tile.cast %y : tensor<512xf32, #a> to tensor<512xbf16, #a>
  %3 = tile.convert_layout %2 : tensor<512xbf16, #a> -> tensor<512xbf16, #b>
  return %1, %3 : tensor<512xf32, #b>, tensor<512xbf16, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 2: a short 1-D block load in a loop (and the math on it) is read again in the
// wanted layout instead of moving through shared memory at every step; a long one, or
// one outside a loop, is converted.

// CHECK-LABEL: func.func @reread_short_load
// CHECK: scf.for
// CHECK-NOT: tile.convert_layout
// CHECK: %[[L:.*]] = tile.block_load %{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: arith.mulf %[[L]], %{{.*}} : tensor<128xf32, #tile.blocked<{sizePerThread = [4]
// CHECK-NOT: tile.convert_layout
// CHECK: scf.yield
func.func @reread_short_load(%p: !tile.ptr<f32>, %n: i32) -> tensor<128xf32, #b> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %init = arith.constant dense<0.0> : tensor<128xf32, #b>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (tensor<128xf32, #b>) : i32 {
    %0 = tile.block_load %p[%i] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
    %k = arith.constant dense<1.442695e+00> : tensor<128xf32, #a>
    %1 = arith.mulf %0, %k : tensor<128xf32, #a>
    %2 = tile.convert_layout %1 : tensor<128xf32, #a> -> tensor<128xf32, #b>
    %3 = arith.addf %acc, %2 : tensor<128xf32, #b>
    scf.yield %3 : tensor<128xf32, #b>
  }
  return %r : tensor<128xf32, #b>
}

// CHECK-LABEL: func.func @convert_long_or_outside_load
// CHECK: tile.block_load %{{.*}} -> tensor<512xf32, #tile.blocked<{sizePerThread = [1]
// CHECK-NEXT: tile.convert_layout
// CHECK-NEXT: tile.block_load %{{.*}} -> tensor<128xf32, #tile.blocked<{sizePerThread = [1]
// CHECK-NEXT: tile.convert_layout
func.func @convert_long_or_outside_load(%p: !tile.ptr<f32>, %i: i32) -> (tensor<512xf32, #b>, tensor<128xf32, #b>) {
  %0 = tile.block_load %p[%i] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<512xf32, #a>
  %1 = tile.convert_layout %0 : tensor<512xf32, #a> -> tensor<512xf32, #b>
  %2 = tile.block_load %p[%i] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<128xf32, #a>
  %3 = tile.convert_layout %2 : tensor<128xf32, #a> -> tensor<128xf32, #b>
  return %1, %3 : tensor<512xf32, #b>, tensor<128xf32, #b>
}

// -----

#a = #tile.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b = #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>

// Rule 4: a conversion in a loop of a value from before the loop runs once, before it
// (here before both loops); one of a value the loop computes stays in it.

// CHECK-LABEL: func.func @hoist_invariant
// CHECK: %[[L:.*]] = tile.block_load
// CHECK-NEXT: %[[C:.*]] = tile.convert_layout %[[L]]
// CHECK-NEXT: scf.for
// CHECK-NEXT: scf.for
// CHECK-NEXT: tile.block_load
// CHECK-NEXT: tile.convert_layout
// CHECK-NEXT: arith.addf %{{.*}}, %[[C]]
func.func @hoist_invariant(%p: !tile.ptr<f32>, %n: i32) -> tensor<512xf32, #b> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %init = arith.constant dense<0.0> : tensor<512xf32, #b>
  %x = tile.block_load %p[%c0] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<512xf32, #a>
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (tensor<512xf32, #b>) : i32 {
    %s = scf.for %j = %c0 to %n step %c1 iter_args(%inner = %acc) -> (tensor<512xf32, #b>) : i32 {
      %y = tile.block_load %p[%j] {dims = array<i64: 1000>, strides = array<i64: 1>} : <f32> -> tensor<512xf32, #a>
      %yb = tile.convert_layout %y : tensor<512xf32, #a> -> tensor<512xf32, #b>
      %xb = tile.convert_layout %x : tensor<512xf32, #a> -> tensor<512xf32, #b>
      %0 = arith.addf %yb, %xb : tensor<512xf32, #b>
      %1 = arith.addf %inner, %0 : tensor<512xf32, #b>
      scf.yield %1 : tensor<512xf32, #b>
    }
    scf.yield %s : tensor<512xf32, #b>
  }
  return %r : tensor<512xf32, #b>
}

// -----

#bl = #tile.blocked<{sizePerThread = [1, 1], threadsPerWarp = [32, 1], warpsPerCTA = [4, 1], order = [1, 0]}>
#m = #tile.mma<{warpsPerCTA = [4, 1]}>

// Rule 2 through expand_dims and broadcast: a store's pointer grid, rows x stride +
// cols built in the default layout, is rebuilt in the values' mma layout (the row and
// column ranges in its slices), so no [64, 64] tile of pointers goes through shared memory.

// CHECK-LABEL: func.func @pointer_grid_follows_values
// CHECK-NOT: tile.convert_layout
// CHECK-DAG: tile.arange 0 to 64 : tensor<64xi32, #tile.slice<{dim = 1, parent = #tile.mma
// CHECK-DAG: tile.arange 0 to 64 : tensor<64xi32, #tile.slice<{dim = 0, parent = #tile.mma
// CHECK: %[[P:.*]] = tile.addptr {{.*}} : tensor<64x64x!tile.ptr<bf16>, #tile.mma<{warpsPerCTA = [4, 1]}>>
// CHECK-NOT: tile.convert_layout
// CHECK: tile.store %[[P]]
func.func @pointer_grid_follows_values(%p: !tile.ptr<bf16>, %r0: i32, %v: tensor<64x64xbf16, #m>) {
  %c64 = arith.constant 64 : i32
  %a = tile.arange 0 to 64 : tensor<64xi32, #tile.slice<{dim = 1, parent = #bl}>>
  %s = tile.splat %r0 : i32 -> tensor<64xi32, #tile.slice<{dim = 1, parent = #bl}>>
  %rows = arith.addi %s, %a : tensor<64xi32, #tile.slice<{dim = 1, parent = #bl}>>
  %e = tile.expand_dims %rows axis = 1 : tensor<64xi32, #tile.slice<{dim = 1, parent = #bl}>> -> tensor<64x1xi32, #bl>
  %st = tile.splat %c64 : i32 -> tensor<64x1xi32, #bl>
  %mul = arith.muli %e, %st : tensor<64x1xi32, #bl>
  %b = tile.broadcast %mul : tensor<64x1xi32, #bl> -> tensor<64x64xi32, #bl>
  %c = tile.arange 0 to 64 : tensor<64xi32, #tile.slice<{dim = 0, parent = #bl}>>
  %ce = tile.expand_dims %c axis = 0 : tensor<64xi32, #tile.slice<{dim = 0, parent = #bl}>> -> tensor<1x64xi32, #bl>
  %cb = tile.broadcast %ce : tensor<1x64xi32, #bl> -> tensor<64x64xi32, #bl>
  %off = arith.addi %b, %cb : tensor<64x64xi32, #bl>
  %base = tile.splat %p : !tile.ptr<bf16> -> tensor<64x64x!tile.ptr<bf16>, #bl>
  %ptrs = tile.addptr %base, %off : tensor<64x64x!tile.ptr<bf16>, #bl>, tensor<64x64xi32, #bl>
  %cv = tile.convert_layout %ptrs : tensor<64x64x!tile.ptr<bf16>, #bl> -> tensor<64x64x!tile.ptr<bf16>, #m>
  tile.store %cv, %v : tensor<64x64x!tile.ptr<bf16>, #m>, tensor<64x64xbf16, #m>
  return
}
