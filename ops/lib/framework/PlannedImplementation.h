//===- PlannedImplementation.h - Implementations that plan through executors -*- C++ -*-===//
//
// Our ops' implementations plan every launch, scratch request, zero fill and copy of a
// call through a KernelExecutor. One execute() then serves the device (run), the
// interpreter (interpret), the list of kernels (kernels), and the recording of a launch
// plan (LaunchPlan.h) that eager calls and Functions replay; an Implementation that is
// not one of these (an ops author's own) still runs, through its run(), uncached.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/KernelExecutor.h"

#include <tokamax/ops/Op.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tokamax {
class Device;
}

namespace tokamax::ops_detail {

class PlannedImplementation : public Implementation {
public:
  /// The op's argument names (inputs, then outputs), for errors about the tensors.
  PlannedImplementation(std::vector<std::string> arg_names, size_t num_inputs)
      : arg_names_(std::move(arg_names)), num_inputs_(num_inputs) {}

  /// Plans the call into `executor`; tensors in the op's argument order.
  virtual void execute(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                       std::span<const TensorView> outputs, KernelExecutor &executor) const = 0;
  /// What only the device can refuse (a workspace larger than its memory): throws
  /// NotSupported. Asked before a call is planned for `device`.
  virtual void check_device(const BoundArgs &args, Device &device) const {}

  /// The checks of check_views (Views.h) for this op's arguments.
  void check_views(const BoundArgs &args, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                   bool host) const;
  const std::vector<std::string> &arg_names() const { return arg_names_; }
  size_t num_inputs() const { return num_inputs_; }

  std::vector<dsl::Kernel> kernels(const BoundArgs &args, const Config &config) const override;
  void run(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
           std::span<const TensorView> outputs, Stream &stream) const override;
  void interpret(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                 std::span<const TensorView> outputs) const override;

private:
  std::vector<std::string> arg_names_;
  size_t num_inputs_;
};

/// The device a call on `stream` runs on: its tensors' (the first with data, inputs then
/// outputs; the stream's when none has data, device 0 for the default stream). Throws
/// Error naming the arguments (`names`, in argument order; "argument i" past them) and
/// both devices when the tensors are on several devices or the stream is another
/// device's, before anything is launched.
int call_device(std::string_view op, std::span<const std::string> names, std::span<const TensorView> inputs,
                std::span<const TensorView> outputs, const Stream &stream);

} // namespace tokamax::ops_detail
