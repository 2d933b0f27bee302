//===- Function.h - Traced functions of ops, their gradients ------*- C++ -*-===//
//
// A Function is a C++ callable traced once over symbolic values of given specs: every op
// call is recorded with its BoundArgs. grad() appends the VJP ops in reverse order, fed
// by the residuals the forward ops produce, plus small glue ops (sum, add for fan-out,
// fill, cast). A Function runs on device tensors (intermediates are allocated once per
// Function and reused), eagerly or replayed as a CUDA graph, or on host arrays through the
// interpreter.
//
//   Function loss = Function::trace({x_spec, scale_spec}, [](Tracer &t, auto in) {
//     auto y = t.layer_norm(t.layer_norm(in[0], in[1]), in[1]);
//     return std::vector{t.sum(y)};
//   });
//   Function dloss = grad(loss, {0, 1});  // d/dx, d/dscale
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/ops/Attention.h>
#include <tokamax/ops/CrossEntropy.h>
#include <tokamax/ops/GatedLinearUnit.h>
#include <tokamax/ops/RaggedDot.h>
#include <tokamax/ops/Norm.h>
#include <tokamax/ops/Op.h>
#include <tokamax/ops/SoftmaxCrossEntropy.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace tokamax {

class Stream;
class Function;

/// How Function::run enqueues the calls.
struct TOKAMAX_API FunctionRunOptions {
  /// Replay the run as one CUDA graph (one cuGraphLaunch) instead of launching every
  /// kernel from the host. Needs a created stream (Stream::create).
  bool graph = false;
};

/// What a Function's graph runs did: graphs captured, instantiated, updated in place
/// (new addresses taken by a held graph), and replays launched; and the kernel launches,
/// memsets and copies one replay holds.
struct TOKAMAX_API FunctionGraphStats {
  uint64_t captures = 0, instantiations = 0, updates = 0, replays = 0;
  size_t nodes = 0;
};

/// A symbolic tensor of a Function being traced.
struct TOKAMAX_API Sym {
  int id = -1;
};

/// What a traced callable calls: the ops a Function can record.
class TOKAMAX_API Tracer {
public:
  explicit Tracer(Function &f) : f_(f) {}

  /// `implementation` pins the call (and its VJP) to one implementation; std::nullopt: auto.
  Sym layer_norm(Sym x, std::optional<Sym> scale = std::nullopt, std::optional<Sym> offset = std::nullopt,
                 int axis = -1, double epsilon = 1e-6, std::optional<std::string> implementation = std::nullopt);
  Sym rms_norm(Sym x, std::optional<Sym> scale = std::nullopt, int axis = -1, double epsilon = 1e-6,
               std::optional<std::string> implementation = std::nullopt);
  /// Attention over traced q, k, v (the same value may be passed more than once: grad adds
  /// the contributions). options' tensor pointers are ignored: pass the optional tensors
  /// as values; options.implementation pins the call and its VJP (a forward pinned to
  /// "hopper" whose call the hopper VJP refuses, head dims past 128, leaves it to auto);
  /// options.deterministic goes to the VJP (Call::vjp_attributes). grad differentiates q,
  /// k, v, bias and sinks.
  Sym dot_product_attention(Sym q, Sym k, Sym v, const AttentionOptions &options = {},
                            std::optional<Sym> bias = std::nullopt, std::optional<Sym> mask = std::nullopt,
                            std::optional<Sym> q_seq_lengths = std::nullopt,
                            std::optional<Sym> kv_seq_lengths = std::nullopt, std::optional<Sym> sinks = std::nullopt);
  /// Packed variable-length attention (Attention.h's cu_seqlens): q [total_q, N, H], k / v
  /// [total_kv, K, *], the int32 [B + 1] arrays as values; options.max_seqlen_q /
  /// max_seqlen_kv required (its tensor pointers ignored). grad differentiates q, k, v
  /// and sinks.
  Sym dot_product_attention_varlen(Sym q, Sym k, Sym v, Sym cu_seqlens_q, Sym cu_seqlens_kv,
                                   const AttentionOptions &options, std::optional<Sym> sinks = std::nullopt);
  /// act(x @ weights[:, 0]) * (x @ weights[:, 1]) (GatedLinearUnit.h); `implementation`
  /// pins the call and its VJP.
  Sym gated_linear_unit(Sym x, Sym weights, const std::string &activation = "swish",
                        std::optional<std::string> implementation = std::nullopt);
  /// The grouped matmul (RaggedDot.h): group_sizes is an int32 [G] value (no gradient);
  /// `implementation` pins the call and its VJP.
  Sym ragged_dot(Sym lhs, Sym rhs, Sym group_sizes, std::optional<std::string> implementation = std::nullopt);
  /// The loss of logits x @ w against labels (CrossEntropy.h): [B] for "none", else [1],
  /// in the accumulation dtype; options.implementation pins the call and its VJP.
  Sym linear_softmax_cross_entropy_loss(Sym x, Sym w, Sym labels, const CrossEntropyOptions &options = {});
  /// Each row's loss of given logits [B, V] against labels int32 [B] (SoftmaxCrossEntropy.h):
  /// [B] f32 (f64 for f64 logits); `implementation` pins the call and its VJP.
  Sym softmax_cross_entropy(Sym logits, Sym labels, std::optional<std::string> implementation = std::nullopt);
  /// Sum of every element, as an f32 tensor of shape [1].
  Sym sum(Sym x);
  Sym add(Sym a, Sym b);
  Sym cast(Sym x, DType dtype);
  /// A tensor of `spec` with every element equal to g[0] (g: f32 [1]), or to `value`
  /// when there is no g.
  Sym fill(std::optional<Sym> g, const ArgSpec &spec, double value = 0.0);

  const ArgSpec &spec(Sym s) const;

private:
  Function &f_;
};

class TOKAMAX_API Function {
public:
  /// One recorded op call: `slots[i]` is the value bound to the op's argument i (-1: absent).
  struct Call {
    const Op *op = nullptr;
    BoundArgs args;
    std::vector<int> slots;
    std::optional<std::string> implementation;  ///< pinned by the trace; std::nullopt: auto
    /// Attributes of the op's VJP that the op itself does not take, for grad(): the
    /// attention VJP's "deterministic" ("0"; absent = true). Empty for most calls.
    std::map<std::string, std::string> vjp_attributes;
  };

  static Function trace(std::vector<ArgSpec> inputs,
                        const std::function<std::vector<Sym>(Tracer &, std::span<const Sym>)> &fn);

  const std::vector<ArgSpec> &values() const { return values_; }
  std::vector<ArgSpec> input_specs() const;
  std::vector<ArgSpec> output_specs() const;
  const std::vector<Call> &calls() const { return calls_; }
  const std::vector<int> &inputs() const { return inputs_; }
  const std::vector<int> &outputs() const { return outputs_; }

  /// Runs every call on the device, in order, on `stream`. The first run on a device
  /// (and after the calling thread's config state or the JIT's kernels change) resolves
  /// every call as an eager call would (implementation, config, kernels) and records its
  /// launches; every run then replays them: the tensors' addresses go into the recorded
  /// parameters, with no per-call binding, config resolution or lookup. Intermediates and
  /// a scratch buffer are the Function's own, per device, allocated at the first run on
  /// it; runs of one Function on one device must therefore not overlap on different
  /// streams. A run is on its tensors' device, with a stream of that device.
  ///
  /// With options.graph the run is one CUDA graph: captured at the first run with these
  /// input and output addresses (nothing in a run allocates or synchronises, so all of
  /// it can be captured) and replayed by one cuGraphLaunch on later runs with the same
  /// addresses, on any stream. Graphs of up to four address sets are kept; another set
  /// is captured and updates the least recently used graph in place. Work an op cannot
  /// plan ahead (an ops author's Implementation) is captured as it runs, and a capture
  /// it breaks (by allocating or synchronising) throws Error saying so.
  void run(std::span<const TensorView> inputs, std::span<const TensorView> outputs, Stream &stream,
           const FunctionRunOptions &options = {}) const;
  /// Counts of the graph runs so far.
  FunctionGraphStats graph_stats() const;
  /// Runs every call on the host through the interpreter (host views: see host_view()).
  void interpret(std::span<const TensorView> inputs, std::span<const TensorView> outputs) const;

  /// The DSL kernels its calls run on `arch` (sm_80, sm_90a, ...), each once: every
  /// call's implementation as on that arch (pinned, else auto) with its config as a
  /// call would resolve it on this thread (an AutotuningScope's, else the heuristic).
  /// What `tokamax-compile precompile --function` compiles; needs no GPU.
  std::vector<dsl::Kernel> kernels(const std::string &arch) const;

  /// The whole function as JSON: its values' specs, inputs, outputs and calls (op
  /// arguments, the values bound to them, a pinned implementation, and "vjp_attributes"
  /// where a call has any). Format version 2.
  std::string to_json() const;
  /// The function to_json wrote. Every op must be registered, every call valid for its
  /// op and its values, and every value written once before it is read; throws Error
  /// naming the offending field otherwise.
  static Function from_json(const std::string &text);

  Function();
  Function(const Function &other);
  Function &operator=(const Function &other);
  Function(Function &&) noexcept;
  Function &operator=(Function &&) noexcept;
  ~Function();

private:
  friend class Tracer;
  friend Function grad(const Function &, std::vector<int>);
  int newValue(const ArgSpec &spec);
  std::vector<Sym> record(const Op &op, BoundArgs args, std::vector<int> slots,
                          std::optional<std::string> implementation = std::nullopt);
  template <class Runner>
  void execute(std::span<const TensorView> inputs, std::span<const TensorView> outputs,
               const std::function<TensorView(int)> &intermediate, Runner &&runner) const;

  std::vector<ArgSpec> values_;
  std::vector<int> inputs_, outputs_;
  std::vector<Call> calls_;
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;  // device intermediates, reused across runs (null once moved from)
};

/// The gradient of a Function with one output of one element (a loss) with respect to
/// the inputs listed in `wrt`: a Function of the same inputs whose outputs are the
/// gradients, in `wrt` order (f32 for f32 scales, the input's dtype otherwise).
TOKAMAX_API Function grad(const Function &f, std::vector<int> wrt);

/// Glue ops used by Functions (each has one `reference` implementation).
TOKAMAX_API const Op &sum_op();
TOKAMAX_API const Op &add_op();
TOKAMAX_API const Op &cast_op();
TOKAMAX_API const Op &fill_op();

} // namespace tokamax
