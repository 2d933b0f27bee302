//===- Softmax.cpp - Row softmax in one pass over registers -----------------===//
#include <tokamax/ops/Softmax.h>

#include "ops/lib/framework/Views.h"
#include "ops/lib/framework/KernelExecutor.h"
#include "ops/lib/framework/PlannedImplementation.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/jit/DslKernel.h>

#include <tokamax/runtime/Device.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Stream.h>
#include <tokamax/runtime/detail/DeviceScope.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

namespace tokamax {

using namespace dsl;

SoftmaxConfig default_config(const SoftmaxSpec &spec) {
  SoftmaxConfig config;
  int64_t cols = dsl::next_power_of_two(spec.cols);
  // About 16 elements per thread: several 16-byte loads in flight, no spills.
  int64_t perProgram = std::max<int64_t>(2048, cols);
  config.block_rows = std::clamp<int64_t>(perProgram / cols, 1, dsl::next_power_of_two(spec.rows));
  int64_t elements = config.block_rows * cols;
  config.num_warps = static_cast<int>(std::clamp<int64_t>(elements / (32 * 16), 1, 16));
  return config;
}

Kernel softmax_kernel(const SoftmaxSpec &spec, const SoftmaxConfig &config) {
  if (spec.rows < 1 || spec.cols < 1)
    throw Error(fmt::format("softmax: needs a non-empty [rows, cols] tensor, got [{}, {}]", spec.rows, spec.cols));
  if (spec.cols > kSoftmaxMaxCols)
    throw NotSupported(fmt::format("softmax: rows of {} elements exceed the {} a program holds in registers",
                                   spec.cols, kSoftmaxMaxCols));
  if (spec.dtype != DType::BF16 && spec.dtype != DType::F16 && spec.dtype != DType::F32 && spec.dtype != DType::F64)
    throw Error(fmt::format("softmax: x must be bf16, f16, f32 or f64, got {}", dtype_name(spec.dtype)));
  DType f = spec.dtype == DType::F64 ? DType::F64 : DType::F32;
  int64_t cols = dsl::next_power_of_two(spec.cols);
  Kernel k("softmax", {config.num_warps});
  TensorArg x = k.input("x", spec.dtype, {spec.rows, spec.cols});
  TensorArg y = k.output("y", spec.dtype, {spec.rows, spec.cols});
  k.grid(cdiv(spec.rows, config.block_rows));
  Value row = k.program_id(0) * Value(config.block_rows);
  // Padding with -inf makes masked columns vanish from the max and the sum.
  Value xs = x.load({row, 0}, {config.block_rows, cols}, -std::numeric_limits<double>::infinity()).to(f);
  Value e = exp(xs - xs.max(1).expand(1));
  // One division per row, then multiplies.
  Value inverse = Value(1.0) / e.sum(1);
  y.store({row, 0}, (e * inverse.expand(1)).to(spec.dtype));
  return k;
}

namespace {

constexpr int64_t kSoftmaxMaxBlockElements = 65536;

struct SoftmaxCall {
  SoftmaxSpec spec;
  SoftmaxConfig config;
  int64_t shape[2];
};

/// Checks the tensors and options; rows = 0 gives a call with nothing to run.
SoftmaxCall bindSoftmax(const TensorView &x, const TensorView &y, const SoftmaxOptions &options) {
  ops_detail::checkSameTensors("softmax", x, y, "x", "y");
  if (x.rank() < 1)
    throw Error("softmax: x must have at least one dimension");
  if (x.dim(-1) < 1)
    throw Error(fmt::format("softmax: the last axis of x [{}] is empty", fmt::join(x.shape(), ", ")));
  SoftmaxCall call;
  call.spec = {x.numel() / x.dim(-1), x.dim(-1), x.dtype()};
  call.config = options.config ? *options.config : default_config(call.spec);
  const SoftmaxConfig &c = call.config;
  if (c.block_rows < 1 || (c.block_rows & (c.block_rows - 1)) || c.num_warps < 1 || c.num_warps > 16 ||
      (c.num_warps & (c.num_warps - 1)))
    throw Error(fmt::format("softmax: config block_rows {} must be a power of two and num_warps {} a power of two "
                            "in [1, 16]",
                            c.block_rows, c.num_warps));
  // One program holds block_rows padded rows in registers: bounded like the norms' blocks
  // (an absurd block_rows would otherwise build a tile the size of memory).
  const int64_t paddedCols = dsl::next_power_of_two(call.spec.cols);
  if (c.block_rows > kSoftmaxMaxBlockElements / paddedCols)
    throw Error(fmt::format("softmax: config block_rows {} holds {} padded columns each, over the {} elements one "
                            "program holds",
                            c.block_rows, paddedCols, kSoftmaxMaxBlockElements));
  call.shape[0] = call.spec.rows;
  call.shape[1] = call.spec.cols;
  return call;
}

} // namespace

void softmax(const TensorView &x, const TensorView &y, Stream &stream, const SoftmaxOptions &options) {
  SoftmaxCall call = bindSoftmax(x, y, options);
  if (call.spec.rows == 0)
    return;
  const std::string names[] = {"x", "y"};
  const TensorView views[] = {x, y};
  const detail::DeviceScope scope(ops_detail::call_device("softmax", names, views, {}, stream));
  Device &device = scope.device();
  KernelKey key = ops_detail::specializationKey("softmax", {call.spec.rows, call.spec.cols, int64_t(call.spec.dtype),
                                                           call.config.block_rows, call.config.num_warps});
  TensorView x2(x.data(), x.dtype(), call.shape, x.device()), y2(y.data(), y.dtype(), call.shape, y.device());
  ops_detail::kernelFor(key, device, [&] { return softmax_kernel(call.spec, call.config); })
      .launch({x2, y2}, stream.handle());
}

void softmax_host(const TensorView &x, const TensorView &y, const SoftmaxOptions &options) {
  SoftmaxCall call = bindSoftmax(x, y, options);
  if (call.spec.rows == 0)
    return;
  HostArg args[] = {HostArg::tensor(reinterpret_cast<void *>(x.data()), x.nbytes()),
                    HostArg::tensor(reinterpret_cast<void *>(y.data()), y.nbytes())};
  tokamax::interpret(softmax_kernel(call.spec, call.config), args);
}

} // namespace tokamax
