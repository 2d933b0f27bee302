//===- ImplementationAdapter.h - One Implementation class for every op -*- C++ -*-===//
//
// What an op's implementation provides, declared once. An op names its implementations
// by kind (reference, chunked, tile, hopper; each kind's architecture rule is here),
// reads a bound call into its Problem, and defines beside that Problem (found by
// argument-dependent lookup, so in the Problem's namespace):
//
//   std::optional<std::string> why_not(const Problem &, ImplKind);
//   std::optional<std::string> check_config(const Problem &, ImplKind, const Config &);
//   Config heuristic(const Problem &, ImplKind);
//   std::vector<Config> search_space(const Problem &, ImplKind);
//   void execute(const Problem &, ImplKind, const Config &, std::span<const TensorView> inputs,
//                std::span<const TensorView> outputs, ops_detail::KernelExecutor &);
//   // optional: what only the device can refuse (a workspace past its memory)
//   void check_device(const Problem &, ImplKind, const BoundArgs &, Device &);
//
// OpImplementation<Problem> is the Implementation the op registers: it checks that a
// bound call is for its op, reads the Problem and forwards.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/framework/ImplKind.h"
#include "ops/lib/framework/PlannedImplementation.h"
#include "ops/lib/framework/TypedConfig.h"

#include <tokamax/runtime/Error.h>

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tokamax::ops_detail {

namespace adl {
// Outside the class, so that the op's functions are found by argument-dependent lookup
// rather than hidden by Implementation's members of the same names.
template <class Problem>
std::optional<std::string> why_not_(const Problem &p, ImplKind k) { return why_not(p, k); }
template <class Problem>
std::optional<std::string> check_config_(const Problem &p, ImplKind k, const Config &c) {
  return check_config(p, k, c);
}
template <class Problem>
Config heuristic_(const Problem &p, ImplKind k) { return heuristic(p, k); }
template <class Problem>
std::vector<Config> search_space_(const Problem &p, ImplKind k) { return search_space(p, k); }
template <class Problem>
void execute_(const Problem &p, ImplKind k, const Config &c, std::span<const TensorView> in,
              std::span<const TensorView> out, KernelExecutor &ex) {
  execute(p, k, c, in, out, ex);
}
template <class Problem>
constexpr bool has_check_device = requires(const Problem &p, ImplKind k, const BoundArgs &a, Device &d) {
  check_device(p, k, a, d);
};
template <class Problem>
void check_device_(const Problem &p, ImplKind k, const BoundArgs &args, Device &device) {
  check_device(p, k, args, device);
}
} // namespace adl

template <class Problem>
class OpImplementation final : public PlannedImplementation {
public:
  using Read = std::function<Problem(const BoundArgs &)>;

  /// `op`: the op's name, which bound calls must carry; `arg_names`: inputs, then
  /// outputs; `read`: a bound call of `op` as a Problem.
  OpImplementation(std::string op, std::vector<std::string> arg_names, size_t num_inputs, ImplKind kind, Read read)
      : PlannedImplementation(std::move(arg_names), num_inputs), op_(std::move(op)), kind_(kind),
        read_(std::move(read)) {}
  using Implementation::supported_on;

  std::string name() const override { return impl_name(kind_); }
  bool supported_on(const std::string &arch) const override { return impl_supported_on(kind_, arch); }
  std::optional<std::string> why_not(const BoundArgs &args) const override {
    return adl::why_not_(problem(args), kind_);
  }
  std::optional<std::string> check_config(const BoundArgs &args, const Config &config) const override {
    return adl::check_config_(problem(args), kind_, config);
  }
  Config heuristic(const BoundArgs &args) const override { return adl::heuristic_(problem(args), kind_); }
  std::vector<Config> search_space(const BoundArgs &args) const override {
    return adl::search_space_(problem(args), kind_);
  }
  void execute(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
               std::span<const TensorView> outputs, KernelExecutor &executor) const override {
    adl::execute_(problem(args), kind_, config, inputs, outputs, executor);
  }
  void check_device(const BoundArgs &args, Device &device) const override {
    if constexpr (adl::has_check_device<Problem>)
      adl::check_device_(problem(args), kind_, args, device);
  }

private:
  Problem problem(const BoundArgs &args) const {
    if (args.op != op_)
      throw Error(fmt::format("{}: the arguments are bound for op \"{}\"", op_, args.op));
    return read_(args);
  }

  std::string op_;
  ImplKind kind_;
  Read read_;
};

/// An op's implementations, one per kind in auto's order.
template <class Problem>
std::vector<std::shared_ptr<const Implementation>>
implementations(const std::string &op, const std::vector<std::string> &arg_names, size_t num_inputs,
                std::initializer_list<ImplKind> kinds, typename OpImplementation<Problem>::Read read) {
  std::vector<std::shared_ptr<const Implementation>> list;
  for (ImplKind kind : kinds)
    list.push_back(std::make_shared<OpImplementation<Problem>>(op, arg_names, num_inputs, kind, read));
  return list;
}

/// An implementation in a file of its own, with a typed config (TypedConfig.h):
///
///   struct Hopper {
///     static constexpr ImplKind kind = ImplKind::Hopper;
///     using Problem = ...;  using Config = HopperConfig;  // Config lists its keys
///     static std::optional<std::string> why_not(const Problem &);
///     static Config heuristic(const Problem &);
///     static std::vector<Config> search_space(const Problem &);
///     static std::optional<std::string> check(const Problem &, const Config &);
///     static void execute(const Problem &, const Config &, std::span<const TensorView> inputs,
///                         std::span<const TensorView> outputs, KernelExecutor &);
///     // optional: static void check_device(const Problem &, const BoundArgs &, Device &);
///   };
///
/// The string map is read (from_config) and written (to_config) here only.
template <class Impl>
class TypedImplementation final : public PlannedImplementation {
public:
  using Problem = typename Impl::Problem;
  using TypedConfig = typename Impl::Config;
  using Read = std::function<Problem(const BoundArgs &)>;

  TypedImplementation(std::string op, std::vector<std::string> arg_names, size_t num_inputs, Read read)
      : PlannedImplementation(std::move(arg_names), num_inputs), op_(std::move(op)), read_(std::move(read)) {}
  using Implementation::supported_on;

  std::string name() const override { return impl_name(Impl::kind); }
  bool supported_on(const std::string &arch) const override { return impl_supported_on(Impl::kind, arch); }
  std::optional<std::string> why_not(const BoundArgs &args) const override { return Impl::why_not(problem(args)); }
  std::optional<std::string> check_config(const BoundArgs &args, const Config &config) const override {
    const Problem p = problem(args);
    TypedConfig c;
    try {
      c = from_config<TypedConfig>(config);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return Impl::check(p, c);
  }
  Config heuristic(const BoundArgs &args) const override { return to_config(Impl::heuristic(problem(args))); }
  std::vector<Config> search_space(const BoundArgs &args) const override {
    std::vector<Config> space;
    for (const TypedConfig &c : Impl::search_space(problem(args)))
      space.push_back(to_config(c));
    return space;
  }
  void execute(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
               std::span<const TensorView> outputs, KernelExecutor &executor) const override {
    Impl::execute(problem(args), from_config<TypedConfig>(config), inputs, outputs, executor);
  }
  void check_device(const BoundArgs &args, Device &device) const override {
    if constexpr (requires(const Problem &p) { Impl::check_device(p, args, device); })
      Impl::check_device(problem(args), args, device);
  }

private:
  Problem problem(const BoundArgs &args) const {
    if (args.op != op_)
      throw Error(fmt::format("{}: the arguments are bound for op \"{}\"", op_, args.op));
    return read_(args);
  }

  std::string op_;
  Read read_;
};

/// An op's typed implementations, in auto's order.
template <class... Impls, class Read>
std::vector<std::shared_ptr<const Implementation>>
typed_implementations(const std::string &op, const std::vector<std::string> &arg_names, size_t num_inputs,
                      Read read) {
  return {std::make_shared<TypedImplementation<Impls>>(op, arg_names, num_inputs, read)...};
}

} // namespace tokamax::ops_detail
