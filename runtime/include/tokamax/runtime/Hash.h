//===- Hash.h - Cryptographic and fast in-memory hashes -----------*- C++ -*-===//
//
// SHA-256 names anything that persists (cache keys, file checksums), where a
// collision would silently run the wrong kernel. hash64 is only for in-memory
// tables: fast, seedable, not collision resistant.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/Export.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tokamax {

/// SHA-256 of `data`.
TOKAMAX_API std::array<uint8_t, 32> sha256(std::span<const uint8_t> data);

/// SHA-256 of `data` as 64 lowercase hex characters.
TOKAMAX_API std::string sha256_hex(std::string_view data);

/// Lowercase hex of arbitrary bytes.
TOKAMAX_API std::string hex_encode(std::span<const uint8_t> bytes);

/// Fast non-cryptographic 64-bit hash. Stable within a process only: do not
/// persist it (it reads words in host byte order).
TOKAMAX_API uint64_t hash64(std::string_view data, uint64_t seed = 0);

/// Mixes `value` into `seed`; order matters (combine(a, b) != combine(b, a)).
TOKAMAX_API uint64_t hash_combine(uint64_t seed, uint64_t value);

} // namespace tokamax
