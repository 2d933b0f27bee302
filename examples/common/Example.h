// Shared pieces of the examples: GPU detection, random inputs, checks, timing output.
#pragma once

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/DslKernel.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>
#include <tokamax/runtime/Timing.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace example {

/// True when a GPU will run the example; otherwise says why the interpreter runs it.
inline bool use_gpu() {
  if (tokamax::interpreter_requested()) {
    fmt::print("TOKAMAX_INTERPRET=1: running on the CPU interpreter\n");
    return false;
  }
  try {
    if (tokamax::Device::count() > 0) {
      fmt::print("{}\n", tokamax::describe(tokamax::Device::get()));
      return true;
    }
    fmt::print("no CUDA device: running on the CPU interpreter (smaller shape)\n");
  } catch (const tokamax::Error &e) {
    std::string why = e.what();
    fmt::print("no GPU ({}): running on the CPU interpreter (smaller shape)\n", why.substr(0, why.find(". ")));
  }
  return false;
}

/// Random values in [-3, 3] away from zero, rounded to `dtype`.
inline std::vector<double> random_values(size_t n, tokamax::DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(0.05, 3.0);
  std::vector<double> v(n);
  std::vector<uint8_t> one(8);
  for (size_t i = 0; i < n; ++i) {
    double x = (rng() & 1 ? 1 : -1) * dist(rng);
    tokamax::store_from_double(dtype, one.data(), x);
    v[i] = tokamax::load_as_double(dtype, one.data());
  }
  return v;
}

/// Host bytes of `values` in `dtype`.
inline std::vector<uint8_t> to_bytes(const std::vector<double> &values, tokamax::DType dtype) {
  size_t size = tokamax::dtype_size(dtype);
  std::vector<uint8_t> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i)
    tokamax::store_from_double(dtype, bytes.data() + i * size, values[i]);
  return bytes;
}

inline std::vector<double> from_bytes(const std::vector<uint8_t> &bytes, tokamax::DType dtype) {
  size_t size = tokamax::dtype_size(dtype);
  std::vector<double> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = tokamax::load_as_double(dtype, bytes.data() + i * size);
  return values;
}

/// ||got - ref|| / ||ref||; NaN fails.
inline double relative_error(const std::vector<double> &got, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  double e = std::sqrt(num / std::max(den, 1e-300));
  return std::isnan(e) ? INFINITY : e;
}

/// Prints the check and returns the process exit code.
inline int report(const char *what, double error, double tolerance) {
  bool ok = error <= tolerance;
  fmt::print("{}: relative error {:.3e} (tolerance {:.0e}) {}\n", what, error, tolerance, ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}

inline void print_timing(const char *what, const tokamax::Timings &t, double bytes) {
  if (bytes <= 0) {
    fmt::print("{}: median {:.3f} ms (min {:.3f})\n", what, t.median, t.min);
    return;
  }
  fmt::print("{}: median {:.3f} ms (min {:.3f}), {:.0f} GB/s\n", what, t.median, t.min, bytes / t.median / 1e6);
}

} // namespace example
