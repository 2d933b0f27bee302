//===- HostBuffers.h - host tensors, random inputs, comparisons for tests -*- C++ -*-===//
//
// What every op's float64 checks share (attention's, the products', the norms', the
// cross-entropy's, paged decode's): host buffers of any dtype, seeded normal inputs, a
// comparison with dtype-aware tolerances that reports the worst element, and the host
// threads their references and big buffers run on (the same figures whatever the thread
// count).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Op.h>
#include <tokamax/runtime/DType.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace attention_test {

using tokamax::DType;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline int64_t product(const std::vector<int64_t> &dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

inline std::vector<int64_t> concat(std::vector<int64_t> head, std::initializer_list<int64_t> tail) {
  head.insert(head.end(), tail);
  return head;
}

/// Runs body(worker, begin, end) over [0, n) in chunks of `chunk` taken in turn by
/// `threads` workers (inline for one). `body` must not throw or use Catch2.
template <class Body> void parallelChunks(int64_t n, int64_t chunk, int threads, Body body) {
  std::atomic<int64_t> next{0};
  auto worker = [&](int id) {
    for (int64_t begin; (begin = next.fetch_add(chunk)) < n;)
      body(id, begin, std::min(n, begin + chunk));
  };
  if (threads <= 1)
    return worker(0);
  std::vector<std::thread> pool;
  for (int id = 0; id < threads; ++id)
    pool.emplace_back(worker, id);
  for (std::thread &t : pool)
    t.join();
}

inline int hostThreads() { return int(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, 64)); }

/// Element loops of the big buffers (a GPU test's [4096, 131072] weights: ~0.5 G
/// elements) in parallel chunks of kElementChunk; smaller ones inline. body(begin, end).
constexpr int64_t kElementChunk = int64_t(1) << 20, kParallelElements = int64_t(1) << 22;
template <class Body> void forElements(int64_t n, Body body) {
  if (n < kParallelElements)
    return body(int64_t(0), n);
  parallelChunks(n, kElementChunk, hostThreads(), [&](int, int64_t begin, int64_t end) { body(begin, end); });
}

/// A host tensor of one dtype in 8-byte aligned storage (for host_view and uploads).
/// New float buffers hold NaN and others 0xA5 bytes, so unwritten elements show.
struct HostBuffer {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint64_t> storage;

  HostBuffer() = default;
  HostBuffer(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    storage.assign((size_t(numel()) * tokamax::dtype_size(d) + 7) / 8, 0xA5A5A5A5A5A5A5A5ull);
    if (tokamax::is_floating(d))
      forElements(numel(), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          set(i, std::numeric_limits<double>::quiet_NaN());
      });
  }
  /// `values` rounded to `d` (nearest even).
  HostBuffer(DType d, std::vector<int64_t> s, const std::vector<double> &values) : dtype(d), shape(std::move(s)) {
    storage.assign((size_t(numel()) * tokamax::dtype_size(d) + 7) / 8, 0);
    forElements(numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        set(i, values[size_t(i)]);
    });
  }
  int64_t numel() const { return product(shape); }
  size_t nbytes() const { return size_t(numel()) * tokamax::dtype_size(dtype); }
  uint8_t *bytes() { return reinterpret_cast<uint8_t *>(storage.data()); }
  const uint8_t *bytes() const { return reinterpret_cast<const uint8_t *>(storage.data()); }
  const uint8_t *element(int64_t i) const { return bytes() + size_t(i) * tokamax::dtype_size(dtype); }
  double at(int64_t i) const { return tokamax::load_as_double(dtype, element(i)); }
  void set(int64_t i, double v) {
    tokamax::store_from_double(dtype, bytes() + size_t(i) * tokamax::dtype_size(dtype), v);
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    forElements(numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        v[size_t(i)] = at(i);
    });
    return v;
  }
  tokamax::TensorView view() const { return tokamax::host_view(storage.data(), dtype, shape); }
};

/// `values` rounded to `d` and back (what a buffer of `d` holds).
inline std::vector<double> roundedTo(DType d, std::vector<double> values) {
  forElements(int64_t(values.size()), [&](int64_t begin, int64_t end) {
    uint64_t one;
    for (int64_t i = begin; i < end; ++i) {
      tokamax::store_from_double(d, &one, values[size_t(i)]);
      values[size_t(i)] = tokamax::load_as_double(d, &one);
    }
  });
  return values;
}

/// `count` normal values (mean 0, `stddev`) into `out`, never zero (magnitudes below 1e-3
/// of stddev are drawn again). Box-Muller over a 64-bit Mersenne Twister seeded with
/// `state`: the same values with every standard library.
inline void fillNormal(double *out, size_t count, uint64_t state, double stddev) {
  std::mt19937_64 rng(state);
  auto uniform = [&] { return (double(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  size_t filled = 0;
  while (filled < count) {
    const double radius = std::sqrt(-2 * std::log(uniform())), angle = 2 * std::numbers::pi * uniform();
    for (double x : {radius * std::cos(angle), radius * std::sin(angle)})
      if (std::abs(x) >= 1e-3 && filled < count)
        out[filled++] = stddev * x;
  }
}

/// Normal values rounded to `d` (fillNormal). Up to kParallelElements from one stream;
/// more (the GPU tests' benchmark-sized operands) from one stream per kElementChunk
/// values, drawn in parallel: the same values whatever the thread count.
inline std::vector<double> randomNormal(size_t count, DType d, uint64_t seed, double stddev = 1.0) {
  const uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  std::vector<double> v(count);
  if (int64_t(count) < kParallelElements) {
    fillNormal(v.data(), count, state, stddev);
  } else {
    forElements(int64_t(count), [&](int64_t begin, int64_t end) {
      fillNormal(v.data() + begin, size_t(end - begin), state ^ (uint64_t(begin / kElementChunk + 1) * 0xD1B54A32D192ED03ull),
                 stddev);
    });
  }
  return roundedTo(d, std::move(v));
}

/// Mask bytes: 1 with probability `density`.
inline std::vector<uint8_t> randomMask(size_t count, uint64_t seed, double density) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> m(count);
  for (uint8_t &b : m)
    b = double(rng() >> 11) * 0x1.0p-53 < density;
  return m;
}

/// Bounds on got vs ref: every element's |got - ref| / (|ref| + scale) <= max_scaled,
/// where scale is the largest of the rms of ref, the rms of the ref row (last dim) that
/// holds the element, and a floor: relative for large elements, absolute at the size of
/// their row for small ones (a row's rounding errors follow its own size: causal
/// attention's first query rows have far larger dq than the tensor's typical one); and
/// ||got - ref|| / max(||ref||, floor sqrt(n)) <= rms_relative.
struct Tolerance {
  double max_scaled, rms_relative;
  Tolerance operator*(double f) const { return {max_scaled * f, rms_relative * f}; }
};

/// For results stored in `d` (bf16 / f16 outputs carry their rounding; the VJP's terms
/// also go through rounded probabilities and dS). f32 on the GPU goes through the
/// approximate ex2 / lg2 / tanh instructions (tanh.approx: ~5e-4 relative, which a soft
/// cap scales into the logits): 6.6e-6 rms relative was seen there with cap 3.
inline Tolerance tolerance(DType d) {
  switch (d) {
  case DType::BF16: return {4e-2, 6e-3};
  case DType::F16: return {6e-3, 1.2e-3};
  case DType::F32: return {2e-4, 2e-5};
  default: return {1e-11, 1e-13};
  }
}

/// The larger bounds of two: dbias in f32 still carries the errors of bf16 inputs' dS.
inline Tolerance looser(Tolerance a, Tolerance b) {
  return {std::max(a.max_scaled, b.max_scaled), std::max(a.rms_relative, b.rms_relative)};
}

struct Comparison {
  bool ok = true;
  double max_abs_error = 0, max_scaled_error = 0, rms_relative_error = 0, ref_rms = 0;
  int64_t worst = -1, bad_specials = 0;  ///< NaN, or an infinity where the other is not the same
  double got_at_worst = 0, ref_at_worst = 0;
  std::string message;
};

inline std::string formatIndex(int64_t flat, const std::vector<int64_t> &shape) {
  std::vector<int64_t> index(shape.size());
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    index[i] = shape[i] ? flat % shape[i] : 0;
    flat = shape[i] ? flat / shape[i] : 0;
  }
  return fmt::format("[{}]", fmt::join(index, ", "));
}

/// `floor`: the least scale, for results that can cancel to zero (see checkResults).
inline Comparison compare(const std::string &name, const std::vector<double> &got, const std::vector<double> &ref,
                          const std::vector<int64_t> &shape, Tolerance tol, double floor = 0) {
  Comparison c;
  if (got.size() != ref.size()) {
    c.ok = false;
    c.message = fmt::format("{}: {} values, expected {}", name, got.size(), ref.size());
    return c;
  }
  const size_t rowLength = shape.empty() ? 1 : size_t(std::max<int64_t>(1, shape.back()));
  const int64_t rows = int64_t((ref.size() + rowLength - 1) / rowLength);
  std::vector<double> rowScale(size_t(rows) + 1, 0.0);
  // Big buffers in chunks of whole rows, in parallel: each chunk's partial sums and worst
  // element, folded in chunk order (the same figures whatever the thread count; one chunk,
  // the serial sums, below kParallelElements).
  const int64_t rowsPerChunk = int64_t(ref.size()) < kParallelElements
                                   ? std::max<int64_t>(rows, 1)
                                   : std::max<int64_t>(kElementChunk / int64_t(rowLength), 1);
  const int64_t chunks = (rows + rowsPerChunk - 1) / rowsPerChunk;
  struct Partial {
    double sumSq = 0, errSq = 0, maxScaled = 0, maxAbs = 0, gotAtWorst = 0, refAtWorst = 0;
    size_t finite = 0;
    int64_t worst = -1, badSpecials = 0;
  };
  std::vector<Partial> parts(static_cast<size_t>(chunks));
  auto overChunks = [&](auto body) {
    if (chunks <= 1)
      return chunks == 1 ? body(int64_t(0)) : void();
    parallelChunks(chunks, 1, hostThreads(), [&](int, int64_t c0, int64_t c1) {
      for (int64_t ch = c0; ch < c1; ++ch)
        body(ch);
    });
  };
  auto rowsOf = [&](int64_t ch) {
    return std::pair{size_t(ch * rowsPerChunk), size_t(std::min(rows, (ch + 1) * rowsPerChunk))};
  };
  overChunks([&](int64_t ch) {
    Partial &part = parts[size_t(ch)];
    for (auto [row, last] = rowsOf(ch); row < last; ++row) {
      double rowSq = 0;
      size_t rowFinite = 0;
      for (size_t i = row * rowLength; i < std::min(ref.size(), (row + 1) * rowLength); ++i)
        if (std::isfinite(ref[i]))
          rowSq += ref[i] * ref[i], ++rowFinite;
      rowScale[row] = std::sqrt(rowSq / double(std::max<size_t>(rowFinite, 1)));
      part.sumSq += rowSq, part.finite += rowFinite;
    }
  });
  double sumSq = 0, errSq = 0;
  size_t finite = 0;
  for (const Partial &part : parts)
    sumSq += part.sumSq, finite += part.finite;
  c.ref_rms = std::sqrt(sumSq / double(std::max<size_t>(finite, 1)));
  overChunks([&](int64_t ch) {
    Partial &part = parts[size_t(ch)];
    const auto [firstRow, lastRow] = rowsOf(ch);
    for (size_t i = firstRow * rowLength; i < std::min(ref.size(), lastRow * rowLength); ++i) {
      const double scale = std::max({c.ref_rms, rowScale[i / rowLength], floor});
      double err, scaled;
      if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) {
        const bool same = got[i] == ref[i];  // equal infinities; NaN never equals
        err = scaled = same ? 0.0 : kInf;
        part.badSpecials += !same;
      } else {
        err = std::abs(got[i] - ref[i]);
        part.errSq += err * err;
        scaled = err == 0 ? 0.0 : err / (std::abs(ref[i]) + scale);
      }
      if (scaled > part.maxScaled)
        part.maxScaled = scaled, part.worst = int64_t(i), part.gotAtWorst = got[i], part.refAtWorst = ref[i];
      part.maxAbs = std::max(part.maxAbs, err);
    }
  });
  for (const Partial &part : parts) {
    errSq += part.errSq;
    c.bad_specials += part.badSpecials;
    c.max_abs_error = std::max(c.max_abs_error, part.maxAbs);
    if (part.maxScaled > c.max_scaled_error)
      c.max_scaled_error = part.maxScaled, c.worst = part.worst, c.got_at_worst = part.gotAtWorst,
      c.ref_at_worst = part.refAtWorst;
  }
  const double norm = std::max(std::sqrt(sumSq), floor * std::sqrt(double(finite)));
  c.rms_relative_error = norm > 0 ? std::sqrt(errSq) / norm : (errSq > 0 ? kInf : 0.0);
  c.ok = c.bad_specials == 0 && c.max_scaled_error <= tol.max_scaled && c.rms_relative_error <= tol.rms_relative;
  c.message = fmt::format("{}: max |got - ref| {:.3g}, ref rms {:.3g}; scaled error {:.3g} (bound {:.3g}){}; rms "
                          "relative {:.3g} (bound {:.3g}); {} NaN / misplaced infinities",
                          name, c.max_abs_error, c.ref_rms, c.max_scaled_error, tol.max_scaled,
                          c.worst < 0 ? std::string()
                                      : fmt::format(" worst at {} (got {:.6g}, ref {:.6g})",
                                                    formatIndex(c.worst, shape), c.got_at_worst, c.ref_at_worst),
                          c.rms_relative_error, tol.rms_relative, c.bad_specials);
  return c;
}

} // namespace attention_test
