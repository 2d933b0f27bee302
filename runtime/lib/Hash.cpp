//===- Hash.cpp - SHA-256 via libcrypto and a fast 64-bit hash ------------===//

#include <tokamax/runtime/Hash.h>

// The one-call SHA-256 routines (deprecated, not removed, in OpenSSL 3): EVP_Digest
// would link libcrypto's provider machinery (about 3 MB) into libtokamax_runtime for the
// same code (SHA-NI where the CPU has it).
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <cstring>
#include <stdexcept>

namespace tokamax {

std::array<uint8_t, 32> sha256(std::span<const uint8_t> data) {
  static_assert(SHA256_DIGEST_LENGTH == 32);
  std::array<uint8_t, 32> out{};
  SHA256_CTX context;
  // These cannot fail on a valid context; a silently wrong digest would poison the
  // cache, so a failure is fatal all the same.
  if (SHA256_Init(&context) != 1 || SHA256_Update(&context, data.data(), data.size()) != 1 ||
      SHA256_Final(out.data(), &context) != 1)
    throw std::runtime_error("tokamax: SHA-256 computation failed");
  return out;
}

std::string hex_encode(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  auto digest = sha256({reinterpret_cast<const uint8_t*>(data.data()), data.size()});
  return hex_encode(digest);
}

namespace {

// Odd constants with well-spread bits (golden ratio and two 64-bit primes).
constexpr uint64_t kK0 = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kK1 = 0xd6e8feb86659fd93ull;
constexpr uint64_t kK2 = 0xa0761d6478bd642full;

// Full 64x64->128 multiply folded back to 64 bits: every input bit reaches the
// output, which a plain 64-bit multiply does not give for the high bits.
inline uint64_t fold_mul(uint64_t a, uint64_t b) {
  unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint64_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Avalanche so that nearby states map to unrelated outputs.
inline uint64_t finalize(uint64_t h) {
  h ^= h >> 31;
  h *= kK1;
  h ^= h >> 29;
  h *= kK2;
  h ^= h >> 32;
  return h;
}

// One absorption step; the rotate keeps the old state even if the product is 0.
inline uint64_t absorb(uint64_t h, uint64_t w0, uint64_t w1) {
  return fold_mul(w0 ^ h ^ kK1, w1 ^ kK2) ^ rotl(h, 23);
}

} // namespace

uint64_t hash64(std::string_view data, uint64_t seed) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  size_t n = data.size();
  uint64_t h = fold_mul(seed ^ kK0, static_cast<uint64_t>(n) ^ kK1) ^ seed;
  while (n > 16) {
    h = absorb(h, load64(p), load64(p + 8));
    p += 16;
    n -= 16;
  }
  // 0..16 trailing bytes, read with overlapping loads instead of a byte loop.
  uint64_t w0 = 0, w1 = 0;
  if (n >= 8) {
    w0 = load64(p);
    w1 = load64(p + n - 8);
  } else if (n >= 4) {
    w0 = (load32(p) << 32) | load32(p + n - 4);
  } else if (n > 0) {
    w0 = (uint64_t(p[0]) << 16) | (uint64_t(p[n / 2]) << 8) | p[n - 1];
  }
  h = absorb(h, w0, w1 ^ n);
  return finalize(h ^ static_cast<uint64_t>(data.size()));
}

uint64_t hash_combine(uint64_t seed, uint64_t value) {
  return finalize(fold_mul(seed ^ kK0, value ^ kK2) ^ rotl(seed, 29) ^ value);
}

} // namespace tokamax
