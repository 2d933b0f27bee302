//===- DslKernel.cpp - Compile, interpret and run DSL kernels ---------------===//
#include <tokamax/jit/DslKernel.h>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Hash.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <fmt/format.h>

#include <vector>

namespace tokamax {

CompiledKernel compile(const dsl::Kernel &kernel, const CompileOptions &options) {
  return compile_ir(kernel.ir(), options);
}

int64_t planned_shared_bytes(const dsl::Kernel &kernel) { return planned_shared_bytes(kernel.ir()); }

SharedPlan planned_shared(const dsl::Kernel &kernel) { return planned_shared(kernel.ir()); }

void interpret(const dsl::Kernel &kernel, std::span<HostArg> args) {
  interpret_ir(kernel.ir(), args);
}

void run_on_device(const dsl::Kernel &kernel, std::span<HostArg> args, Device &device) {
  std::string ir = kernel.ir();
  const LoadedKernel &loaded = Jit::instance().get_ir(KernelKey(ir), device, [&] { return ir; });  // the IR is the key
  const auto &params = loaded.info().params;
  if (args.size() != params.size())
    throw Error(fmt::format("{}: expected {} arguments, got {}", kernel.name(), params.size(), args.size()));
  std::vector<Tensor> tensors;
  std::vector<KernelArg> launchArgs;
  tensors.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const KernelParam &p = params[i];
    if (!p.is_tensor) {
      launchArgs.emplace_back(args[i].scalar);
      continue;
    }
    tensors.push_back(Tensor::empty(p.shape, p.dtype, device));
    if (args[i].bytes != tensors.back().nbytes())
      throw Error(fmt::format("{}: argument '{}' has {} bytes, expected {}", kernel.name(), p.name,
                              args[i].bytes, tensors.back().nbytes()));
    tensors.back().copy_from_host(args[i].data, args[i].bytes);
    launchArgs.emplace_back(tensors.back().view());
  }
  Stream stream = Stream::create(device);
  loaded.launch(launchArgs, stream.handle());
  stream.synchronize();
  for (size_t i = 0, t = 0; i < params.size(); ++i)
    if (params[i].is_tensor) {
      tensors[t].copy_to_host(args[i].data, args[i].bytes);
      ++t;
    }
}

PrecompileResult precompile(const dsl::Kernel &kernel, const CompileOptions &options,
                            const std::string &cacheDir) {
  return precompile_ir(kernel.name(), kernel.ir(), options, cacheDir);
}

} // namespace tokamax
