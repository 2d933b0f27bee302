//===- Views.cpp - Checking an op call's tensors against its binding --------===//
#include "ops/lib/framework/Views.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

namespace tokamax::ops_detail {

void throw_mixed_devices(std::string_view op, std::string_view name, int device, std::string_view first,
                         int firstDevice) {
  throw Error(fmt::format("{}: {} is on device {} but {} is on device {}: every tensor of a call must be on one device",
                          op, name, device, first, firstDevice));
}

void check_views(const BoundArgs &args, const std::vector<std::string> &names, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs, bool host) {
  if (inputs.size() + outputs.size() != args.args.size() || names.size() != args.args.size())
    throw Error(fmt::format("{}: {} tensors for {} arguments", args.op, inputs.size() + outputs.size(), args.args.size()));
  int device = -1;
  size_t first = 0;  // the first tensor with data
  for (size_t i = 0; i < args.args.size(); ++i) {
    const TensorView &t = i < inputs.size() ? inputs[i] : outputs[i - inputs.size()];
    const std::string &name = names[i];
    if (!args.args[i]) {
      if (t.data() || t.rank())
        throw Error(fmt::format("{}: {} is bound as absent but a tensor was passed", args.op, name));
      continue;
    }
    const ArgSpec &spec = *args.args[i];
    if (t.dtype() != spec.dtype || !std::equal(t.shape().begin(), t.shape().end(), spec.shape.begin(), spec.shape.end()))
      throw Error(fmt::format("{}: {} is {} {} but was bound as {} [{}]", args.op, name, dtype_name(t.dtype()),
                              format_shape(t.shape()), dtype_name(spec.dtype), fmt::join(spec.shape, ", ")));
    if (!t.is_contiguous())
      throw Error(fmt::format("{}: {} must be contiguous (row-major)", args.op, name));
    if (!t.data() && t.numel() > 0)
      throw Error(fmt::format("{}: {} has no data (a null pointer)", args.op, name));
    if (!host && t.data()) {
      if (device >= 0 && t.device() != device)
        throw_mixed_devices(args.op, name, t.device(), names[first], device);
      if (device < 0)
        first = i;
      device = t.device();
    }
  }
}

void check_spec(const char *op, const char *name, const ArgSpec &spec) {
  int64_t n = 1;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    const int64_t d = spec.shape[i];
    if (d < 0)
      throw Error(fmt::format("{}: {} has a negative size {} in dim {} of shape [{}]", op, name, d, i,
                              fmt::join(spec.shape, ", ")));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw Error(fmt::format("{}: {} of shape [{}] has more than 2^63 elements", op, name, fmt::join(spec.shape, ", ")));
    n *= d;
  }
}

} // namespace tokamax::ops_detail
