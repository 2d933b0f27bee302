//===- DType.cpp - Element types and host-side conversions ----------------===//
//
// The narrow float formats share one encoder/decoder parameterised by the
// format's layout. It works on doubles: scaling by a power of two is exact, so
// a single round-half-even step gives the correctly rounded result, both from
// float and from double inputs.
//
//===----------------------------------------------------------------------===//
#include "tokamax/runtime/DType.h"

#include "tokamax/runtime/Error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace tokamax {
namespace {

constexpr std::array<std::string_view, 10> kNames = {
    "bf16", "f16", "f32", "f64", "i8", "i32", "i64", "bool", "f8e4m3", "f8e5m2"};

struct MiniFloat {
  int exp_bits;
  int man_bits;
  int bias;
  bool has_inf;     // IEEE-style: all-ones exponent means inf/NaN.
  uint32_t nan;     // Canonical quiet NaN code, without sign.
};

constexpr MiniFloat kBF16{8, 7, 127, true, 0x7fc0};
constexpr MiniFloat kF16{5, 10, 15, true, 0x7e00};
// E4M3FN: the all-ones exponent is a normal binade; only mantissa 111 is NaN.
constexpr MiniFloat kE4M3{4, 3, 7, false, 0x7f};
constexpr MiniFloat kE5M2{5, 2, 15, true, 0x7e};

uint32_t encode(const MiniFloat& fmt, double value) {
  const uint32_t sign = std::signbit(value) ? 1u << (fmt.exp_bits + fmt.man_bits) : 0u;
  const uint32_t max_field = (1u << fmt.exp_bits) - 1;
  const uint32_t man_one = 1u << fmt.man_bits;
  // Largest finite code (magnitude): IEEE formats stop below the inf binade,
  // E4M3FN uses the top binade except the NaN mantissa.
  const uint32_t max_finite =
      fmt.has_inf ? ((max_field - 1) << fmt.man_bits) | (man_one - 1)
                  : (max_field << fmt.man_bits) | (man_one - 2);
  const uint32_t overflow = fmt.has_inf ? max_field << fmt.man_bits : max_finite;

  if (std::isnan(value))
    return sign | fmt.nan;
  const double mag = std::fabs(value);
  if (std::isinf(mag))
    return sign | overflow;
  if (mag == 0.0)
    return sign;

  const int emin = 1 - fmt.bias;
  int exp2 = 0;
  std::frexp(mag, &exp2); // mag = m * 2^exp2 with m in [0.5, 1)
  const int exponent = std::max(exp2 - 1, emin);
  // Scale so that one unit in the last place of the target is 1.0; exact, and
  // the result lies in [0, 2^(M+1)).
  const double scaled = std::ldexp(mag, fmt.man_bits - exponent);
  double q = std::floor(scaled);
  const double frac = scaled - q;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0))
    q += 1.0;
  uint64_t mant = static_cast<uint64_t>(q);
  int e = exponent;
  if (mant == 2u * man_one) { // Rounded up into the next binade.
    mant = man_one;
    e += 1;
  }
  if (mant < man_one) // Subnormal (only possible when e == emin), or zero.
    return sign | static_cast<uint32_t>(mant);
  const int64_t field = int64_t(e) - emin + 1;
  if (field > int64_t(max_field))
    return sign | overflow;
  const uint32_t code = (uint32_t(field) << fmt.man_bits) | uint32_t(mant - man_one);
  return sign | (code > max_finite ? overflow : code);
}

double decode(const MiniFloat& fmt, uint32_t bits) {
  const uint32_t man_mask = (1u << fmt.man_bits) - 1;
  const uint32_t max_field = (1u << fmt.exp_bits) - 1;
  const bool negative = (bits >> (fmt.exp_bits + fmt.man_bits)) & 1;
  const uint32_t field = (bits >> fmt.man_bits) & max_field;
  const uint32_t mant = bits & man_mask;
  double mag;
  if (fmt.has_inf && field == max_field)
    mag = mant == 0 ? std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::quiet_NaN();
  else if (!fmt.has_inf && field == max_field && mant == man_mask)
    mag = std::numeric_limits<double>::quiet_NaN();
  else if (field == 0)
    mag = std::ldexp(double(mant), 1 - fmt.bias - fmt.man_bits);
  else
    mag = std::ldexp(double(mant | (man_mask + 1)), int(field) - fmt.bias - fmt.man_bits);
  return negative ? -mag : mag;
}

template <typename Int> Int clamp_to_int(double value) {
  if (std::isnan(value))
    return 0;
  // Compare against the bounds as doubles; INT64_MAX itself is not a double,
  // so the upper test uses the exclusive bound 2^63.
  constexpr double lo = double(std::numeric_limits<Int>::min());
  constexpr double hi_exclusive = -lo;
  if (value <= lo)
    return std::numeric_limits<Int>::min();
  if (value >= hi_exclusive)
    return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);
}

template <typename T> T load(const void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <typename T> void store(void* p, T v) { std::memcpy(p, &v, sizeof(T)); }

} // namespace

std::string_view dtype_name(DType dtype) {
  const auto index = static_cast<size_t>(dtype);
  if (index >= kNames.size())
    throw Error(fmt::format("invalid DType value {}", index));
  return kNames[index];
}

DType parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name)
      return static_cast<DType>(i);
  throw Error(fmt::format("unknown dtype '{}'; valid dtypes are: {}", name,
                          fmt::join(kNames, ", ")));
}

uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) // Truncate the payload but force a quiet NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x0040);
  // Round half to even on the 16 dropped bits; overflow carries into inf.
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_f16_bits(float value) {
  return static_cast<uint16_t>(encode(kF16, value));
}
float f16_bits_to_float(uint16_t bits) { return static_cast<float>(decode(kF16, bits)); }

uint8_t float_to_f8e4m3_bits(float value) {
  return static_cast<uint8_t>(encode(kE4M3, value));
}
float f8e4m3_bits_to_float(uint8_t bits) { return static_cast<float>(decode(kE4M3, bits)); }

uint8_t float_to_f8e5m2_bits(float value) {
  return static_cast<uint8_t>(encode(kE5M2, value));
}
float f8e5m2_bits_to_float(uint8_t bits) { return static_cast<float>(decode(kE5M2, bits)); }

double load_as_double(DType dtype, const void* element) {
  switch (dtype) {
  case DType::BF16:
    return bf16_bits_to_float(load<uint16_t>(element));
  case DType::F16:
    return decode(kF16, load<uint16_t>(element));
  case DType::F32:
    return load<float>(element);
  case DType::F64:
    return load<double>(element);
  case DType::I8:
    return load<int8_t>(element);
  case DType::I32:
    return load<int32_t>(element);
  case DType::I64:
    return static_cast<double>(load<int64_t>(element));
  case DType::Bool:
    return load<uint8_t>(element) != 0 ? 1.0 : 0.0;
  case DType::F8E4M3:
    return decode(kE4M3, load<uint8_t>(element));
  case DType::F8E5M2:
    return decode(kE5M2, load<uint8_t>(element));
  }
  throw Error(fmt::format("invalid DType value {}", static_cast<int>(dtype)));
}

void store_from_double(DType dtype, void* element, double value) {
  switch (dtype) {
  case DType::BF16:
    return store(element, static_cast<uint16_t>(encode(kBF16, value)));
  case DType::F16:
    return store(element, static_cast<uint16_t>(encode(kF16, value)));
  case DType::F32:
    return store(element, static_cast<float>(value));
  case DType::F64:
    return store(element, value);
  case DType::I8:
    return store(element, clamp_to_int<int8_t>(value));
  case DType::I32:
    return store(element, clamp_to_int<int32_t>(value));
  case DType::I64:
    return store(element, clamp_to_int<int64_t>(value));
  case DType::Bool:
    return store(element, static_cast<uint8_t>(value != 0.0 ? 1 : 0));
  case DType::F8E4M3:
    return store(element, static_cast<uint8_t>(encode(kE4M3, value)));
  case DType::F8E5M2:
    return store(element, static_cast<uint8_t>(encode(kE5M2, value)));
  }
  throw Error(fmt::format("invalid DType value {}", static_cast<int>(dtype)));
}

} // namespace tokamax
