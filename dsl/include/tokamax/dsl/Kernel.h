//===- Kernel.h - The embedded C++ tile DSL -----------------------*- C++ -*-===//
//
// An ops author builds a kernel by calling these functions; each call adds operations of
// the tile dialect. Values are SSA tiles (static shapes) or scalars; misuse throws
// tokamax::Error naming the operation and the offending shapes or dtypes as soon as the
// offending call is made. A kernel's IR is a pure function of what was called.
//
//   Kernel k("scale");
//   auto x = k.input("x", DType::BF16, {rows, cols});
//   auto y = k.output("y", DType::BF16, {rows, cols});
//   k.grid(rows);
//   Value row = k.program_id(0);
//   Value t = x.load({row, 0}, {1, 1024}).to(DType::F32);
//   y.store({row, 0}, (t * 2.0).to(DType::BF16));
//
//===----------------------------------------------------------------------===//
#pragma once

#include <tokamax/runtime/DType.h>
#include <tokamax/runtime/Export.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tokamax::dsl {

class KernelBuilder;
class Kernel;

/// A scalar or a tile inside a kernel being built, or a number literal that takes the
/// dtype of whatever it is combined with.
class TOKAMAX_API Value {
public:
  Value() = default;
  Value(int v) : literal_(v), literal_is_int_(true) {}
  Value(int64_t v) : literal_(static_cast<double>(v)), literal_is_int_(true) {}
  Value(double v) : literal_(v) {}

  bool valid() const { return handle_ != nullptr || literal_.has_value(); }
  bool is_literal() const { return handle_ == nullptr && literal_.has_value(); }
  bool is_tile() const;
  bool is_pointer() const;  ///< a pointer or a tile of pointers
  std::vector<int64_t> shape() const;  ///< empty for scalars
  int64_t rank() const { return static_cast<int64_t>(shape().size()); }
  DType dtype() const;  ///< element dtype (the pointee's for pointers)

  Value to(DType dtype) const;
  Value sum(int axis) const;
  Value max(int axis) const;
  Value min(int axis) const;
  Value argmax(int axis) const;
  Value expand(int axis) const;  ///< insert a unit dimension
  Value broadcast_to(std::vector<int64_t> shape) const;
  Value reshape(std::vector<int64_t> shape) const;
  Value trans(std::vector<int> order = {1, 0}) const;

  // Internal: the builder and the MLIR value behind this handle.
  Value(KernelBuilder *builder, void *handle) : builder_(builder), handle_(handle) {}
  KernelBuilder *builder() const { return builder_; }
  void *handle() const { return handle_; }
  std::optional<double> literal() const { return literal_; }
  bool literal_is_int() const { return literal_is_int_; }

private:
  KernelBuilder *builder_ = nullptr;
  void *handle_ = nullptr;
  std::optional<double> literal_;
  bool literal_is_int_ = false;
};

using Tile = Value;

// Arithmetic broadcasts scalars and unit dimensions (numpy rules); both sides must have
// one dtype (cast with .to()); literals take the other side's dtype.
TOKAMAX_API Value operator+(const Value &a, const Value &b);
TOKAMAX_API Value operator-(const Value &a, const Value &b);
TOKAMAX_API Value operator*(const Value &a, const Value &b);
TOKAMAX_API Value operator/(const Value &a, const Value &b);
TOKAMAX_API Value operator%(const Value &a, const Value &b);
TOKAMAX_API Value operator-(const Value &a);
TOKAMAX_API Value operator<(const Value &a, const Value &b);
TOKAMAX_API Value operator<=(const Value &a, const Value &b);
TOKAMAX_API Value operator>(const Value &a, const Value &b);
TOKAMAX_API Value operator>=(const Value &a, const Value &b);
TOKAMAX_API Value operator==(const Value &a, const Value &b);
TOKAMAX_API Value operator!=(const Value &a, const Value &b);
TOKAMAX_API Value operator&(const Value &a, const Value &b);  ///< bool and / integer and
TOKAMAX_API Value operator|(const Value &a, const Value &b);

TOKAMAX_API Value exp(const Value &x);
TOKAMAX_API Value exp2(const Value &x);
/// 2^x of an f32 tile with `fma_count` of every `fma_period` registers a thread holds
/// computed by a polynomial on the FMA pipes, the rest by the special-function unit
/// (tile.exp2: for steps the latter bounds; relative error below 1e-4, 0 from -127 down).
TOKAMAX_API Value exp2(const Value &x, int fma_count, int fma_period);
TOKAMAX_API Value log(const Value &x);
TOKAMAX_API Value sqrt(const Value &x);
TOKAMAX_API Value rsqrt(const Value &x);
TOKAMAX_API Value tanh(const Value &x);
TOKAMAX_API Value erf(const Value &x);
TOKAMAX_API Value abs(const Value &x);
TOKAMAX_API Value maximum(const Value &a, const Value &b);
TOKAMAX_API Value minimum(const Value &a, const Value &b);
/// Elementwise select: cond ? a : b.
TOKAMAX_API Value where(const Value &cond, const Value &a, const Value &b);
/// acc + a @ b with f32 accumulation.
TOKAMAX_API Value dot(const Value &a, const Value &b, const Value &acc);
/// dot issued asynchronously where it runs on wgmma (KernelOptions::wgmma_dots, sm_90a):
/// the result may be used only through dot_wait, and the shared tiles it reads must not
/// be refilled before that wait. Work placed between the two overlaps the product.
TOKAMAX_API Value dot_async(const Value &a, const Value &b, const Value &acc);
/// dot_async starting from zero where `fresh` (a bool scalar) holds, from acc elsewhere:
/// a loop restarts an accumulator that may still be in flight without touching it.
TOKAMAX_API Value dot_async(const Value &a, const Value &b, const Value &acc, const Value &fresh);
/// How a dot reads its operands.
struct TOKAMAX_API DotOptions {
  bool async = false;  ///< as dot_async
  /// K index k of each 16-wide group reads a's column 2 (k / 4) + k % 2 + 8 ((k % 4) / 2)
  /// of the group, so b's rows must be stored in that order: an fp8 tile cast from a
  /// product's f32 result then feeds the next product with no exchange between threads.
  /// On the GPU only for such an a (the lowering refuses the rest); any a on the interpreter.
  bool a_k_interleaved = false;
};
TOKAMAX_API Value dot(const Value &a, const Value &b, const Value &acc, const DotOptions &options);
/// The result of a dot_async once at most `pending` (0-7) async dots issued after it
/// are still running (0: all have completed).
TOKAMAX_API Value dot_wait(const Value &value, int pending = 0);

/// Gather through a tile of pointers; masked-off lanes give `other` (0 when absent).
TOKAMAX_API Value load(const Value &ptrs, const Value &mask = {}, const Value &other = {});
/// Scatter through a tile of pointers; masked-off lanes write nothing.
TOKAMAX_API void store(const Value &ptrs, const Value &value, const Value &mask = {});
/// Atomic read-modify-write through pointer tiles; return the old values.
TOKAMAX_API Value atomic_add(const Value &ptrs, const Value &value, const Value &mask = {});
TOKAMAX_API Value atomic_max(const Value &ptrs, const Value &value, const Value &mask = {});
TOKAMAX_API Value atomic_cas(const Value &ptrs, const Value &compare, const Value &value);

constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/// The smallest power of two >= v (tile extents are powers of two).
constexpr int64_t next_power_of_two(int64_t v) {
  int64_t p = 1;
  while (p < v)
    p *= 2;
  return p;
}

class TensorArg;

/// Options of tma_dot: the K slice each pipeline stage holds and how many stages.
struct TOKAMAX_API TmaDotOptions {
  int64_t block_k = 64;   ///< one 32-, 64- or 128-byte swizzle row: 16, 32 or 64 16-bit elements (x2 for fp8)
  int64_t stages = 4;     ///< shared-memory ring depth
  bool trans_a = false;   ///< a is [K, M]
  bool trans_b = false;   ///< b is [N, K]
  /// A producer warpgroup (added to the kernel's warps) issues the loads while the
  /// kernel's warps only issue wgmma; the op must then sit at the kernel's top level.
  bool warp_specialize = true;
  /// 2: programs 2c and 2c + 1 form a cluster computing vertically adjacent blocks (the
  /// same n0, m0 one block apart, equally many calls); TMA multicasts b's slices to both.
  /// Needs warp_specialize and, with b as [K, N], block N >= 128.
  int64_t cluster_m = 1;
  /// wgmma takes A from registers (each warp reads its rows of a's slice with ldmatrix)
  /// and only B from shared memory; a must be [M, K] (trans_a = false).
  bool a_in_registers = false;
  /// In a persistent loop (the op directly in a loop carrying no values, the loop's only
  /// warp-specialized tma_dot): each warp role runs its own copy of the loop, the
  /// producer with 40 registers per thread and the kernel's warps with what that frees
  /// (setmaxnreg). Needs warp_specialize.
  bool rebalance_registers = false;
  /// op(b)'s K runs from this i32 (known at run time) over op(a)'s K: a window of a
  /// wider b (e.g. a chunk of a weight's columns, read in place); b's stored K may then
  /// differ from a's, and K past it reads as zero.
  std::optional<Value> b_k0;
};

/// acc + op(a)[m0 : m0 + BM, :] @ op(b)[:, n0 : n0 + BN] summed over all of K, with
/// acc an f32 [BM, BN] tile (BM in {64, 128, 256}, BN in {64, 128, 256}); a and b are
/// bf16, f16 or (a [M, K], b [N, K] only) fp8 kernel tensors whose rows are multiples of
/// 16 bytes. Elements outside
/// the tensors read as zero. On the GPU this is a TMA + mbarrier + wgmma pipeline and
/// needs sm_90a; the interpreter runs it anywhere.
TOKAMAX_API Value tma_dot(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0,
                          const Value &acc, const TmaDotOptions &options = {});

/// Options of cp_async_dot: the K slice each pipeline stage holds and how many stages.
struct TOKAMAX_API CpAsyncDotOptions {
  int64_t block_k = 32;   ///< a multiple of 32 bytes of K (16 16-bit elements, 8 f32)
  int64_t stages = 3;     ///< shared-memory ring depth: stages - 1 slices load ahead
  bool trans_a = false;   ///< a is [K, M]
  bool trans_b = false;   ///< b is [N, K]
};

/// The product tma_dot computes, for bf16, f16 or f32 (as tf32) kernel tensors (either
/// transposed) whose rows are multiples of 16 bytes, on any GPU with mma.sync (sm_80+):
/// cp.async into a ring of swizzled shared buffers, ldmatrix, mma.sync. acc is an f32
/// [BM, BN] tile, BM and BN powers of two in [16, 256]; elements outside read as zero.
TOKAMAX_API Value cp_async_dot(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0,
                               const Value &acc, const CpAsyncDotOptions &options = {});

/// A shared-memory buffer of `slots` slots that TensorArg::load_async fills
/// (Kernel::shared_buffer). Each slot holds the largest block copied into it.
struct SharedBuffer {
  int64_t id = -1;
  int64_t slots = 0;
};

/// `count` consecutive mbarriers of a kernel (Kernel::mbarriers), named by an index in
/// [0, count).
struct Mbarriers {
  int64_t first = -1;
  int64_t count = 0;
};

/// A tensor parameter of the kernel: a pointer plus the static shape and strides.
class TOKAMAX_API TensorArg {
public:
  const std::string &name() const { return name_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  const std::vector<int64_t> &strides() const { return strides_; }

  /// Loads the block of `block` elements starting at `offsets` (one per dimension);
  /// elements outside the tensor read as `padding`.
  Value load(std::vector<Value> offsets, std::vector<int64_t> block, double padding = 0.0) const;
  /// Starts copying the block at `offsets` into slot `slot` (an i32 in [0, slots)) of
  /// `buffer`, elements outside the tensor read as zero (cp.async on sm_80+), and
  /// returns it with its unit dims dropped: a 2-D tile held in shared memory. Read it
  /// (as a dot operand, transposed, or anywhere else) only after a Kernel::wait_async
  /// that covers the copy, and before the next copy into that slot. fp8, 16- or 32-bit
  /// dtypes; the last dim contiguous with the block's and the tensor's last dims whole
  /// 16-byte chunks, the last offset a multiple of one, other strides of 16 bytes.
  Value load_async(std::vector<Value> offsets, std::vector<int64_t> block, const SharedBuffer &buffer,
                   const Value &slot) const;
  /// The same copy by TMA (sm_90a, kernels with KernelOptions::wgmma_dots): one thread
  /// issues it and it completes on barrier `index` of `barriers`, counting as one of
  /// that barrier's arrivals and adding the block's bytes to its phase. Read the tile
  /// only after Kernel::wait on that barrier's phase, and refill the slot only once
  /// every reader is done (e.g. each reader arrives on an "empty" barrier that the
  /// refill waits for, or a wait_async barrier). A 2-D row-major tensor whose rows are
  /// 16-byte multiples; the block [rows, cols] has 8 to 256 rows (a multiple of 8) of
  /// 32 or 64 bytes or a multiple of 128; each tensor is copied in blocks of one shape.
  /// A 3-D tensor [batches, rows, cols] is copied a batch at a time (block [1, rows,
  /// cols]): rows past the batch's last read zeros, never the next batch's.
  Value load_tma(std::vector<Value> offsets, std::vector<int64_t> block, const SharedBuffer &buffer,
                 const Value &slot, const Mbarriers &barriers, const Value &index) const;
  /// Stores a tile at `offsets`; elements outside the tensor are dropped.
  void store(std::vector<Value> offsets, const Value &tile) const;
  /// The same, dropping too the elements whose index along dimension `dim` (not the
  /// last) is at or past `limit`, an i32 scalar known at run time (e.g. where a packed
  /// sequence's rows end in a tensor of several).
  void store_below(std::vector<Value> offsets, const Value &tile, int dim, const Value &limit) const;
  /// Adds `tile`, the block of `block` elements at `offsets` with its unit dims dropped
  /// (e.g. a [rows, cols] dot result into block {1, rows, 1, cols}), into an f32, f64,
  /// i32 or i64 tensor with atomic adds; elements outside the tensor are dropped. Blocks
  /// of several programs may overlap: their adds land in no fixed order (float sums may
  /// differ in their last bits between runs). No layout conversion: each thread adds the
  /// elements it holds.
  void atomic_add(std::vector<Value> offsets, std::vector<int64_t> block, const Value &tile) const;
  /// The same for a [BM, BN] tile (BM <= 256, BN whole 128-byte strips) of a 2-D bf16,
  /// f16 or f32 tensor with rows of 16-byte multiples, written through shared memory by
  /// TMA (sm_90a): the threads go on while it is written out. The tile must be a dot
  /// product's result (after elementwise math): the mma layout, every warp along M.
  void tma_store(std::vector<Value> offsets, const Value &tile) const;
  /// tma_store that adds the tile into the tensor element by element instead (TMA's
  /// reduce-add, one bulk operation a 128-byte strip): blocks of several programs may
  /// overlap, and their adds land in no fixed order (float sums may differ in their last
  /// bits between runs). f32 tensors only.
  void tma_reduce_add(std::vector<Value> offsets, const Value &tile) const;
  /// Global-memory semaphores on an i32 tensor of counters (one per `offsets`, an
  /// index per dimension), to order programs (e.g. each query block's dq additions
  /// across key-block programs). semaphore_wait spins until the counter equals
  /// `expected` (an i32 scalar; thread 0 polls with an acquire load, then a CTA barrier),
  /// after which the writes made before the matching signals are visible to every
  /// thread. semaphore_signal is a CTA barrier (every thread's global stores and atomics
  /// before it are done; the kernel's TMA stores too: thread 0 first waits for every
  /// bulk group it issued), then thread 0 adds `add` with a release add. Programs only
  /// wait for programs that run at the same time: on a GPU, wait only on programs that
  /// can be resident together; on the interpreter (one program at a time, in grid order
  /// x fastest, even under TOKAMAX_INTERPRETER_ORDER=reverse) a wait whose value is not
  /// there yet fails as a deadlock. Inside a specialized_loop they are the consumers'
  /// (thread 0 is one; their barriers are the consumers' named barrier); the producer
  /// warpgroup never waits on them.
  void semaphore_wait(std::vector<Value> offsets, const Value &expected) const;
  void semaphore_signal(std::vector<Value> offsets, const Value &add = 1) const;
  /// The base pointer, for pointer arithmetic (`x.ptr() + offsets`).
  Value ptr() const;

private:
  /// store and store_below: `limitDim` -1 for none.
  void storeBlock(std::vector<Value> offsets, const Value &tile, int limitDim, const Value &limit,
                  const char *what) const;

  void tma_write(std::vector<Value> offsets, const Value &tile, bool add) const;
  void semaphore(std::vector<Value> offsets, const Value &value, bool wait) const;

  friend class Kernel;
  friend Value tma_dot(const TensorArg &, const TensorArg &, const Value &, const Value &, const Value &,
                       const TmaDotOptions &);
  friend Value cp_async_dot(const TensorArg &, const TensorArg &, const Value &, const Value &, const Value &,
                            const CpAsyncDotOptions &);
  friend struct MainLoopDotArgs;
  KernelBuilder *builder_ = nullptr;
  unsigned index_ = 0;
  std::string name_;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_, strides_;
};

struct TOKAMAX_API KernelOptions {
  int num_warps = 4;
  /// dot results with every warp along M (each warp owns whole rows of 16) where M has
  /// 16 rows per warp: row reductions stay within a warp, and a result cast to 16 bits
  /// is already the next dot's A operand in registers (attention's P @ V).
  bool mma_rows_per_warp = false;
  /// On sm_90a, dots whose B operand is a shared tile (TensorArg::load_async) and whose
  /// warps all run along M (mma_rows_per_warp) issue wgmma with B read by the tensor
  /// cores from shared memory; elsewhere, and on other GPUs, they stay on mma.sync.
  bool wgmma_dots = false;
  /// The register limit (setmaxnreg) of a specialized_loop's producer warpgroup: a
  /// multiple of 8 from 24; the consumers get what it leaves of the launch's budget (240
  /// each for two consumer warpgroups at 24). A producer that computes many copy
  /// coordinates a step may need more.
  int producer_registers = 24;
  /// Blocks of this kernel meant to share an SM (1, 2 or 4): a specialized_loop's launch
  /// register limit is the register file divided among them, its consumers get what the
  /// producer's decrease leaves of their block's share (232 with 4 consumer warps at 2
  /// blocks). One block's loads, prologue and epilogue then overlap another's products,
  /// where shared memory lets both reside.
  int blocks_per_sm = 1;
};

class TOKAMAX_API Kernel {
public:
  explicit Kernel(std::string name, KernelOptions options = {});
  ~Kernel();
  Kernel(Kernel &&) noexcept;
  Kernel &operator=(Kernel &&) noexcept;

  TensorArg input(std::string name, DType dtype, std::vector<int64_t> shape);
  TensorArg output(std::string name, DType dtype, std::vector<int64_t> shape);
  /// A tensor whose dims are laid out in another order than row-major: `strides` (in
  /// elements, one per dim) must be those of a contiguous tensor with the same dims
  /// permuted (e.g. a [B, T, N, H] view of [B, N, T, H] memory), so the launch's tensor
  /// holds exactly the shape's elements.
  TensorArg input(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides);
  TensorArg output(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides);
  /// A scalar parameter passed by value at launch.
  Value scalar(std::string name, DType dtype);

  void grid(int64_t x, int64_t y = 1, int64_t z = 1);
  Value program_id(int axis = 0);
  Value num_programs(int axis = 0);

  Value constant(double value, DType dtype);
  /// The 1-D i32 tile [start, end); end - start must be a power of two.
  Value arange(int64_t start, int64_t end);
  Value full(std::vector<int64_t> shape, double value, DType dtype);

  /// for (i = lo; i < hi; i += step) carried = body(i, carried); returns the final values.
  std::vector<Value> loop(const Value &lo, const Value &hi, const Value &step,
                          std::vector<Value> carried,
                          const std::function<std::vector<Value>(Value, std::vector<Value>)> &body);
  /// What a specialized_loop's producer does at step i: returns the values (e.g. the
  /// shared tiles of its TMA copies) the consumer of step i gets.
  using LoopProducer = std::function<std::vector<Value>(Value i)>;
  /// What its consumers do at step i with the carried values and what the producer gave.
  using LoopConsumer = std::function<std::vector<Value>(Value i, std::vector<Value> carried, std::vector<Value> produced)>;
  /// A loop split between warp roles (sm_90a): `producer` runs on a producer warpgroup
  /// added to the kernel (its first thread issues the TMA copies), `consumer` and the
  /// rest of the kernel on the kernel's warps, each role with its own register limit
  /// (setmaxnreg). The producer may only issue load_tma copies, wait on and arrive at
  /// mbarriers, and compute with the step index and values from before the loop; the
  /// two roles meet only through mbarriers: the consumer of step i waits for its copies'
  /// barrier phase, and the producer waits, before refilling a slot, for the consumers'
  /// arrivals that release it. On the interpreter (and anywhere else the roles do not
  /// split) each step runs the producer's part, then the consumer's. At the kernel's top
  /// level, once per kernel, num_warps a multiple of 4.
  std::vector<Value> specialized_loop(const Value &lo, const Value &hi, const Value &step, std::vector<Value> carried,
                                      const LoopProducer &producer, const LoopConsumer &consumer);
  /// Directly in a specialized_loop's consumer: a loop of steps split between the roles
  /// as specialized_loop's own steps are (`producer` on the producer warpgroup, the rest
  /// on the consumers). The code around it in that consumer runs on the consumers only,
  /// so a loop over tiles can hold the K steps of each tile and an epilogue after them
  /// (nested loops: the wgmma chain of a tile completes before its epilogue on every
  /// path, which ptxas needs to keep the products asynchronous).
  std::vector<Value> specialized_steps(const Value &lo, const Value &hi, const Value &step, std::vector<Value> carried,
                                       const LoopProducer &producer, const LoopConsumer &consumer);
  /// A shared-memory buffer of `slots` slots for TensorArg::load_async.
  SharedBuffer shared_buffer(int64_t slots);
  /// Waits until at most `pending` of this thread's latest load_async copies are in
  /// flight, then a barrier of the whole program: every thread's finished copies are
  /// visible, and every read before the wait is done (its slots may be refilled).
  void wait_async(int pending = 0);

  /// `count` mbarriers (sm_90a) completing a phase after `arrivals` arrivals (each
  /// load_tma counts one; arrive() one per thread that runs it), initialized when the
  /// kernel starts, in phase 0.
  Mbarriers mbarriers(int64_t count, int64_t arrivals = 1);
  /// Every thread waits until the phase of parity `phase` (0 or 1) of barrier `index`
  /// has completed; a barrier's k-th completed phase (from 0) has parity k % 2.
  void wait(const Mbarriers &barriers, const Value &index, const Value &phase);
  /// Every thread that runs it arrives once on barrier `index` (release: its earlier
  /// reads and writes are done before the phase completes).
  void arrive(const Mbarriers &barriers, const Value &index);
  /// In a specialized_loop's consumer: its num_warps / 4 consumer warpgroups take turns,
  /// in warpgroup order, through the code between turn_wait() and turn_pass() at each
  /// step (ping-pong: with two, one issues its products while the other runs the
  /// elementwise work between them). With one warpgroup, and on the interpreter, they do
  /// nothing. Nothing between them may need a barrier among the consumers (a layout
  /// conversion through shared memory): compiling such a kernel fails, naming it.
  void turn_wait();
  void turn_pass();

  /// cond ? then_branch() : else_branch(); both return values of the same types.
  std::vector<Value> if_else(const Value &cond, const std::function<std::vector<Value>()> &then_branch,
                             const std::function<std::vector<Value>()> &else_branch);
  /// if (cond) body(); for side effects only.
  void when(const Value &cond, const std::function<void()> &body);

  const std::string &name() const;
  const std::vector<int64_t> &grid_size() const;
  int num_warps() const;
  /// The kernel's tile IR (verified). Throws tokamax::Error if it does not verify.
  std::string ir() const;

private:
  TensorArg tensorParameter(std::string name, DType dtype, std::vector<int64_t> shape, bool isOutput,
                            std::vector<int64_t> strides = {});
  std::unique_ptr<KernelBuilder> builder_;
};

} // namespace tokamax::dsl
