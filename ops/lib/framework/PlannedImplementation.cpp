//===- PlannedImplementation.cpp - run / interpret / kernels from execute() -===//
#include "ops/lib/framework/PlannedImplementation.h"

#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/OpEntry.h"

#include "ops/lib/framework/Views.h"

#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <fmt/format.h>

namespace tokamax::ops_detail {

const char *impl_name(ImplKind kind) {
  switch (kind) {
  case ImplKind::Chunked: return "chunked";
  case ImplKind::Tile: return "tile";
  case ImplKind::Hopper: return "hopper";
  case ImplKind::Reference: break;
  }
  return "reference";
}

bool impl_supported_on(ImplKind kind, const std::string &arch) {
  switch (kind) {
  case ImplKind::Reference: return true;
  case ImplKind::Hopper: return Arch::parse(arch).has_wgmma();
  case ImplKind::Chunked:
  case ImplKind::Tile: break;
  }
  return Arch::parse(arch).number() >= 80;
}

int call_device(std::string_view op, std::span<const std::string> names, std::span<const TensorView> inputs,
                std::span<const TensorView> outputs, const Stream &stream) {
  auto name = [&](size_t i) { return i < names.size() ? names[i] : fmt::format("argument {}", i); };
  int device = -1;
  size_t first = 0, i = 0;
  for (auto views : {inputs, outputs})
    for (const TensorView &t : views) {
      if (t.data()) {
        if (device < 0) {
          device = t.device();
          first = i;
        } else if (t.device() != device) {
          throw_mixed_devices(op, name(i), t.device(), name(first), device);
        }
      }
      ++i;
    }
  const int on = detail::stream_device(stream.handle(), device);  // -1: the default stream, any device's
  if (device < 0)  // nothing to read or write: the stream's device (its scratch, its context)
    return on < 0 ? 0 : on;
  if (on >= 0 && on != device)
    detail::throw_stream_device(fmt::format("{}: {} is", op, name(first)), device, on);
  return device;
}

void PlannedImplementation::check_views(const BoundArgs &args, std::span<const TensorView> inputs,
                                        std::span<const TensorView> outputs, bool host) const {
  ops_detail::check_views(args, arg_names_, inputs, outputs, host);
}

std::vector<dsl::Kernel> PlannedImplementation::kernels(const BoundArgs &args, const Config &config) const {
  std::vector<dsl::Kernel> kernels;
  auto recorder = recording_kernel_executor(kernels);
  // The recorder reads no tensor: views without data stand in for the arguments.
  std::vector<TensorView> in(num_inputs_), out(args.args.size() - std::min(num_inputs_, args.args.size()));
  execute(args, config, in, out, *recorder);
  return kernels;
}

void PlannedImplementation::run(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                                std::span<const TensorView> outputs, Stream &stream) const {
  check_views(args, inputs, outputs, false);
  const detail::DeviceScope scope(call_device(args.op, arg_names_, inputs, outputs, stream));
  check_device(args, scope.device());
  execute(args, config, inputs, outputs, *device_kernel_executor(stream, scope.device().ordinal()));
}

void PlannedImplementation::interpret(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                                      std::span<const TensorView> outputs) const {
  check_views(args, inputs, outputs, true);
  execute(args, config, inputs, outputs, *host_kernel_executor());
}

} // namespace tokamax::ops_detail
