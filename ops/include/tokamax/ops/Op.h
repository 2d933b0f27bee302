//===- Op.h - The op framework: bound arguments, configs, implementations -*- C++ -*-===//
//
// An Op (layer_norm, its VJP, ...) has an ordered list of Implementations ("tile",
// "hopper", ..., always ending with "reference", which serves every valid call). A call is
// first bound to a BoundArgs (op name + canonical argument specs + attributes): the key
// for configs, autotuning and caches, and serialisable. Op::select picks the
// implementation (an explicit one that cannot serve the call throws NotSupported with the
// reason; auto takes the first that can), Op::resolve_config its Config (explicit ->
// config providers, e.g. an autotuning scope -> the implementation's heuristic), and
// Implementation::run launches it on a stream (or interpret() runs the same kernels on
// host memory through the CPU interpreter).
//
// A VJP is an Op of its own (own implementations, configs and autotuning); forward ops
// can return the residuals their VJP consumes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Error.h>
#include <tokamax/runtime/Export.h>
#include <tokamax/runtime/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tokamax {

class Device;
class Stream;
namespace dsl {
class Kernel;
}

/// The abstract form of one tensor argument: its shape and dtype.
struct TOKAMAX_API ArgSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;

  static ArgSpec of(const TensorView &t);
  int64_t numel() const;
  /// {"shape":[3,17],"dtype":"bf16"}
  std::string to_json() const;
  static ArgSpec from_json(const std::string &text);
  uint64_t hash() const;
  bool operator==(const ArgSpec &) const = default;
};

/// One op call in canonical form: the key for configs, autotuning results and caches.
/// `args` follows the op's arg_names() (inputs, then outputs); an absent optional
/// argument is std::nullopt. Attribute values are canonical printed values
/// ("axis": "1", "epsilon": "1e-05"), so equal calls give equal BoundArgs.
struct TOKAMAX_API BoundArgs {
  std::string op;
  std::vector<std::optional<ArgSpec>> args;
  std::map<std::string, std::string> attributes;

  /// In-memory hash (stable within a process only; persist to_json() or digest()).
  uint64_t hash() const;
  /// SHA-256 of to_json(): a persistent key.
  std::string digest() const;
  /// {"op":"layer_norm","args":[{"shape":[..],"dtype":".."},null,..],"attributes":{..}}
  std::string to_json() const;
  /// Throws tokamax::Error naming what is wrong with `text`.
  static BoundArgs from_json(const std::string &text);
  bool operator==(const BoundArgs &) const = default;

  /// The spec of argument i; throws Error when it is absent or out of range.
  const ArgSpec &arg(size_t i) const;
  bool has(size_t i) const { return i < args.size() && args[i].has_value(); }
  /// The attribute's printed value; throws Error naming the missing key.
  const std::string &attribute(const std::string &key) const;
  int64_t int_attribute(const std::string &key) const;
  double float_attribute(const std::string &key) const;
};

/// An implementation's tunable parameters (rows per program, warps, block sizes, ...).
struct TOKAMAX_API Config {
  std::map<std::string, int64_t> values;

  Config() = default;
  Config(std::initializer_list<std::pair<const std::string, int64_t>> v) : values(v) {}

  /// The value of `key`; throws Error naming the missing key and the keys present.
  int64_t get(const std::string &key) const;
  int64_t get_or(const std::string &key, int64_t fallback) const;
  bool has(const std::string &key) const { return values.count(key) != 0; }
  Config &set(const std::string &key, int64_t value) {
    values[key] = value;
    return *this;
  }
  /// {"block_rows":4,"num_warps":8}
  std::string to_json() const;
  /// Throws Error unless `text` is a JSON object of integers.
  static Config from_json(const std::string &text);
  uint64_t hash() const;
  bool operator==(const Config &) const = default;
};

/// One way of computing an op.
class TOKAMAX_API Implementation {
public:
  virtual ~Implementation();

  /// "reference", "chunked", "tile" or "hopper".
  virtual std::string name() const = 0;
  /// Whether it can run on GPUs of `arch` ("sm_80", "sm_90a"); works without a GPU.
  virtual bool supported_on(const std::string &arch) const { return true; }
  bool supported_on(const Device &device) const;
  /// std::nullopt when it can serve the call, else the reason it cannot.
  virtual std::optional<std::string> why_not(const BoundArgs &args) const = 0;
  /// std::nullopt when `config` is valid for the call, else what is wrong with it.
  virtual std::optional<std::string> check_config(const BoundArgs &args, const Config &config) const {
    return std::nullopt;
  }
  /// The default config for the call.
  virtual Config heuristic(const BoundArgs &args) const = 0;
  /// The configs an autotuner should time (the heuristic's among them).
  virtual std::vector<Config> search_space(const BoundArgs &args) const { return {heuristic(args)}; }
  /// The DSL kernels a call runs with `config` (for precompilation and PTX checks).
  virtual std::vector<dsl::Kernel> kernels(const BoundArgs &args, const Config &config) const = 0;

  /// Runs the call on device tensors, in the order of the op's arg_names(): `inputs`
  /// then `outputs`; an absent optional argument is a default TensorView.
  virtual void run(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                   std::span<const TensorView> outputs, Stream &stream) const = 0;
  /// The same on the CPU interpreter: the views' data() are host addresses.
  virtual void interpret(const BoundArgs &args, const Config &config, std::span<const TensorView> inputs,
                         std::span<const TensorView> outputs) const = 0;
};

/// Supplies configs for calls (an autotuning scope, the on-disk autotuning cache):
/// std::nullopt when it has none for (args, implementation name).
using ConfigProvider = std::function<std::optional<Config>(const BoundArgs &args, const std::string &implementation)>;

/// The calling thread's stack of config providers, which Op::resolve_config asks newest
/// first for calls made on this thread: a scope applies to the thread that opened it (a
/// thread handed an AutotuningResult opens its own scope with it). push returns an id;
/// pop removes that provider from the calling thread's stack (scopes may end in any order).
TOKAMAX_API uint64_t push_config_provider(ConfigProvider provider);
TOKAMAX_API void pop_config_provider(uint64_t id);
/// A provider for every thread, asked after the calling thread's own (the per-device
/// autotuning cache); it stays for the process.
TOKAMAX_API void add_process_config_provider(ConfigProvider provider);

/// Pushes a provider for the scope's lifetime.
class TOKAMAX_API ConfigProviderScope {
public:
  explicit ConfigProviderScope(ConfigProvider provider) : id_(push_config_provider(std::move(provider))) {}
  ~ConfigProviderScope() { pop_config_provider(id_); }
  ConfigProviderScope(const ConfigProviderScope &) = delete;
  ConfigProviderScope &operator=(const ConfigProviderScope &) = delete;

private:
  uint64_t id_;
};

class TOKAMAX_API Op {
public:
  /// `arg_names`: inputs then outputs (the first `num_inputs` are inputs).
  Op(std::string name, std::vector<std::string> arg_names, size_t num_inputs,
     std::vector<std::shared_ptr<const Implementation>> implementations);
  virtual ~Op();

  const std::string &name() const { return name_; }
  const std::vector<std::string> &arg_names() const { return arg_names_; }
  size_t num_inputs() const { return num_inputs_; }
  /// In the order auto tries them; the last is "reference".
  const std::vector<std::shared_ptr<const Implementation>> &implementations() const { return impls_; }
  /// The implementation called `name`; throws Error listing the known ones.
  const Implementation &implementation(const std::string &name) const;

  /// Checks a BoundArgs (e.g. read from JSON) as bind() would; throws Error naming the
  /// offending argument or attribute.
  virtual void validate(const BoundArgs &args) const = 0;
  /// Checks what the inputs hold that binding cannot see (indices, offsets) where they are
  /// host data, before interpret() runs a kernel on them (on a device such values are the
  /// kernels' to clamp); throws Error naming the argument. By default nothing.
  virtual void check_host_values(const BoundArgs &args, std::span<const TensorView> inputs) const;

  /// An explicit implementation that cannot serve the call (or cannot run on `arch`)
  /// throws NotSupported with the reason; std::nullopt picks the first that can.
  const Implementation &select(const BoundArgs &args, const std::optional<std::string> &implementation,
                               const std::string &arch) const;
  /// explicit_config (checked; Error when invalid) -> the newest config provider with a
  /// valid config for the call -> the implementation's heuristic.
  Config resolve_config(const Implementation &impl, const BoundArgs &args,
                        const std::optional<Config> &explicit_config) const;

  /// select + resolve_config + Implementation::run; tensors in arg_names() order.
  void run(const BoundArgs &args, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
           Stream &stream, const std::optional<std::string> &implementation = std::nullopt,
           const std::optional<Config> &config = std::nullopt) const;
  /// The same on the interpreter (host views); `arch` only matters for select().
  void interpret(const BoundArgs &args, std::span<const TensorView> inputs, std::span<const TensorView> outputs,
                 const std::optional<std::string> &implementation = std::nullopt,
                 const std::optional<Config> &config = std::nullopt, const std::string &arch = "sm_90a") const;

private:
  std::string name_;
  std::vector<std::string> arg_names_;
  size_t num_inputs_;
  std::vector<std::shared_ptr<const Implementation>> impls_;
};

/// Ops register themselves (by name) so tools can find them from a BoundArgs.
TOKAMAX_API void register_op(const Op &op);
/// The registered op called `name`, or null.
TOKAMAX_API const Op *find_op(const std::string &name);
TOKAMAX_API std::vector<const Op *> registered_ops();

/// Scratch device memory (16-byte aligned, at least `bytes`) for the kernels one op call
/// enqueues on `stream`. Each (device, stream) has one buffer that every call on that
/// stream reuses, which stream order makes safe; when a call needs more, a larger buffer
/// replaces it and the old one stays allocated (work queued earlier may still use it), so
/// no call ever synchronises. Thread-safe; not for one stream fed by several threads at once.
TOKAMAX_API uint64_t stream_workspace(Device &device, const Stream &stream, size_t bytes);

/// A host tensor view (for Implementation::interpret and the *_host functions).
TOKAMAX_API TensorView host_view(const void *data, DType dtype, std::span<const int64_t> shape);
inline TensorView host_view(const void *data, DType dtype, std::initializer_list<int64_t> shape) {
  return host_view(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()));
}

} // namespace tokamax
