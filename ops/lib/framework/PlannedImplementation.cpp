//===- PlannedImplementation.cpp - run / interpret / kernels from execute() -===//
#include "ops/lib/framework/PlannedImplementation.h"

#include "ops/lib/framework/ImplementationAdapter.h"
#include "ops/lib/framework/OpEntry.h"

#include "ops/lib/framework/Views.h"

#include <tokamax/runtime/Arch.h>
#include <tokamax/runtime/Device.h>

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

int device_of(std::span<const TensorView> inputs, std::span<const TensorView> outputs) {
  for (auto views : {inputs, outputs})
    for (const TensorView &t : views)
      if (t.data())
        return t.device();
  return 0;
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
  const int device = device_of(inputs, outputs);
  check_device(args, Device::get(device));
  execute(args, config, inputs, outputs, *device_kernel_executor(stream, device));
}

void PlannedImplementation::interpret(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                                      std::span<const TensorView> outputs) const {
  check_views(args, inputs, outputs, true);
  execute(args, config, inputs, outputs, *host_kernel_executor());
}

} // namespace tokamax::ops_detail
