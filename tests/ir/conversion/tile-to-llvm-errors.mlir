// RUN: tokamax-opt %s -split-input-file -tile-assign-layouts -convert-tile-to-llvm=arch=sm_80 -verify-diagnostics

// Operations the GPU lowering rejects, with the diagnostic naming the reason.

func.func @dot(%a: !tile.ptr<f64>, %y: !tile.ptr<f64>) {
  %c0 = arith.constant 0 : i32
  %z = arith.constant 0.0 : f64
  %0 = tile.block_load %a[%c0, %c0] {dims = array<i64: 16, 16>, strides = array<i64: 16, 1>} : <f64> -> tensor<16x16xf64>
  %1 = tile.splat %z : f64 -> tensor<16x16xf64>
  // expected-error @+1 {{'tile.dot' op runs on the CPU interpreter only for 'f64' operands with 'f64' accumulation}}
  %2 = tile.dot %0, %0, %1 : tensor<16x16xf64>, tensor<16x16xf64> -> tensor<16x16xf64>
  tile.block_store %y[%c0, %c0], %2 {dims = array<i64: 16, 16>, strides = array<i64: 16, 1>} : <f64>, tensor<16x16xf64>
  return
}

// -----

func.func @fp8_before_sm89(%x: !tile.ptr<f8E4M3FN>, %y: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0] {dims = array<i64: 256>, strides = array<i64: 1>} : <f8E4M3FN> -> tensor<256xf8E4M3FN>
  // expected-error @+1 {{'tile.cast' op fp8 conversions need sm_89 or newer, the target is sm_80}}
  %1 = tile.cast %0 : tensor<256xf8E4M3FN> to tensor<256xf32>
  tile.block_store %y[%c0], %1 {dims = array<i64: 256>, strides = array<i64: 1>} : <f32>, tensor<256xf32>
  return
}

// -----

// f64 exp, exp2, log, log2, tanh and erf are expanded in IEEE arithmetic; sin is not.
func.func @f64_sin(%x: !tile.ptr<f64>) {
  %c0 = arith.constant 0 : i32
  %0 = tile.block_load %x[%c0] {dims = array<i64: 256>, strides = array<i64: 1>} : <f64> -> tensor<256xf64>
  // expected-error @+1 {{'math.sin' op on f64 runs on the interpreter only (the GPU backend has no f64 math.sin)}}
  %1 = math.sin %0 : tensor<256xf64>
  tile.block_store %x[%c0], %1 {dims = array<i64: 256>, strides = array<i64: 1>} : <f64>, tensor<256xf64>
  return
}

// -----

// expected-error @+1 {{'func.func' op kernel parameter of type 'tensor<4xf32>' is not supported}}
func.func @tensor_parameter(%x: tensor<4xf32>) {
  return
}
