// RUN: tokamax-opt %s -tile-assign-layouts -tile-remove-layout-conversions -canonicalize -cse | FileCheck %s
// RUN: tokamax-opt %s -tile-assign-layouts -tile-remove-layout-conversions -canonicalize -cse -tile-allocate-shared | FileCheck %s --check-prefix=SMEM

// An attention-style loop in a kernel marked tile.mma_rows_per_warp: the products put
// every warp along M; the carried row max and accumulator start in the layouts the body
// gives them (a slice of the mma layout, the mma layout), so the body converts nothing
// back; the loop-invariant q is converted into its operand layout once, before the loop;
// the mask built from aranges is computed again in the mma layout instead of moved; and
// p (the product, cast to bf16) is the next dot's A operand without scratch: only q, k
// and v are staged, each alone at offset 0 (64 x 64 x 2 = 8192 bytes).

// CHECK-LABEL: func.func @flash_loop
// CHECK: tile.convert_layout %{{.*}} -> tensor<64x64xbf16, #tile.dot_op<{opIdx = 0, parent = #tile.mma<{warpsPerCTA = [4, 1]}>
// CHECK-NEXT: scf.for {{.*}} -> (tensor<64xf32, #tile.slice<{dim = 1, parent = #tile.mma<{warpsPerCTA = [4, 1]}>}>>, tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>)
// CHECK-NOT: tile.convert_layout {{.*}}xi1
// CHECK: tile.convert_layout %{{.*}} : tensor<64x64xbf16, #tile.mma<{warpsPerCTA = [4, 1]}>> -> tensor<64x64xbf16, #tile.dot_op<{opIdx = 0
// CHECK-NOT: tile.convert_layout {{.*}}#tile.mma<{warpsPerCTA = [4, 1]}>>
// CHECK: scf.yield
// SMEM-LABEL: func.func @flash_loop
// SMEM-SAME: tile.shared_bytes = 8192 : i64
func.func @flash_loop(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %v: !tile.ptr<bf16>, %o: !tile.ptr<f32>, %n: i32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %m0 = tile.splat %ninf : f32 -> tensor<64xf32>
  %acc0 = tile.splat %zero : f32 -> tensor<64x64xf32>
  %r:2 = scf.for %j = %c0 to %n step %c64 iter_args(%m = %m0, %acc = %acc0) -> (tensor<64xf32>, tensor<64x64xf32>) : i32 {
    %kt = tile.block_load %k[%j, %c0] {dims = array<i64: 4096, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
    %ktt = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %z = tile.splat %zero : f32 -> tensor<64x64xf32>
    %s = tile.dot %qt, %ktt, %z : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %cols = tile.arange 0 to 64 : tensor<64xi32>
    %jv = tile.splat %j : i32 -> tensor<64xi32>
    %key = arith.addi %jv, %cols : tensor<64xi32>
    %key2 = tile.expand_dims %key axis = 0 : tensor<64xi32> -> tensor<1x64xi32>
    %nv = tile.splat %n : i32 -> tensor<1x64xi32>
    %ok = arith.cmpi slt, %key2, %nv : tensor<1x64xi32>
    %okb = tile.broadcast %ok : tensor<1x64xi1> -> tensor<64x64xi1>
    %ninfs = tile.splat %ninf : f32 -> tensor<64x64xf32>
    %sm = arith.select %okb, %s, %ninfs : tensor<64x64xi1>, tensor<64x64xf32>
    %rowmax = tile.reduce max %sm axis = 1 : tensor<64x64xf32> -> tensor<64xf32>
    %mnew = arith.maximumf %m, %rowmax : tensor<64xf32>
    %mnew2 = tile.expand_dims %mnew axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
    %mb = tile.broadcast %mnew2 : tensor<64x1xf32> -> tensor<64x64xf32>
    %d = arith.subf %sm, %mb : tensor<64x64xf32>
    %p = math.exp2 %d : tensor<64x64xf32>
    %alpha = arith.subf %m, %mnew : tensor<64xf32>
    %alpha2 = math.exp2 %alpha : tensor<64xf32>
    %alpha3 = tile.expand_dims %alpha2 axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
    %ab = tile.broadcast %alpha3 : tensor<64x1xf32> -> tensor<64x64xf32>
    %scaled = arith.mulf %acc, %ab : tensor<64x64xf32>
    %pb = tile.cast %p : tensor<64x64xf32> to tensor<64x64xbf16>
    %vt = tile.block_load %v[%j, %c0] {dims = array<i64: 4096, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
    %accn = tile.dot %pb, %vt, %scaled : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    scf.yield %mnew, %accn : tensor<64xf32>, tensor<64x64xf32>
  }
  tile.block_store %o[%c0, %c0], %r#1 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}

// The same loop masking only its edge steps: the masked scores come out of an scf.if
// (edge blocks masked, inner ones not). The carried row max is predicted through the
// if's then-value, so it still starts in the slice of the mma layout and no row
// statistic crosses shared memory at each step.

// CHECK-LABEL: func.func @flash_loop_edge_branch
// CHECK: scf.for {{.*}} -> (tensor<64xf32, #tile.slice<{dim = 1, parent = #tile.mma<{warpsPerCTA = [4, 1]}>}>>, tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>)
// CHECK: scf.if %{{.*}} -> (tensor<64x64xf32, #tile.mma<{warpsPerCTA = [4, 1]}>>)
// CHECK-NOT: tile.convert_layout {{.*}}tensor<64xf32
// CHECK: scf.yield
func.func @flash_loop_edge_branch(%q: !tile.ptr<bf16>, %k: !tile.ptr<bf16>, %v: !tile.ptr<bf16>, %o: !tile.ptr<f32>, %n: i32, %inner: i32) attributes {tile.kernel, tile.num_warps = 4 : i32, tile.mma_rows_per_warp} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %qt = tile.block_load %q[%c0, %c0] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
  %m0 = tile.splat %ninf : f32 -> tensor<64xf32>
  %acc0 = tile.splat %zero : f32 -> tensor<64x64xf32>
  %r:2 = scf.for %j = %c0 to %n step %c64 iter_args(%m = %m0, %acc = %acc0) -> (tensor<64xf32>, tensor<64x64xf32>) : i32 {
    %kt = tile.block_load %k[%j, %c0] {dims = array<i64: 4096, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
    %ktt = tile.trans %kt [1, 0] : tensor<64x64xbf16> -> tensor<64x64xbf16>
    %z = tile.splat %zero : f32 -> tensor<64x64xf32>
    %s = tile.dot %qt, %ktt, %z : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    %edge = arith.cmpi sge, %j, %inner : i32
    %sm = scf.if %edge -> (tensor<64x64xf32>) {
      %cols = tile.arange 0 to 64 : tensor<64xi32>
      %jv = tile.splat %j : i32 -> tensor<64xi32>
      %key = arith.addi %jv, %cols : tensor<64xi32>
      %key2 = tile.expand_dims %key axis = 0 : tensor<64xi32> -> tensor<1x64xi32>
      %nv = tile.splat %n : i32 -> tensor<1x64xi32>
      %ok = arith.cmpi slt, %key2, %nv : tensor<1x64xi32>
      %okb = tile.broadcast %ok : tensor<1x64xi1> -> tensor<64x64xi1>
      %ninfs = tile.splat %ninf : f32 -> tensor<64x64xf32>
      %masked = arith.select %okb, %s, %ninfs : tensor<64x64xi1>, tensor<64x64xf32>
      scf.yield %masked : tensor<64x64xf32>
    } else {
      scf.yield %s : tensor<64x64xf32>
    }
    %rowmax = tile.reduce max %sm axis = 1 : tensor<64x64xf32> -> tensor<64xf32>
    %mnew = arith.maximumf %m, %rowmax : tensor<64xf32>
    %mnew2 = tile.expand_dims %mnew axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
    %mb = tile.broadcast %mnew2 : tensor<64x1xf32> -> tensor<64x64xf32>
    %d = arith.subf %sm, %mb : tensor<64x64xf32>
    %p = math.exp2 %d : tensor<64x64xf32>
    %alpha = arith.subf %m, %mnew : tensor<64xf32>
    %alpha2 = math.exp2 %alpha : tensor<64xf32>
    %alpha3 = tile.expand_dims %alpha2 axis = 1 : tensor<64xf32> -> tensor<64x1xf32>
    %ab = tile.broadcast %alpha3 : tensor<64x1xf32> -> tensor<64x64xf32>
    %scaled = arith.mulf %acc, %ab : tensor<64x64xf32>
    %pb = tile.cast %p : tensor<64x64xf32> to tensor<64x64xbf16>
    %vt = tile.block_load %v[%j, %c0] {dims = array<i64: 4096, 64>, strides = array<i64: 64, 1>} : <bf16> -> tensor<64x64xbf16>
    %accn = tile.dot %pb, %vt, %scaled : tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x64xf32>
    scf.yield %mnew, %accn : tensor<64xf32>, tensor<64x64xf32>
  }
  tile.block_store %o[%c0, %c0], %r#1 {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<64x64xf32>
  return
}
