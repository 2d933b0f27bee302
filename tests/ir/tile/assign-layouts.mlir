// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts | FileCheck %s
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -canonicalize | FileCheck %s --check-prefix=CANON
// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts=num-warps=8 | FileCheck %s --check-prefix=W8

// Block loads anchor on the default blocked layout: one 16-byte vector per thread along
// the last dimension (8 x bf16), lanes along the row, one row per warp. With 8 warps
// (W8) the 4 extra warps replicate rows: warpsPerCTA = [8, 1] over 4 rows.

// CHECK-LABEL: func.func @block_load_bf16
// CHECK-SAME: tile.num_warps = 4 : i32
// CHECK: tile.block_load {{.*}} -> tensor<4x256xbf16, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>>
// W8-LABEL: func.func @block_load_bf16
// W8-SAME: tile.num_warps = 8 : i32
// W8: tile.block_load {{.*}} -> tensor<4x256xbf16, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [1, 32], warpsPerCTA = [8, 1], order = [1, 0]}>>
func.func @block_load_bf16(%x: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %t = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  return
}

// -----

// 4 x f32 per thread; 64 columns take 16 lanes, the other 2 lanes go to rows.

// CHECK-LABEL: func.func @block_load_f32
// CHECK: tile.block_load {{.*}} -> tensor<32x64xf32, #tile.blocked<{sizePerThread = [1, 4], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>>
func.func @block_load_f32(%x: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %t = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  return
}

// -----

// 1-D: 2 x f64 (16 bytes) per thread; 16 x i8, where warps left over after covering the
// tile wrap around along dimension 0.

// CHECK-LABEL: func.func @block_load_1d
// CHECK: tile.block_load {{.*}} -> tensor<1024xf64, #tile.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>>
// CHECK: tile.block_load {{.*}} -> tensor<1024xi8, #tile.blocked<{sizePerThread = [16], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>>
func.func @block_load_1d(%x: !tile.ptr<f64>, %y: !tile.ptr<i8>) {
  %c0 = arith.constant 0 : i32
  %a = tile.block_load %x[%c0] {dims = array<i64: 1024>, strides = array<i64: 1>} : <f64> -> tensor<1024xf64>
  %b = tile.block_load %y[%c0] {dims = array<i64: 1024>, strides = array<i64: 1>} : <i8> -> tensor<1024xi8>
  return
}

// -----

// A kernel's own tile.num_warps wins over the pass option.

// CHECK-LABEL: func.func @kernel_num_warps
// CHECK-SAME: tile.num_warps = 2 : i32
// CHECK: -> tensor<8x256xbf16, #tile.blocked<{sizePerThread = [1, 8], threadsPerWarp = [1, 32], warpsPerCTA = [2, 1], order = [1, 0]}>>
// W8-LABEL: func.func @kernel_num_warps
// W8-SAME: tile.num_warps = 2 : i32
// W8: warpsPerCTA = [2, 1]
func.func @kernel_num_warps(%x: !tile.ptr<bf16>) attributes {tile.num_warps = 2 : i32} {
  %c0 = arith.constant 0 : i32
  %t = tile.block_load %x[%c0, %c0] {dims = array<i64: 8, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<8x256xbf16>
  return
}

// -----

// Elementwise ops and casts take their operand's layout (not the default layout of their
// own element type); reductions give slice layouts; expand_dims of a slice along the
// reduced dimension returns the parent; broadcast keeps the layout.

// CHECK-LABEL: func.func @row_softmax
// CHECK: %[[X:.*]] = tile.block_load {{.*}} -> tensor<4x256xbf16, #[[B:tile.blocked<{sizePerThread = \[1, 8\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// CHECK: %[[F:.*]] = tile.cast %[[X]] : {{.*}} to tensor<4x256xf32, #[[B]]>
// CHECK: %[[M:.*]] = tile.reduce max %[[F]] axis = 1 : tensor<4x256xf32, #[[B]]> -> tensor<4xf32, #tile.slice<{dim = 1, parent = #[[B]]}>>
// CHECK: %[[E:.*]] = tile.expand_dims %[[M]] axis = 1 : {{.*}} -> tensor<4x1xf32, #[[B]]>
// CHECK: %[[BC:.*]] = tile.broadcast %[[E]] : {{.*}} -> tensor<4x256xf32, #[[B]]>
// CHECK: %[[D:.*]] = arith.subf %[[F]], %[[BC]] : tensor<4x256xf32, #[[B]]>
// CHECK: %[[EXP:.*]] = math.exp %[[D]] : tensor<4x256xf32, #[[B]]>
// CHECK: tile.reduce sum %[[EXP]] axis = 1 : tensor<4x256xf32, #[[B]]> -> tensor<4xf32, #tile.slice<{dim = 1, parent = #[[B]]}>>
// CHECK-NOT: tile.convert_layout
// CHECK: return
func.func @row_softmax(%x: !tile.ptr<bf16>, %y: !tile.ptr<bf16>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2 = tile.reduce max %1 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  %3 = tile.expand_dims %2 axis = 1 : tensor<4xf32> -> tensor<4x1xf32>
  %4 = tile.broadcast %3 : tensor<4x1xf32> -> tensor<4x256xf32>
  %5 = arith.subf %1, %4 : tensor<4x256xf32>
  %6 = math.exp %5 : tensor<4x256xf32>
  %7 = tile.reduce sum %6 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  %8 = tile.expand_dims %7 axis = 1 : tensor<4xf32> -> tensor<4x1xf32>
  %9 = tile.broadcast %8 : tensor<4x1xf32> -> tensor<4x256xf32>
  %10 = arith.divf %6, %9 : tensor<4x256xf32>
  %11 = tile.cast %10 : tensor<4x256xf32> to tensor<4x256xbf16>
  tile.block_store %y[%c0, %c0], %11 {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16>, tensor<4x256xbf16>
  return
}

// -----

// A column reduction slices dimension 0; reducing a 1-D tile gives a scalar.

// CHECK-LABEL: func.func @column_reduce
// CHECK: tile.reduce sum %{{.*}} axis = 0 : tensor<32x64xf32, #[[B:tile.blocked<{sizePerThread = \[1, 4\], threadsPerWarp = \[2, 16\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]> -> tensor<64xf32, #tile.slice<{dim = 0, parent = #[[B]]}>>
// CHECK: tile.reduce max %{{.*}} axis = 0 : tensor<64xf32, #tile.slice<{dim = 0, parent = #[[B]]}>> -> f32
func.func @column_reduce(%x: !tile.ptr<f32>) -> f32 {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %1 = tile.reduce sum %0 axis = 0 : tensor<32x64xf32> -> tensor<64xf32>
  %2 = tile.reduce max %1 axis = 0 : tensor<64xf32> -> f32
  return %2 : f32
}

// -----

// expand_dims of a tile that is not a slice along that axis: the operand is converted to
// the slice of the result's default layout, and the result gets that parent.

// CHECK-LABEL: func.func @expand_non_slice
// CHECK: %[[L:.*]] = tile.block_load {{.*}} -> tensor<256xf32, #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [2], order = [0]}>>
// CHECK: %[[C:.*]] = tile.convert_layout %[[L]] : {{.*}} -> tensor<256xf32, #tile.slice<{dim = 0, parent = #[[P:tile.blocked<{sizePerThread = \[1, 4\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[1, 2\], order = \[1, 0\]}>]]}>>
// CHECK: tile.expand_dims %[[C]] axis = 0 : {{.*}} -> tensor<1x256xf32, #[[P]]>
func.func @expand_non_slice(%x: !tile.ptr<f32>) attributes {tile.num_warps = 2 : i32} {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0] {dims = array<i64: 256>, strides = array<i64: 1>} : <f32> -> tensor<256xf32>
  %1 = tile.expand_dims %0 axis = 0 : tensor<256xf32> -> tensor<1x256xf32>
  return
}

// -----

// An operand that disagrees gets a tile.convert_layout to the first laid-out operand's
// layout. When that operand is a splat, canonicalization folds the conversion into it:
// the splat is rebuilt directly in the layout it is used in.

// CHECK-LABEL: func.func @splat_operand
// CHECK: %[[S:.*]] = tile.splat %{{.*}} : f32 -> tensor<4x256xf32, #tile.blocked<{sizePerThread = [1, 4], threadsPerWarp = [1, 32], warpsPerCTA = [4, 1], order = [1, 0]}>>
// CHECK: %[[F:.*]] = tile.cast {{.*}} to tensor<4x256xf32, #[[B:tile.blocked<{sizePerThread = \[1, 8\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// CHECK: %[[C:.*]] = tile.convert_layout %[[S]] : {{.*}} -> tensor<4x256xf32, #[[B]]>
// CHECK: arith.mulf %[[F]], %[[C]] : tensor<4x256xf32, #[[B]]>
// CANON-LABEL: func.func @splat_operand
// CANON-NOT: tile.convert_layout
// CANON: %[[S:.*]] = tile.splat %{{.*}} : f32 -> tensor<4x256xf32, #[[B:tile.blocked<{sizePerThread = \[1, 8\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// CANON-NOT: tile.convert_layout
// CANON: arith.mulf %{{.*}}, %[[S]] : tensor<4x256xf32, #[[B]]>
// CANON-NOT: tile.convert_layout
// CANON: return
func.func @splat_operand(%x: !tile.ptr<bf16>, %s: f32) {
  %c0 = arith.constant 0 : i32
  %0 = tile.splat %s : f32 -> tensor<4x256xf32>
  %1 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %2 = tile.cast %1 : tensor<4x256xbf16> to tensor<4x256xf32>
  %3 = arith.mulf %2, %0 : tensor<4x256xf32>
  %4 = tile.cast %3 : tensor<4x256xf32> to tensor<4x256xbf16>
  tile.block_store %x[%c0, %c0], %4 {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16>, tensor<4x256xbf16>
  return
}

// -----

// A splat or arange as the first operand does not choose the layout: the next operand
// does, and the free producer is converted (canonicalization then rebuilds it in place).

// CHECK-LABEL: func.func @free_producers_arange
// CHECK: %[[A:.*]] = tile.arange 0 to 512 : tensor<512xi32, #[[I32:tile.blocked<{sizePerThread = \[4\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK: %[[L:.*]] = tile.block_load {{.*}} -> tensor<512xi8, #[[I8:tile.blocked<{sizePerThread = \[16\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK: %[[E:.*]] = arith.extsi %[[L]] : tensor<512xi8, #[[I8]]> to tensor<512xi32, #[[I8]]>
// CHECK: %[[C:.*]] = tile.convert_layout %[[A]] : tensor<512xi32, #[[I32]]> -> tensor<512xi32, #[[I8]]>
// CHECK: arith.addi %[[C]], %[[E]] : tensor<512xi32, #[[I8]]>
// CANON-LABEL: func.func @free_producers_arange
// CANON-NOT: tile.convert_layout
// CANON: %[[A:.*]] = tile.arange 0 to 512 : tensor<512xi32, #[[I8:tile.blocked<{sizePerThread = \[16\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CANON-NOT: tile.convert_layout
// CANON: arith.addi %[[A]], %{{.*}} : tensor<512xi32, #[[I8]]>
// CANON-NOT: tile.convert_layout
// CANON: return
func.func @free_producers_arange(%x: !tile.ptr<i8>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.arange 0 to 512 : tensor<512xi32>
  %1 = tile.block_load %x[%c0] {dims = array<i64: 512>, strides = array<i64: 1>} : <i8> -> tensor<512xi8>
  %2 = arith.extsi %1 : tensor<512xi8> to tensor<512xi32>
  %3 = arith.addi %0, %2 : tensor<512xi32>
  %4 = arith.trunci %3 : tensor<512xi32> to tensor<512xi8>
  tile.block_store %x[%c0], %4 {dims = array<i64: 512>, strides = array<i64: 1>} : <i8>, tensor<512xi8>
  return
}

// -----

// CHECK-LABEL: func.func @free_producers_splat
// CHECK: %[[F:.*]] = tile.cast %{{.*}} : {{.*}} to tensor<512xf16, #[[B16:tile.blocked<{sizePerThread = \[4\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK: %[[S:.*]] = tile.splat %{{.*}} : f16 -> tensor<512xf16, #[[D:tile.blocked<{sizePerThread = \[8\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK: %[[C:.*]] = tile.convert_layout %[[S]] : tensor<512xf16, #[[D]]> -> tensor<512xf16, #[[B16]]>
// CHECK: arith.addf %[[C]], %[[F]] : tensor<512xf16, #[[B16]]>
// CANON-LABEL: func.func @free_producers_splat
// CANON-NOT: tile.convert_layout
// CANON: tile.splat %{{.*}} : f16 -> tensor<512xf16, #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>>
// CANON-NOT: tile.convert_layout
// CANON: return
func.func @free_producers_splat(%x: !tile.ptr<i32>, %h: f16) {
  %c0 = arith.constant 0 : i32
  %1 = tile.block_load %x[%c0] {dims = array<i64: 512>, strides = array<i64: 1>} : <i32> -> tensor<512xi32>
  %2 = tile.cast %1 : tensor<512xi32> to tensor<512xf16>
  %3 = tile.splat %h : f16 -> tensor<512xf16>
  %4 = arith.addf %3, %2 : tensor<512xf16>
  %5 = arith.fptosi %4 : tensor<512xf16> to tensor<512xi32>
  tile.block_store %x[%c0], %5 {dims = array<i64: 512>, strides = array<i64: 1>} : <i32>, tensor<512xi32>
  return
}

// -----

// scf.for: carried tiles keep the layout of their initial value; the body's operands are
// converted to it, and so is a yielded tile of another layout. Results carry it too.

// CHECK-LABEL: func.func @loop_carried
// CHECK: %[[INIT:.*]] = tile.cast {{.*}} to tensor<4x256xf32, #[[B:tile.blocked<{sizePerThread = \[1, 8\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// CHECK: %[[R:.*]]:2 = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[INIT]], %[[LAST:.*]] = %[[INIT]]) -> (tensor<4x256xf32, #[[B]]>, tensor<4x256xf32, #[[B]]>) : i32 {
// CHECK: %[[L:.*]] = tile.block_load {{.*}} -> tensor<4x256xf32, #[[F:tile.blocked<{sizePerThread = \[1, 4\], threadsPerWarp = \[1, 32\], warpsPerCTA = \[4, 1\], order = \[1, 0\]}>]]>
// CHECK: %[[C:.*]] = tile.convert_layout %[[L]] : tensor<4x256xf32, #[[F]]> -> tensor<4x256xf32, #[[B]]>
// CHECK: %[[SUM:.*]] = arith.addf %[[ACC]], %[[C]] : tensor<4x256xf32, #[[B]]>
// CHECK: %[[Y:.*]] = tile.convert_layout %[[L]] : tensor<4x256xf32, #[[F]]> -> tensor<4x256xf32, #[[B]]>
// CHECK: scf.yield %[[SUM]], %[[Y]] : tensor<4x256xf32, #[[B]]>, tensor<4x256xf32, #[[B]]>
// CHECK: tile.reduce sum %[[R]]#0 axis = 1 : tensor<4x256xf32, #[[B]]>
func.func @loop_carried(%x: !tile.ptr<bf16>, %y: !tile.ptr<f32>, %n: i32) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 4, 256>, strides = array<i64: 256, 1>} : <bf16> -> tensor<4x256xbf16>
  %1 = tile.cast %0 : tensor<4x256xbf16> to tensor<4x256xf32>
  %2:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %1, %last = %1) -> (tensor<4x256xf32>, tensor<4x256xf32>) : i32 {
    %3 = tile.block_load %y[%i, %c0] {dims = array<i64: 1024, 256>, strides = array<i64: 256, 1>} : <f32> -> tensor<4x256xf32>
    %4 = arith.addf %acc, %3 : tensor<4x256xf32>
    scf.yield %4, %3 : tensor<4x256xf32>, tensor<4x256xf32>
  }
  %5 = tile.reduce sum %2#0 axis = 1 : tensor<4x256xf32> -> tensor<4xf32>
  return
}

// -----

// scf.if: results take the then-branch's layouts; the else branch is converted to them.

// CHECK-LABEL: func.func @if_results
// CHECK: %[[R:.*]] = scf.if %{{.*}} -> (tensor<1024xf32, #[[B:tile.blocked<{sizePerThread = \[4\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>) {
// CHECK: scf.yield %{{.*}} : tensor<1024xf32, #[[B]]>
// CHECK: } else {
// CHECK: %[[L:.*]] = tile.cast {{.*}} to tensor<1024xf32, #[[H:tile.blocked<{sizePerThread = \[8\], threadsPerWarp = \[32\], warpsPerCTA = \[4\], order = \[0\]}>]]>
// CHECK: %[[C:.*]] = tile.convert_layout %[[L]] : tensor<1024xf32, #[[H]]> -> tensor<1024xf32, #[[B]]>
// CHECK: scf.yield %[[C]] : tensor<1024xf32, #[[B]]>
func.func @if_results(%x: !tile.ptr<f32>, %y: !tile.ptr<bf16>, %c: i1) {
  %c0 = arith.constant 0 : i32
  %0 = scf.if %c -> (tensor<1024xf32>) {
    %1 = tile.block_load %x[%c0] {dims = array<i64: 1024>, strides = array<i64: 1>} : <f32> -> tensor<1024xf32>
    scf.yield %1 : tensor<1024xf32>
  } else {
    %2 = tile.block_load %y[%c0] {dims = array<i64: 1024>, strides = array<i64: 1>} : <bf16> -> tensor<1024xbf16>
    %3 = tile.cast %2 : tensor<1024xbf16> to tensor<1024xf32>
    scf.yield %3 : tensor<1024xf32>
  }
  return
}

// -----

// trans permutes the operand's layout; reshape re-anchors on the default layout.

// CHECK-LABEL: func.func @trans_reshape
// CHECK: tile.trans %{{.*}} [1, 0] : tensor<32x64xf32, #tile.blocked<{sizePerThread = [1, 4], threadsPerWarp = [2, 16], warpsPerCTA = [4, 1], order = [1, 0]}>> -> tensor<64x32xf32, #tile.blocked<{sizePerThread = [4, 1], threadsPerWarp = [16, 2], warpsPerCTA = [1, 4], order = [0, 1]}>>
// CHECK: tile.reshape %{{.*}} : {{.*}} -> tensor<2048xf32, #tile.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>>
func.func @trans_reshape(%x: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0, %c0] {dims = array<i64: 32, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<32x64xf32>
  %1 = tile.trans %0 [1, 0] : tensor<32x64xf32> -> tensor<64x32xf32>
  %2 = tile.reshape %1 : tensor<64x32xf32> -> tensor<2048xf32>
  return
}

// -----

// A tensor constant takes its layout in its value attribute too (the IR stays valid).

// CHECK-LABEL: func.func @dense_constant
// CHECK: arith.constant dense<1.000000e+00> : tensor<256xf32, #tile.blocked<
func.func @dense_constant(%out: !tile.ptr<f32>) attributes {tile.kernel, tile.num_warps = 4 : i32} {
  %c0 = arith.constant 0 : i32
  %v = arith.constant dense<1.0> : tensor<256xf32>
  tile.block_store %out[%c0], %v {dims = array<i64: 256>, strides = array<i64: 1>} : <f32>, tensor<256xf32>
  return
}
