//===- Arch.h - A GPU architecture and what kernels may use on it --*- C++ -*-===//
//
// The target of compilation as one value instead of a bare "sm_90a" string: parse()
// reads a name by one rule (one error for anything else), of() takes a device's, and
// the compiler, the ops and the autotuner ask it what the target has (wgmma, TMA,
// clusters), how much shared memory a block may opt into and how many SMs a persistent
// grid is sized for.
//
// parse() and the properties are constexpr: budgets derived from them stay compile-time
// constants (Arch::parse("sm_90a").shared_memory_per_block() is 227 KiB).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "tokamax/runtime/Export.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tokamax {

class Device;

class TOKAMAX_API Arch {
public:
  /// Reads "sm_<major><minor>" with an optional "a" (the arch-specific feature set):
  /// sm_80, sm_86, sm_89, sm_90, sm_90a, sm_100a, sm_120. The major version is one or
  /// two digits without a leading zero, the minor one digit. Anything else throws one
  /// Error: "arch must look like sm_80 or sm_90a, got 'sm90'", after "<context>: " when
  /// a context (who asked: "export target", "--arch") is given.
  static constexpr Arch parse(std::string_view target, std::string_view context = {});
  /// What parse() reads, or nullopt where it throws.
  static constexpr std::optional<Arch> try_parse(std::string_view target);
  /// The architecture of `device`: sm_90a for compute capability 9.0 and sm_100a for 10.0
  /// (the arch-specific feature sets kernels target there), otherwise sm_<major><minor>;
  /// its sm_count() is the device's.
  static Arch of(const Device& device);

  /// "sm_90a" (what parse() reads back).
  std::string name() const;
  /// The compute capability as one number: 90 for sm_90a, 100 for sm_100a.
  constexpr int number() const { return cc_major_ * 10 + cc_minor_; }
  /// 9 and 0 for sm_90a (named as Device's: glibc defines major() and minor() macros).
  constexpr int cc_major() const { return cc_major_; }
  constexpr int cc_minor() const { return cc_minor_; }
  /// The "a" of sm_90a: features that run on this compute capability only.
  constexpr bool arch_specific() const { return arch_specific_; }

  /// The Tensor Memory Accelerator (cp.async.bulk.tensor): sm_90 and newer.
  constexpr bool has_tma() const { return number() >= 90; }
  /// wgmma (and setmaxnreg) as tokamax's hopper kernels use them: sm_90a only. The TMA
  /// rings, stores and warp-specialized loops are built for this feature set too.
  constexpr bool has_wgmma() const { return number() == 90 && arch_specific_; }
  /// Thread block clusters (distributed shared memory): sm_90 and newer.
  constexpr bool has_clusters() const { return number() >= 90; }

  /// Shared memory one block may use (the opt-in maximum; CUDA C++ Programming Guide,
  /// technical specifications per compute capability), or 0 where unknown.
  constexpr int64_t shared_memory_per_block() const {
    switch (number()) {
    case 70: case 72: return 96 * 1024;
    case 75: return 64 * 1024;
    case 80: case 87: return 163 * 1024;
    case 86: case 89: case 120: case 121: return 99 * 1024;
    case 90: case 100: case 103: return 227 * 1024;
    default: return 0;
    }
  }
  /// SMs to size persistent grids for: the device's when made by of(); otherwise the
  /// arch's usual data-center part: 108 for sm_80 (A100), 132 for sm_90 / sm_90a (H100 /
  /// H200 SXM), 148 for sm_100 / sm_100a (B200); 0 where unknown.
  constexpr int sm_count() const { return sm_count_; }

  /// Equal names and SM counts.
  constexpr bool operator==(const Arch&) const = default;

private:
  constexpr Arch(int cc_major, int cc_minor, bool arch_specific, int sm_count)
      : cc_major_(cc_major), cc_minor_(cc_minor), arch_specific_(arch_specific), sm_count_(sm_count) {}
  static constexpr int default_sm_count(int number) {
    switch (number) {
    case 80: return 108;
    case 90: return 132;
    case 100: return 148;
    default: return 0;
    }
  }
  [[noreturn]] static void bad_name(std::string_view target, std::string_view context);

  int cc_major_ = 0;
  int cc_minor_ = 0;
  bool arch_specific_ = false;
  int sm_count_ = 0;
};

constexpr std::optional<Arch> Arch::try_parse(std::string_view target) {
  if (!target.starts_with("sm_"))
    return std::nullopt;
  std::string_view digits = target.substr(3);
  const bool specific = digits.ends_with('a');
  if (specific)
    digits.remove_suffix(1);
  if (digits.size() < 2 || digits.size() > 3 || digits[0] == '0')
    return std::nullopt;
  int number = 0;
  for (char c : digits) {
    if (c < '0' || c > '9')
      return std::nullopt;
    number = number * 10 + (c - '0');
  }
  return Arch(number / 10, number % 10, specific, default_sm_count(number));
}

constexpr Arch Arch::parse(std::string_view target, std::string_view context) {
  if (std::optional<Arch> arch = try_parse(target))
    return *arch;
  bad_name(target, context);
}

} // namespace tokamax
