//===- DType.h - Element types and host-side conversions ----------*- C++ -*-===//
//
// The element types tensors can hold, plus exact host conversions between float
// and the narrow float formats (used to prepare inputs and check results).
// All narrowing conversions round to nearest, ties to even.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Export.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tokamax {

enum class DType : uint8_t { BF16, F16, F32, F64, I8, I32, I64, Bool, F8E4M3, F8E5M2 };

// Bytes per element.
constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::I8:
  case DType::Bool:
  case DType::F8E4M3:
  case DType::F8E5M2:
    return 1;
  }
  return 0;
}

// True for bf16, f16, f32, f64 and both fp8 formats.
constexpr bool is_floating(DType dtype) {
  switch (dtype) {
  case DType::BF16:
  case DType::F16:
  case DType::F32:
  case DType::F64:
  case DType::F8E4M3:
  case DType::F8E5M2:
    return true;
  default:
    return false;
  }
}

// True for the two 8-bit float formats (e4m3, e5m2).
constexpr bool is_fp8(DType dtype) { return dtype == DType::F8E4M3 || dtype == DType::F8E5M2; }

// True for the signed integer types; bool is neither integer nor floating.
constexpr bool is_integer(DType dtype) {
  return dtype == DType::I8 || dtype == DType::I32 || dtype == DType::I64;
}

// "bf16", "f16", "f32", "f64", "i8", "i32", "i64", "bool", "f8e4m3", "f8e5m2".
TOKAMAX_API std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; throws Error naming the bad string and the valid names.
TOKAMAX_API DType parse_dtype(std::string_view name);

// bfloat16: 1-8-7. NaN keeps its sign and top payload bits and stays quiet.
TOKAMAX_API uint16_t float_to_bf16_bits(float value);
TOKAMAX_API float bf16_bits_to_float(uint16_t bits);

// IEEE binary16: 1-5-10, overflow rounds to inf.
TOKAMAX_API uint16_t float_to_f16_bits(float value);
TOKAMAX_API float f16_bits_to_float(uint16_t bits);

// OCP fp8 E4M3 "FN" (1-4-3, bias 7): no infinities, max finite 448, NaN is
// 0x7f/0xff. Conversion saturates like PTX cvt.satfinite: finite values that
// round past 448 and +-inf become +-448; NaN becomes 0x7f (sign kept).
TOKAMAX_API uint8_t float_to_f8e4m3_bits(float value);
TOKAMAX_API float f8e4m3_bits_to_float(uint8_t bits);

// OCP fp8 E5M2 (1-5-2, bias 15): IEEE-like with inf; overflow rounds to inf,
// max finite 57344, NaN becomes 0x7e (sign kept).
TOKAMAX_API uint8_t float_to_f8e5m2_bits(float value);
TOKAMAX_API float f8e5m2_bits_to_float(uint8_t bits);

// Reads one element of `dtype` at `element` (host memory) as a double. Exact.
TOKAMAX_API double load_as_double(DType dtype, const void* element);
// Writes `value` as one element of `dtype`. Floats round to nearest even in a
// single step (no double rounding through f32). Integers clamp to the type's
// range and then truncate toward zero; NaN stores 0. Bool stores value != 0.
TOKAMAX_API void store_from_double(DType dtype, void* element, double value);

} // namespace tokamax
