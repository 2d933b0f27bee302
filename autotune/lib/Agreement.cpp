//===- Agreement.cpp - Candidates whose outputs disagree are not timed ------===//
//
// Before a call's candidates are timed, each runs once on the call's inputs with its
// outputs filled with NaN bytes, and its outputs are compared with a baseline
// candidate's: one that writes nothing, or garbage, or NaNs where the others write
// numbers, would otherwise be timed and could win. The comparison is coarse on purpose
// (a relative L2 error per output, with a tolerance per dtype far above what a different
// summation order gives), and reads at most the first and last kSampleElements elements
// of each output.
//
//===----------------------------------------------------------------------===//
#include "Phases.h"

#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Memory.h>
#include <tokamax/runtime/Stream.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tokamax::detail {

namespace {

constexpr int64_t kSampleElements = int64_t(1) << 18;

/// The relative L2 error an output of `dtype` may show against the baseline's.
double tolerance(DType dtype) {
  switch (dtype) {
  case DType::F64: return 1e-6;
  case DType::F32: return 1e-2;
  case DType::BF16:
  case DType::F16: return 5e-2;
  default: return is_floating(dtype) ? 0.15 : 0.0;  // fp8; integers exactly
  }
}

/// The sampled elements of one output (floats: the tolerances are far above their
/// rounding, and every candidate's samples are kept until the baseline is chosen).
std::vector<float> sample(const TensorView &t, Stream &stream) {
  const int64_t n = t.numel();
  const size_t size = dtype_size(t.dtype());
  std::vector<uint8_t> bytes(size_t(std::min(n, 2 * kSampleElements)) * size);
  if (n <= 2 * kSampleElements) {
    copy_device_to_host(bytes.data(), t.data(), bytes.size(), stream.handle());
  } else {
    const size_t half = size_t(kSampleElements) * size;
    copy_device_to_host(bytes.data(), t.data(), half, stream.handle());
    copy_device_to_host(bytes.data() + half, t.data() + (uint64_t(n) - uint64_t(kSampleElements)) * size, half,
                        stream.handle());
  }
  stream.synchronize();
  std::vector<float> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(load_as_double(t.dtype(), bytes.data() + i * size));
  return values;
}

using Outputs = std::vector<std::vector<float>>;

/// Runs candidate `c` once with NaN-filled outputs and returns their samples.
Outputs run_once(const CallSearch &call, const Candidate &c, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, Stream &stream) {
  for (const TensorView &t : outputs)
    if (t.data() && t.nbytes())
      memset_d8(t.data(), 0xFF, t.nbytes(), stream.handle());
  c.impl->run(call.args, c.record.config, inputs, outputs, stream);
  Outputs out;
  for (const TensorView &t : outputs)
    out.push_back(t.data() ? sample(t, stream) : std::vector<float>{});
  return out;
}

/// Why `got` disagrees with `base`, or nothing.
std::optional<std::string> disagreement(const Outputs &got, const Outputs &base, std::span<const TensorView> outputs,
                                        const std::vector<std::string> &names) {
  for (size_t o = 0; o < got.size(); ++o) {
    const std::vector<float> &a = got[o], &b = base[o];
    double diff = 0, norm = 0;
    size_t nonFinite = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool fa = std::isfinite(a[i]), fb = std::isfinite(b[i]);
      if (fa != fb) {
        ++nonFinite;
      } else if (fa) {
        const double d = double(a[i]) - double(b[i]);
        diff += d * d;
        norm += double(b[i]) * double(b[i]);
      }
    }
    const std::string &name = o < names.size() ? names[o] : "an output";
    if (nonFinite)
      return fmt::format("output '{}' has {} non-finite values where the baseline's are finite, or the reverse, "
                         "among {} compared",
                         name, nonFinite, a.size());
    const double relative = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    if (relative > tolerance(outputs[o].dtype()))
      return fmt::format("output '{}' differs from the baseline's by {:.3g} (relative L2 error; at most {:.3g} for "
                         "{})",
                         name, relative, tolerance(outputs[o].dtype()), dtype_name(outputs[o].dtype()));
  }
  return std::nullopt;
}

} // namespace

size_t drop_disagreeing(const CallSearch &call, std::vector<TuningRecord> &records, std::vector<size_t> &to_time,
                        std::span<const TensorView> inputs, std::span<const TensorView> outputs, Stream &stream) {
  if (to_time.size() < 2)
    return 0;
  const std::vector<std::string> &args = call.op->arg_names();
  std::vector<std::string> names;
  for (size_t o = 0; o < outputs.size(); ++o)
    names.push_back(call.op->num_inputs() + o < args.size() ? args[call.op->num_inputs() + o] : fmt::format("#{}", o));
  // Every candidate's samples, or an error from its run.
  std::vector<std::optional<Outputs>> results(to_time.size());
  for (size_t k = 0; k < to_time.size(); ++k) {
    try {
      results[k] = run_once(call, call.candidates[to_time[k]], inputs, outputs, stream);
    } catch (const std::exception &e) {
      try {
        stream.synchronize();
      } catch (...) {
      }
      records[to_time[k]].error = fmt::format("run: {}", e.what());
    }
  }
  // The baseline: the first candidate that ran (the first implementation's heuristic),
  // unless more than half of the others disagree with it and another candidate has more
  // agreeing with it.
  auto agreeing = [&](size_t base) {
    size_t count = 0;
    for (size_t k = 0; k < results.size(); ++k)
      count += k != base && results[k] && !disagreement(*results[k], *results[base], outputs, names);
    return count;
  };
  const size_t ran = size_t(std::count_if(results.begin(), results.end(), [](const auto &r) { return r.has_value(); }));
  std::optional<size_t> base;
  size_t bestAgreeing = 0;
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k])
      continue;
    const size_t count = agreeing(k);
    if (!base || count > bestAgreeing) {
      base = k;
      bestAgreeing = count;
    }
    if (2 * (bestAgreeing + 1) > ran)  // a majority (itself included) agrees with it
      break;
  }
  if (!base) {  // none ran: their errors are recorded
    to_time.clear();
    return 0;
  }
  size_t dropped = 0;
  std::vector<size_t> kept;
  for (size_t k = 0; k < results.size(); ++k) {
    TuningRecord &r = records[to_time[k]];
    if (!results[k])  // its run failed (recorded above)
      continue;
    if (k != *base)
      if (auto why = disagreement(*results[k], *results[*base], outputs, names)) {
        const TuningRecord &b = records[to_time[*base]];
        r.error = fmt::format("mismatch: {} (baseline {} {})", *why, b.implementation, b.config.to_json());
        ++dropped;
        continue;
      }
    kept.push_back(to_time[k]);
  }
  to_time = std::move(kept);
  return dropped;
}

} // namespace tokamax::detail
