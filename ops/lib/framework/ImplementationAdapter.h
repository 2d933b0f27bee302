//===- ImplementationAdapter.h - One Implementation class for every op -*- C++ -*-===//
//
// What an op's implementation provides, declared once (TOKAMAX_IMPLEMENTATION_MEMBERS):
// TypedImplementation<Impl> is the Implementation an op registers for each of its
// implementation structs (one per file: Reference.cpp, Chunked.cpp, Tile.cpp, Hopper.cpp),
// which hold a typed config (TypedConfig.h) and its why_not, heuristic, search space,
// check and plan. The string map a config is outside (results, caches, exports,
// --config) is read and written here only; the kind's architecture rule is ImplKind's.
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

/// What an op's implementation provides: a struct in a file of its own (Reference.cpp,
/// Chunked.cpp, Tile.cpp, Hopper.cpp) whose config is typed (TypedConfig.h), declared in
/// the op's Common.h as
///
///   struct Hopper {
///     TOKAMAX_IMPLEMENTATION_MEMBERS(ImplKind::Hopper, hopper_detail::Problem, HopperConfig)
///     // optional: static void check_device(const Problem &, const BoundArgs &, Device &);
///   };
///
/// The members, declared once here so that every op's implementations take the same
/// signatures TypedImplementation<Impl> calls: its kind, Problem and Config, and
///   why_not(p):      why it cannot serve the call (nullopt: it can);
///   heuristic(p):    its config for the call;
///   search_space(p): the configs autotuning tries, the heuristic's first;
///   check(p, c):     what is wrong with `c` for the call (nullopt: nothing);
///   execute(p, c, inputs, outputs, executor): the call's kernels at `c`.
/// `problem` must name the op's Problem with its namespace (a member alias cannot
/// reuse its own name unqualified).
#define TOKAMAX_IMPLEMENTATION_MEMBERS(impl_kind, problem, config)                                                 \
  static constexpr ::tokamax::ops_detail::ImplKind kind = impl_kind;                                              \
  using Problem = problem;                                                                                        \
  using Config = config;                                                                                          \
  static std::optional<std::string> why_not(const Problem &p);                                                    \
  static Config heuristic(const Problem &p);                                                                      \
  static std::vector<Config> search_space(const Problem &p);                                                      \
  static std::optional<std::string> check(const Problem &p, const Config &c);                                     \
  static void execute(const Problem &p, const Config &c, std::span<const ::tokamax::TensorView> inputs,           \
                      std::span<const ::tokamax::TensorView> outputs,                                             \
                      ::tokamax::ops_detail::KernelExecutor &executor);

/// The Implementation an op registers for each of its implementation structs: the
/// string map is read (from_config) and written (to_config) here only.
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
