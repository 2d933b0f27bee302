// RUN: tokamax-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of tile.semaphore_wait / tile.semaphore_signal (verifySemaphore in
// TileOps.cpp): one i32 counter of a kernel tensor, a scalar i32 value.

func.func @semaphore_valid(%s: !tile.ptr<i32>, %i: i32, %v: i32) {
  tile.semaphore_wait %s[%i, %i], %v {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
  tile.semaphore_signal %s[%i, %i], %v {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
  return
}

// -----

func.func @semaphore_f32(%s: !tile.ptr<f32>, %i: i32, %v: i32) {
  // expected-error @+1 {{'tile.semaphore_wait' op counts in an i32 tensor, got 'f32'}}
  tile.semaphore_wait %s[%i], %v {dims = array<i64: 4>, strides = array<i64: 1>} : <f32>
  return
}

// -----

func.func @semaphore_i64(%s: !tile.ptr<i64>, %i: i32, %v: i32) {
  // expected-error @+1 {{'tile.semaphore_signal' op counts in an i32 tensor, got 'i64'}}
  tile.semaphore_signal %s[%i], %v {dims = array<i64: 4>, strides = array<i64: 1>} : <i64>
  return
}

// -----

func.func @semaphore_indices(%s: !tile.ptr<i32>, %i: i32, %v: i32) {
  // expected-error @+1 {{'tile.semaphore_wait' op needs one index per tensor dimension (2), got 1}}
  tile.semaphore_wait %s[%i], %v {dims = array<i64: 4, 8>, strides = array<i64: 8, 1>} : <i32>
  return
}

// -----

func.func @semaphore_strides(%s: !tile.ptr<i32>, %i: i32, %v: i32) {
  // expected-error @+1 {{'tile.semaphore_signal' op has 2 dims but 1 strides}}
  tile.semaphore_signal %s[%i, %i], %v {dims = array<i64: 4, 8>, strides = array<i64: 1>} : <i32>
  return
}

// -----

// The value is a scalar i32: a tensor is another type than the op expects.
// expected-note @+1 {{prior use here}}
func.func @semaphore_tensor_value(%s: !tile.ptr<i32>, %i: i32, %v: tensor<4xi32>) {
  // expected-error @+1 {{use of value '%v' expects different type than prior uses: 'i32' vs 'tensor<4xi32>'}}
  tile.semaphore_wait %s[%i], %v {dims = array<i64: 4>, strides = array<i64: 1>} : <i32>
  return
}
