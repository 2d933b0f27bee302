// Loads an export through the installed libtokamax_runtime (no compiler, no MLIR):
//   runtime-consumer FILE         validates and describes it (no GPU needed)
//   runtime-consumer --run FILE   then runs it on a GPU of its kind (exit 77: skipped,
//                                 with the reason, where there is none)
#include <tokamax/export/ExportedFunction.h>
#include <tokamax/runtime/Benchmark.h>
#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Driver.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/Tensor.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kSkipped = 77;

int runOnGpu(const tokamax::ExportedFunction &e) {
  if (!tokamax::driver_available() || tokamax::Device::count() == 0) {
    std::printf("runtime-consumer: SKIPPED the run: no GPU (the file was loaded and validated)\n");
    return kSkipped;
  }
  tokamax::Device &device = tokamax::Device::get(0);
  const tokamax::ExportTarget here = tokamax::ExportTarget::of(device);
  if (!e.target().accepts(here)) {
    std::printf("runtime-consumer: SKIPPED the run: the file is for %s, this GPU is %s\n", e.target().to_string().c_str(),
                here.to_string().c_str());
    return kSkipped;
  }
  std::vector<tokamax::Tensor> in, out;
  std::vector<tokamax::TensorView> inViews, outViews;
  uint32_t seed = 1;
  for (const auto &[shape, dtype] : e.input_specs())
    in.push_back(tokamax::standardize({shape, dtype}, seed++, device));
  for (const auto &[shape, dtype] : e.output_specs())
    out.push_back(tokamax::Tensor::empty(shape, dtype, device));
  for (const tokamax::Tensor &t : in)
    inViews.push_back(t.view());
  for (const tokamax::Tensor &t : out)
    outViews.push_back(t.view());
  tokamax::Stream stream = tokamax::Stream::create(device);
  e.run(inViews, outViews, stream);
  stream.synchronize();
  size_t elements = 0, finite = 0;
  for (const tokamax::Tensor &t : out)
    for (double v : t.to_host_doubles()) {
      ++elements;
      finite += std::isfinite(v);
    }
  std::printf("runtime-consumer: ran %zu launches on %s: %zu of %zu output elements finite\n", e.launch_count(),
              device.name().c_str(), finite, elements);
  return finite == elements && elements > 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  const bool run = argc == 3 && std::string(argv[1]) == "--run";
  if (argc != 2 && !run) {
    std::fprintf(stderr, "usage: runtime-consumer [--run] FILE\n");
    return 2;
  }
  try {
    tokamax::ExportedFunction e = tokamax::ExportedFunction::load(argv[argc - 1]);
    std::printf("%s", e.describe().c_str());
    if (e.kernels().empty() || e.launch_count() == 0 || e.input_specs().empty()) {
      std::printf("runtime-consumer: the export holds no kernels, launches or inputs\n");
      return 1;
    }
    std::printf("runtime-consumer: loaded and validated format version %u (%zu kernels) with libtokamax_runtime\n",
                e.format_version(), e.kernels().size());
    return run ? runOnGpu(e) : 0;
  } catch (const tokamax::Error &error) {
    std::printf("runtime-consumer: error: %s\n", error.what());
    return 1;
  }
}
