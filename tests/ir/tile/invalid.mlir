// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of the tile dialect (TileOps.cpp, TileDialect.cpp).

//===----------------------------------------------------------------------===//
// program_id / num_programs
//===----------------------------------------------------------------------===//

func.func @program_id_axis() {
  // expected-error @+1 {{'tile.program_id' op attribute 'axis' failed to satisfy constraint: 32-bit signless integer attribute whose minimum value is 0 whose maximum value is 2}}
  %0 = tile.program_id 3 : i32
  return
}

// -----

func.func @num_programs_axis() {
  // expected-error @+1 {{'tile.num_programs' op attribute 'axis' failed to satisfy constraint}}
  %0 = tile.num_programs -1 : i32
  return
}

//===----------------------------------------------------------------------===//
// arange / splat
//===----------------------------------------------------------------------===//

// -----

func.func @arange_length() {
  // expected-error @+1 {{'tile.arange' op result must be a 1-D tile of end - start = 16 elements, got 'tensor<8xi32>'}}
  %0 = tile.arange 0 to 16 : tensor<8xi32>
  return
}

// -----

func.func @arange_not_power_of_two() {
  // expected-error @+1 {{'tile.arange' op tile dimensions must be static powers of two, got 'tensor<3xi32>'}}
  %0 = tile.arange 0 to 3 : tensor<3xi32>
  return
}

// -----

func.func @arange_rank() {
  // expected-error @+1 {{'tile.arange' op result must be a 1-D tile of end - start = 16 elements, got 'tensor<4x4xi32>'}}
  %0 = tile.arange 0 to 16 : tensor<4x4xi32>
  return
}

// -----

func.func @splat_type(%s: f16) {
  // expected-error @+1 {{'tile.splat' op scalar type 'f16' does not match the tile's element type}}
  %0 = tile.splat %s : f16 -> tensor<4xf32>
  return
}

// -----

func.func @splat_not_power_of_two(%s: f32) {
  // expected-error @+1 {{'tile.splat' op tile dimensions must be static powers of two, got 'tensor<4x6xf32>'}}
  %0 = tile.splat %s : f32 -> tensor<4x6xf32>
  return
}

// -----

func.func @splat_zero_dim(%s: f32) {
  // expected-error @+1 {{'tile.splat' op tile dimensions must be static powers of two, got 'tensor<0xf32>'}}
  %0 = tile.splat %s : f32 -> tensor<0xf32>
  return
}

//===----------------------------------------------------------------------===//
// load / store through pointer tiles
//===----------------------------------------------------------------------===//

// -----

func.func @load_element_type(%p: tensor<8x!tile.ptr<f32>>) {
  // expected-error @+1 {{'tile.load' op result element type does not match the pointee type 'f32'}}
  %0 = tile.load %p : tensor<8x!tile.ptr<f32>> -> tensor<8xf16>
  return
}

// -----

func.func @load_shape(%p: tensor<8x!tile.ptr<f32>>) {
  // expected-error @+1 {{'tile.load' op result shape 'tensor<16xf32>' does not match 'tensor<8x!tile.ptr<f32>>'}}
  %0 = tile.load %p : tensor<8x!tile.ptr<f32>> -> tensor<16xf32>
  return
}

// -----

func.func @load_mask_shape(%p: tensor<8x!tile.ptr<f32>>, %m: tensor<4xi1>) {
  // expected-error @+1 {{'tile.load' op mask shape 'tensor<4xi1>' does not match 'tensor<8x!tile.ptr<f32>>'}}
  %0 = tile.load %p, %m : tensor<8x!tile.ptr<f32>>, tensor<4xi1> -> tensor<8xf32>
  return
}

// -----

func.func @load_other_type(%p: tensor<8x!tile.ptr<f32>>, %m: tensor<8xi1>, %o: tensor<4xf32>) {
  // expected-error @+1 {{'tile.load' op other must have the result type 'tensor<8xf32>'}}
  %0 = tile.load %p, %m, other %o : tensor<8x!tile.ptr<f32>>, tensor<8xi1>, tensor<4xf32> -> tensor<8xf32>
  return
}

// -----

func.func @load_not_power_of_two(%p: tensor<6x!tile.ptr<f32>>) {
  // expected-error @+1 {{'tile.load' op tile dimensions must be static powers of two, got 'tensor<6x!tile.ptr<f32>>'}}
  %0 = tile.load %p : tensor<6x!tile.ptr<f32>> -> tensor<6xf32>
  return
}

// -----

func.func @store_element_type(%p: tensor<8x!tile.ptr<bf16>>, %v: tensor<8xf32>) {
  // expected-error @+1 {{'tile.store' op value element type does not match the pointee type 'bf16'}}
  tile.store %p, %v : tensor<8x!tile.ptr<bf16>>, tensor<8xf32>
  return
}

// -----

func.func @store_shape(%p: tensor<8x!tile.ptr<f32>>, %v: tensor<2x4xf32>) {
  // expected-error @+1 {{'tile.store' op value shape 'tensor<2x4xf32>' does not match 'tensor<8x!tile.ptr<f32>>'}}
  tile.store %p, %v : tensor<8x!tile.ptr<f32>>, tensor<2x4xf32>
  return
}

// -----

func.func @store_mask_shape(%p: tensor<8x!tile.ptr<f32>>, %v: tensor<8xf32>, %m: tensor<16xi1>) {
  // expected-error @+1 {{'tile.store' op mask shape 'tensor<16xi1>' does not match 'tensor<8x!tile.ptr<f32>>'}}
  tile.store %p, %v, %m : tensor<8x!tile.ptr<f32>>, tensor<8xf32>, tensor<16xi1>
  return
}

// -----

func.func @addptr_type(%p: tensor<8x!tile.ptr<f32>>, %o: tensor<8xi32>) {
  // expected-error @+1 {{'tile.addptr' op failed to verify that all of {ptr, result} have same type}}
  %0 = "tile.addptr"(%p, %o) : (tensor<8x!tile.ptr<f32>>, tensor<8xi32>) -> tensor<8x!tile.ptr<f16>>
  return
}

// -----

func.func @addptr_offset_type(%p: tensor<8x!tile.ptr<f32>>, %o: tensor<8xi16>) {
  // expected-error @+1 {{'tile.addptr' op operand #1 must be}}
  %0 = tile.addptr %p, %o : tensor<8x!tile.ptr<f32>>, tensor<8xi16>
  return
}

//===----------------------------------------------------------------------===//
// block_load / block_store
//===----------------------------------------------------------------------===//

// -----

func.func @block_load_offsets(%x: !tile.ptr<f32>, %i: i32) {
  // expected-error @+1 {{'tile.block_load' op needs one offset per tensor dimension (2), got 1}}
  %0 = tile.block_load %x[%i] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<4x64xf32>
  return
}

// -----

func.func @block_load_strides(%x: !tile.ptr<f32>, %i: i32) {
  // expected-error @+1 {{'tile.block_load' op has 2 dims but 1 strides}}
  %0 = tile.block_load %x[%i, %i] {dims = array<i64: 64, 64>, strides = array<i64: 1>} : <f32> -> tensor<4x64xf32>
  return
}

// -----

func.func @block_load_rank(%x: !tile.ptr<f32>, %i: i32) {
  // expected-error @+1 {{'tile.block_load' op block 'tensor<256xf32>' must have the tensor's rank 2}}
  %0 = tile.block_load %x[%i, %i] {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32> -> tensor<256xf32>
  return
}

// -----

func.func @block_load_negative_dims(%x: !tile.ptr<f32>, %i: i32) {
  // expected-error @+1 {{'tile.block_load' op tensor dims must be non-negative}}
  %0 = tile.block_load %x[%i] {dims = array<i64: -1>, strides = array<i64: 1>} : <f32> -> tensor<64xf32>
  return
}

// -----

func.func @block_load_element_type(%x: !tile.ptr<bf16>, %i: i32) {
  // expected-error @+1 {{'tile.block_load' op element type 'f32' does not match the pointer's 'bf16'}}
  %0 = tile.block_load %x[%i] {dims = array<i64: 64>, strides = array<i64: 1>} : <bf16> -> tensor<64xf32>
  return
}

// -----

func.func @block_load_not_power_of_two(%x: !tile.ptr<f32>, %i: i32) {
  // expected-error @+1 {{'tile.block_load' op tile dimensions must be static powers of two, got 'tensor<4x100xf32>'}}
  %0 = tile.block_load %x[%i, %i] {dims = array<i64: 64, 100>, strides = array<i64: 100, 1>} : <f32> -> tensor<4x100xf32>
  return
}

// -----

// expected-note @+1 {{prior use here}}
func.func @block_load_offset_type(%x: !tile.ptr<f32>, %i: i64) {
  // expected-error @+1 {{use of value '%i' expects different type than prior uses: 'i32' vs 'i64'}}
  %0 = tile.block_load %x[%i] {dims = array<i64: 64>, strides = array<i64: 1>} : <f32> -> tensor<64xf32>
  return
}

// -----

func.func @block_atomic_add_element_type(%x: !tile.ptr<bf16>, %i: i32, %v: tensor<4x64xbf16>) {
  // expected-error @+1 {{'tile.block_atomic_add' op adds f32, f64, i32 or i64 elements, got 'bf16'}}
  tile.block_atomic_add %x[%i, %i], %v {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>, block = array<i64: 4, 64>} : <bf16>, tensor<4x64xbf16>
  return
}

// -----

func.func @block_atomic_add_block_shape(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x64xf32>) {
  // expected-error @+1 {{'tile.block_atomic_add' op value must be the block without its unit dims, got 'tensor<4x64xf32>'}}
  tile.block_atomic_add %x[%i, %i, %i], %v {dims = array<i64: 8, 64, 64>, strides = array<i64: 4096, 64, 1>, block = array<i64: 1, 8, 64>} : <f32>, tensor<4x64xf32>
  return
}

// -----

func.func @block_atomic_add_block_rank(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x64xf32>) {
  // expected-error @+1 {{'tile.block_atomic_add' op block has 2 dims, the tensor 3}}
  tile.block_atomic_add %x[%i, %i, %i], %v {dims = array<i64: 8, 64, 64>, strides = array<i64: 4096, 64, 1>, block = array<i64: 4, 64>} : <f32>, tensor<4x64xf32>
  return
}

// -----

func.func @block_atomic_add_offsets(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x64xf32>) {
  // expected-error @+1 {{'tile.block_atomic_add' op needs one offset per tensor dimension (3), got 2}}
  tile.block_atomic_add %x[%i, %i], %v {dims = array<i64: 8, 64, 64>, strides = array<i64: 4096, 64, 1>, block = array<i64: 1, 4, 64>} : <f32>, tensor<4x64xf32>
  return
}

// -----

func.func @block_store_limit_last_dim(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x64xf32>) {
  // expected-error @+1 {{'tile.block_store' op limit_dim must name a dimension before the last, got 1 of 2}}
  tile.block_store %x[%i, %i], %v below %i {dims = array<i64: 8, 64>, strides = array<i64: 64, 1>, limit_dim = 1 : i64} : <f32>, tensor<4x64xf32>
  return
}

// -----

func.func @block_store_limit_without_dim(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x64xf32>) {
  // expected-error @+1 {{'tile.block_store' op takes a limit and its limit_dim together}}
  tile.block_store %x[%i, %i], %v below %i {dims = array<i64: 8, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<4x64xf32>
  return
}

// -----

func.func @block_store_offsets(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x64xf32>) {
  // expected-error @+1 {{'tile.block_store' op needs one offset per tensor dimension (2), got 3}}
  tile.block_store %x[%i, %i, %i], %v {dims = array<i64: 64, 64>, strides = array<i64: 64, 1>} : <f32>, tensor<4x64xf32>
  return
}

// -----

func.func @block_store_element_type(%x: !tile.ptr<f32>, %i: i32, %v: tensor<64xf16>) {
  // expected-error @+1 {{'tile.block_store' op element type 'f16' does not match the pointer's 'f32'}}
  tile.block_store %x[%i], %v {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<64xf16>
  return
}

// -----

func.func @block_store_rank(%x: !tile.ptr<f32>, %i: i32, %v: tensor<4x16xf32>) {
  // expected-error @+1 {{'tile.block_store' op block 'tensor<4x16xf32>' must have the tensor's rank 1}}
  tile.block_store %x[%i], %v {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<4x16xf32>
  return
}

// -----

func.func @block_store_not_power_of_two(%x: !tile.ptr<f32>, %i: i32, %v: tensor<12xf32>) {
  // expected-error @+1 {{'tile.block_store' op tile dimensions must be static powers of two, got 'tensor<12xf32>'}}
  tile.block_store %x[%i], %v {dims = array<i64: 64>, strides = array<i64: 1>} : <f32>, tensor<12xf32>
  return
}

//===----------------------------------------------------------------------===//
// atomics
//===----------------------------------------------------------------------===//

// -----

func.func @atomic_element_type(%p: tensor<8x!tile.ptr<f32>>, %v: tensor<8xi32>) {
  // expected-error @+1 {{'tile.atomic_rmw' op value element type does not match the pointee type}}
  %0 = tile.atomic_rmw add %p, %v : tensor<8x!tile.ptr<f32>>, tensor<8xi32> -> tensor<8xi32>
  return
}

// -----

func.func @atomic_unsupported_type(%p: tensor<8x!tile.ptr<bf16>>, %v: tensor<8xbf16>) {
  // expected-error @+1 {{'tile.atomic_rmw' op supports f32, f64, i32 and i64 elements, got 'bf16'}}
  %0 = tile.atomic_rmw add %p, %v : tensor<8x!tile.ptr<bf16>>, tensor<8xbf16> -> tensor<8xbf16>
  return
}

// -----

func.func @atomic_max_f64(%p: tensor<8x!tile.ptr<f64>>, %v: tensor<8xf64>) {
  // expected-error @+1 {{'tile.atomic_rmw' op max is not supported on f64}}
  %0 = tile.atomic_rmw max %p, %v : tensor<8x!tile.ptr<f64>>, tensor<8xf64> -> tensor<8xf64>
  return
}

// -----

func.func @atomic_value_shape(%p: tensor<8x!tile.ptr<f32>>, %v: tensor<4xf32>) {
  // expected-error @+1 {{'tile.atomic_rmw' op value shape 'tensor<4xf32>' does not match 'tensor<8x!tile.ptr<f32>>'}}
  %0 = tile.atomic_rmw add %p, %v : tensor<8x!tile.ptr<f32>>, tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @atomic_mask_shape(%p: tensor<8x!tile.ptr<i32>>, %v: tensor<8xi32>, %m: tensor<2xi1>) {
  // expected-error @+1 {{'tile.atomic_rmw' op mask shape 'tensor<2xi1>' does not match 'tensor<8x!tile.ptr<i32>>'}}
  %0 = tile.atomic_rmw max %p, %v, %m : tensor<8x!tile.ptr<i32>>, tensor<8xi32>, tensor<2xi1> -> tensor<8xi32>
  return
}

// -----

func.func @atomic_kind(%p: tensor<8x!tile.ptr<i32>>, %v: tensor<8xi32>) {
  // expected-error @+2 {{expected ::tokamax::tile::AtomicKind to be one of: add, max}}
  // expected-error @+1 {{failed to parse Tile_AtomicKindAttr parameter 'value'}}
  %0 = tile.atomic_rmw min %p, %v : tensor<8x!tile.ptr<i32>>, tensor<8xi32> -> tensor<8xi32>
  return
}

// -----

func.func @cas_element_type(%p: tensor<8x!tile.ptr<i16>>, %v: tensor<8xi16>) {
  // expected-error @+1 {{'tile.atomic_cas' op supports i32 and i64 elements, got 'i16'}}
  %0 = tile.atomic_cas %p, %v, %v : tensor<8x!tile.ptr<i16>>, tensor<8xi16>
  return
}

// -----

func.func @cas_pointee(%p: tensor<8x!tile.ptr<i64>>, %v: tensor<8xi32>) {
  // expected-error @+1 {{'tile.atomic_cas' op compare, value and pointee types must agree}}
  %0 = tile.atomic_cas %p, %v, %v : tensor<8x!tile.ptr<i64>>, tensor<8xi32>
  return
}

// -----

func.func @cas_shape(%p: tensor<8x!tile.ptr<i32>>, %v: tensor<16xi32>) {
  // expected-error @+1 {{'tile.atomic_cas' op value shape 'tensor<16xi32>' does not match 'tensor<8x!tile.ptr<i32>>'}}
  %0 = tile.atomic_cas %p, %v, %v : tensor<8x!tile.ptr<i32>>, tensor<16xi32>
  return
}

//===----------------------------------------------------------------------===//
// cast / reduce / expand_dims / broadcast / reshape / trans
//===----------------------------------------------------------------------===//

// -----

func.func @cast_shape(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.cast' op requires the same shape for all operands and results}}
  %0 = tile.cast %x : tensor<8xf32> to tensor<4xf16>
  return
}

// -----

func.func @exp2_share(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.exp2' op computes fma_count of every fma_period registers on the FMA pipes: fma_count must be at most fma_period, got 5 of 4}}
  %0 = tile.exp2 %x fma 5 of 4 : tensor<8xf32>
  return
}

// -----

func.func @exp2_period(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.exp2' op attribute 'fma_period' failed to satisfy constraint}}
  %0 = tile.exp2 %x fma 0 of 0 : tensor<8xf32>
  return
}

// -----

func.func @exp2_f16(%x: tensor<8xf16>) {
  // expected-error @+1 {{'tile.exp2' op operand #0 must be ranked tensor of 32-bit float values}}
  %0 = tile.exp2 %x fma 1 of 4 : tensor<8xf16>
  return
}

// -----

func.func @reduce_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.reduce' op axis 2 is out of range for 'tensor<4x8xf32>'}}
  %0 = tile.reduce sum %x axis = 2 : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

// The axis attribute is an unsigned 32-bit value to the verifier, so the diagnostic
// prints -1 as 4294967295; only the rejection is checked here.
func.func @reduce_negative_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{is out of range for 'tensor<4x8xf32>'}}
  %0 = tile.reduce sum %x axis = -1 : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @reduce_1d_result(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.reduce' op reducing a 1-D tile gives a scalar of type 'f32'}}
  %0 = tile.reduce max %x axis = 0 : tensor<8xf32> -> tensor<1xf32>
  return
}

// -----

func.func @reduce_result_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.reduce' op result must drop axis 1 with element type 'f32', got 'tensor<8xf32>'}}
  %0 = tile.reduce sum %x axis = 1 : tensor<4x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @reduce_result_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.reduce' op result must drop axis 0 with element type 'f32', got 'tensor<8xf16>'}}
  %0 = tile.reduce min %x axis = 0 : tensor<4x8xf32> -> tensor<8xf16>
  return
}

// -----

func.func @argmax_result_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.reduce' op result must drop axis 1 with element type 'i32', got 'tensor<4xf32>'}}
  %0 = tile.reduce argmax %x axis = 1 : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @argmax_1d_result(%x: tensor<8xf16>) {
  // expected-error @+1 {{'tile.reduce' op reducing a 1-D tile gives a scalar of type 'i32'}}
  %0 = tile.reduce argmax %x axis = 0 : tensor<8xf16> -> f16
  return
}

// -----

func.func @expand_dims_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op axis 2 is out of range for 'tensor<8xf32>'}}
  %0 = tile.expand_dims %x axis = 2 : tensor<8xf32> -> tensor<8x1xf32>
  return
}

// -----

func.func @expand_dims_result(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op result must insert a unit dimension at 0, got 'tensor<8x1xf32>'}}
  %0 = tile.expand_dims %x axis = 0 : tensor<8xf32> -> tensor<8x1xf32>
  return
}

// -----

func.func @expand_dims_element_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.expand_dims' op result must insert a unit dimension at 1, got 'tensor<8x1xf16>'}}
  %0 = tile.expand_dims %x axis = 1 : tensor<8xf32> -> tensor<8x1xf16>
  return
}

// -----

func.func @broadcast_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'tile.broadcast' op source 'tensor<8xf32>' and result 'tensor<4x8xf32>' must have the same rank and element type}}
  %0 = tile.broadcast %x : tensor<8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @broadcast_element_type(%x: tensor<1x8xf32>) {
  // expected-error @+1 {{'tile.broadcast' op source 'tensor<1x8xf32>' and result 'tensor<4x8xbf16>' must have the same rank and element type}}
  %0 = tile.broadcast %x : tensor<1x8xf32> -> tensor<4x8xbf16>
  return
}

// -----

func.func @broadcast_dimension(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'tile.broadcast' op cannot broadcast dimension 0 of 'tensor<2x8xf32>' to 'tensor<4x8xf32>'}}
  %0 = tile.broadcast %x : tensor<2x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @broadcast_not_power_of_two(%x: tensor<1x8xf32>) {
  // expected-error @+1 {{'tile.broadcast' op tile dimensions must be static powers of two, got 'tensor<3x8xf32>'}}
  %0 = tile.broadcast %x : tensor<1x8xf32> -> tensor<3x8xf32>
  return
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.reshape' op cannot reshape 'tensor<4x8xf32>' to 'tensor<64xf32>'}}
  %0 = tile.reshape %x : tensor<4x8xf32> -> tensor<64xf32>
  return
}

// -----

func.func @reshape_element_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.reshape' op cannot reshape 'tensor<4x8xf32>' to 'tensor<32xi32>'}}
  %0 = tile.reshape %x : tensor<4x8xf32> -> tensor<32xi32>
  return
}

// -----

func.func @reshape_not_power_of_two(%x: tensor<3x4xf32>) {
  // expected-error @+1 {{'tile.reshape' op tile dimensions must be static powers of two, got 'tensor<12xf32>'}}
  %0 = tile.reshape %x : tensor<3x4xf32> -> tensor<12xf32>
  return
}

// -----

func.func @trans_order_size(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.trans' op order must have one entry per dimension of 'tensor<4x8xf32>'}}
  %0 = tile.trans %x [1, 0, 2] : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @trans_not_permutation(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.trans' op order must be a permutation}}
  %0 = tile.trans %x [1, 1] : tensor<4x8xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @trans_out_of_range(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.trans' op order must be a permutation}}
  %0 = tile.trans %x [0, 2] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @trans_result(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.trans' op result 'tensor<4x8xf32>' is not 'tensor<4x8xf32>' permuted}}
  %0 = tile.trans %x [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// dot
//===----------------------------------------------------------------------===//

// -----

func.func @dot_rank(%a: tensor<16xbf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op operands must be 2-D tiles}}
  %0 = tile.dot %a, %b, %c : tensor<16xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_inner(%a: tensor<16x32xbf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op inner dimensions differ: 'tensor<16x32xbf16>' @ 'tensor<16x16xbf16>'}}
  %0 = tile.dot %a, %b, %c : tensor<16x32xbf16>, tensor<16x16xbf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_accumulator(%a: tensor<16x32xbf16>, %b: tensor<32x64xbf16>, %c: tensor<16x32xf32>) {
  // expected-error @+1 {{'tile.dot' op accumulator 'tensor<16x32xf32>' does not match 'tensor<16x32xbf16>' @ 'tensor<32x64xbf16>'}}
  %0 = tile.dot %a, %b, %c : tensor<16x32xbf16>, tensor<32x64xbf16> -> tensor<16x32xf32>
  return
}

// -----

func.func @dot_element_types(%a: tensor<16x16xbf16>, %b: tensor<16x16xf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op a and b must have one element type}}
  %0 = tile.dot %a, %b, %c : tensor<16x16xbf16>, tensor<16x16xf16> -> tensor<16x16xf32>
  return
}

// -----

func.func @dot_accumulator_type(%a: tensor<16x16xbf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xbf16>) {
  // expected-error @+1 {{'tile.dot' op accumulates in f32 (or f64 on the interpreter), got 'bf16'}}
  %0 = tile.dot %a, %b, %c : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16>
  return
}

// -----

func.func @dot_result_type(%a: tensor<16x16xbf16>, %b: tensor<16x16xbf16>, %c: tensor<16x16xf32>) {
  // expected-error @+1 {{'tile.dot' op failed to verify that all of {acc, result} have same type}}
  %0 = "tile.dot"(%a, %b, %c) : (tensor<16x16xbf16>, tensor<16x16xbf16>, tensor<16x16xf32>) -> tensor<16x16xf64>
  return
}

//===----------------------------------------------------------------------===//
// convert_layout
//===----------------------------------------------------------------------===//

// -----

func.func @convert_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.convert_layout' op requires the same shape for all operands and results}}
  %0 = tile.convert_layout %x : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @convert_element_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'tile.convert_layout' op requires the same element type for all operands and results}}
  %0 = tile.convert_layout %x : tensor<4x8xf32> -> tensor<4x8xf16>
  return
}

//===----------------------------------------------------------------------===//
// Layout attributes
//===----------------------------------------------------------------------===//
// #tile.blocked cannot be written at all (its lists do not parse, see
// layout-roundtrip.mlir); its verifier is covered by layout-attrs-invalid.mlir. Slice
// layouts with a parent that is not a layout are rejected:

// -----

// expected-error @+1 {{slice parent must be a blocked or slice layout}}
func.func @slice_parent(%x: tensor<8xf32, #tile.slice<{dim = 0, parent = 1 : i32}>>) {
  return
}

// -----

#b1 = #tile.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#b2 = #tile.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
func.func @cast_changes_layout(%x: tensor<256xf32, #b1>) {
  // expected-error @+1 {{'tile.cast' op keeps the layout of its source (move tiles with tile.convert_layout)}}
  %y = tile.cast %x : tensor<256xf32, #b1> to tensor<256xbf16, #b2>
  return
}

// -----

func.func @dot_wait_pending(%x: tensor<64x64xf32>) {
  // expected-error @+1 {{'tile.dot_wait' op pending must be in [0, 7], got 8}}
  %y = tile.dot_wait %x {pending = 8 : i32} : tensor<64x64xf32>
  return
}
