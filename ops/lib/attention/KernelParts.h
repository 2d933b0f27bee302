//===- KernelParts.h - Pieces every attention kernel is built from -*- C++ -*-===//
//
// Operands are row blocks of a [B, rows, heads, dim] tensor, held as column chunks: one
// chunk of the whole (padded) dim for tensor-core products, 16-wide chunks in the
// compute dtype for exact multiply-add products (the DSL has no tile slicing, so a
// product over a chunked dim is a sum over chunks). Scores apply scale, bias, soft cap
// and masks in the op's order; ranges turn causal / window / lengths into loop bounds.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ops/lib/attention/Common.h"

#include <functional>
#include <optional>
#include <vector>

namespace tokamax::attention_detail {

using dsl::Kernel;
using dsl::TensorArg;
using dsl::Value;
using Chunks = std::vector<Value>;

inline constexpr double kLog2e = 1.4426950408889634;
inline constexpr double kLn2 = 0.6931471805599453;
/// fp8 calls' P is exp2(x - m + 8) (0 to 256 where the row max is 0 to 1): cast to fp8
/// for P V, the small weights stay normal numbers (down to 2^-6 / 256 of the max, not
/// flushed below 2^-9 of it). Out's row sums are P's too, so the factor cancels; lse
/// takes it back out.
inline constexpr double kFp8ProbLog2Offset = 8;

/// The spec's warps; tensor-core products put every warp along the rows (each warp owns
/// whole score rows: softmax statistics stay in the warp and P feeds P @ V in registers).
dsl::KernelOptions kernel_options(const KernelSpec &s);

/// The inputs every forward and VJP kernel declares first, in this order.
struct Operands {
  TensorArg q, k, v;
  std::optional<TensorArg> bias, mask, q_lengths, kv_lengths;
  /// fp8 calls' descales, f32 [B, K] (Problem::q_descale ...).
  std::optional<TensorArg> q_descale, k_descale, v_descale;
};
/// With `rows`, q, k and v as their TMA views (tma_rows_shape: [B, T, N H], [B, S, K H],
/// [B, S, K Hv], each batch row's heads as one row, copied a batch row at a time; where
/// heads_major [B N, T, H], ...: a head's rows per batch).
Operands declare_operands(Kernel &k, const Problem &p, bool rows = false);

/// A [B, rows, heads, dim] operand of the kernel (q, k, v, out and their gradients), in
/// the problem's layout: its memory [B, heads, rows, dim] where heads_major (strided);
/// packed, [1, total, heads, dim].
TensorArg rows_operand(Kernel &k, const Problem &p, std::string name, RowSide side, int64_t heads, int64_t dim,
                       bool output = false);

/// One program's view of the call: its batch row and the valid lengths (i32 scalars).
struct Program {
  Kernel &k;
  const KernelSpec &s;
  const Problem &p;
  Operands in;
  Value b;        ///< batch row
  Value q_valid;  ///< min(q_seq_length, T), or T
  Value kv_valid; ///< min(kv_seq_length, S), or S
  /// Packed (Problem::varlen): the sequence's first rows in q and k (cu_seqlens[b]), and
  /// the causal / window diagonal's shift kv_valid - q_valid (query i's diagonal key).
  Value q_first, kv_first, shift;
  /// fp8 calls (after load_descales): the logits' factor q_descale k_descale and out's
  /// v_descale (f32 scalars; invalid where the call has none).
  Value logit_descale, out_descale;
};
Program program(Kernel &k, const KernelSpec &s, Operands in, Value b);
/// Loads the program's descales (batch row pr.b, kv head `kvh`) into logit_descale and
/// out_descale; scores() and forward_epilogue() apply them.
void load_descales(Program &pr, const Value &kvh);
/// One descale, f32 [B, K] at (b, kvh), as an f32 scalar.
Value load_descale(const TensorArg &descale, const Value &b, const Value &kvh);

/// A packed sequence's first row and valid length (at most `max`) from its cu_seqlens
/// array [B + 1] (i32 scalars).
struct PackedRows {
  Value first, valid;
};
PackedRows packed_rows(Kernel &k, const TensorArg &cu_seqlens, const Value &b, int64_t max);

/// Where a block of rows of a [B, R, heads, dim] operand (q, k, v, out and their
/// gradients) starts: batch index b and row r0. Packed ([1, total, heads, dim]): b = 0,
/// r0 from the sequence's first row, and `end` its last row + 1: stores write no row
/// from there on (the next sequence's), row-vector loads read padding there.
struct RowBlock {
  Value b, r0;
  Value end;  ///< packed only
};
/// Query rows from t0 (q, out, dout, dq; lse and delta) and key rows from j0 (k, v, dk,
/// dv) of the program's sequence.
RowBlock query_rows(const Program &pr, const Value &t0);
RowBlock key_rows(const Program &pr, const Value &j0);
/// Query rows from t0 of batch row b outside a Program (the delta kernel): packed with
/// the sequence `packed` gives (its valid rows from t0 on).
RowBlock query_rows(const Problem &p, const Value &b, const Value &t0, const std::optional<PackedRows> &packed);

/// Rows [r0, r0 + rows) of head `head` of a [B, R, heads, dim] tensor, as chunks
/// (elements outside read as 0); in the compute dtype for Fma products.
Chunks load_rows(const KernelSpec &s, const TensorArg &t, Value b, Value r0, Value head, int64_t dim,
                 int64_t rows);
void store_rows(const KernelSpec &s, const TensorArg &t, Value b, Value r0, Value head, const Chunks &c);
/// The same at a RowBlock: loads read past a packed sequence's end (the rows a block
/// reaches there are masked by the scores), stores stop there.
Chunks load_rows(const KernelSpec &s, const TensorArg &t, const RowBlock &at, Value head, int64_t dim, int64_t rows);
void store_rows(const KernelSpec &s, const TensorArg &t, const RowBlock &at, Value head, const Chunks &c);
/// Chunks of zeros of shape [rows, padded dim] (f32 or f64).
Chunks zero_rows(const KernelSpec &s, Kernel &k, int64_t rows, int64_t dim);
/// c * factor[:, None] for every chunk.
Chunks scale_rows(const Chunks &c, const Value &factor);
/// c * factor for every chunk (a scalar, or a number).
Chunks scale_all(const Chunks &c, const Value &factor);

/// a @ b^T over the chunked dim: [M, N] in the compute dtype. `async`: on tensor cores,
/// issued as dsl::dot_async (the caller waits with dsl::dot_wait).
Value product_nt(const KernelSpec &s, Kernel &k, const Chunks &a, const Chunks &b, bool async = false);
/// acc + p @ b with p [M, Kd] (compute dtype) and b chunked along its columns.
Chunks product_nn(const KernelSpec &s, const Value &p, const Chunks &b, const Chunks &acc);
/// acc + P V (async: dsl::dot_async's). fp8 calls read V transposed ([Hv, keys]); with
/// the spec's interleave_v its keys come in the order an accumulator holds P's columns
/// (v_transpose_kernel), so P's fp8 registers are the product's A operand as they are.
Value pv_product(const KernelSpec &s, const Value &prob, const Value &v, const Value &acc, bool async = false);

/// A [rows] vector of a [B, N, T] tensor at (b, n, t0).
Value load_row_vector(const TensorArg &t, Value b, Value n, Value t0, int64_t rows, double padding);
void store_row_vector(const TensorArg &t, Value b, Value n, Value t0, const Value &v);
/// The same at a RowBlock of query rows (packed: [1, N, total_q], rows from `end` on
/// read `padding` and are not written).
Value load_row_vector(Kernel &k, const TensorArg &t, const RowBlock &at, Value n, int64_t rows, double padding);
void store_row_vector(Kernel &k, const TensorArg &t, const RowBlock &at, Value n, const Value &v);

struct Scores {
  Value log2;     ///< logits in log2 units, -inf where masked
  Value natural;  ///< capped logits in natural units, unmasked (when asked for)
  Value valid;    ///< the mask (bool), when `masked`
  /// Without bias or soft cap and with a positive scale: the raw products (masked), and
  /// log2 == raw * factor. A row max of raw times the factor is log2's row max, and
  /// exp2(raw * factor - m) is one fma per element instead of a multiply and a subtract.
  Value raw;
  double factor = 0;
  /// An fp8 call's factor times its logit descale (Program::logit_descale, positive), an
  /// f32 scalar: what multiplies raw where it is valid.
  Value factor_value;
  /// Eighths of exp2_minus's registers on the FMA pipes (KernelSpec::exp2_fma).
  int fma_eighths = 0;

  /// x times the factor (factor_value where valid).
  Value times_factor(const Value &x) const { return factor_value.valid() ? x * factor_value : x * factor; }
  /// Row max along `axis` in log2 units.
  Value max_log2(int axis) const { return factor > 0 ? times_factor(raw.max(axis)) : log2.max(axis); }
  /// exp2(log2 - m) with m broadcast along `axis`.
  Value exp2_minus(const Value &m, int axis) const {
    Value x = factor > 0 ? times_factor(raw) - m.expand(axis) : log2 - m.expand(axis);
    return fma_eighths > 0 ? exp2(x, fma_eighths, 8) : exp2(x);
  }
};
/// Whether a block's scores are masked: never (the caller knows every pair is visible),
/// always, or where `edge` (a bool scalar) holds at run time, so that one loop body serves
/// a walk's edge blocks (masked) and its inner ones (no mask arithmetic) behind a branch.
struct Masking {
  bool masked = true;
  Value edge;
  /// Hides keys from S on even where S is a multiple of the block (a block past the last).
  bool bound_keys = false;
  Masking(bool always) : masked(always) {}  // NOLINT: a bool is the static case
  explicit Masking(Value where) : edge(std::move(where)) {}
};

/// Scores of qk (raw q . k products; [BQ, BKV], or [BKV, BQ] when kv_major) for queries
/// [t0, t0 + BQ) and keys [j0, j0 + BKV) of head n, masked as `masking` says (`valid` is
/// set only for a static mask). Keys from S on are hidden only where a block can reach
/// them: kv lengths, S not a multiple of BKV, or masking.bound_keys (blocks start at
/// multiples of BKV).
Scores scores(Program &pr, const Value &qk, Value n, Value t0, Value j0, int64_t bq, int64_t bkv,
              const Masking &masking, bool kv_major, bool natural);

/// Loop bounds over key blocks for query block t0 (forward, dq) or over query blocks for
/// key block j0 (dk/dv): [lo, hi) holds every block with a visible pair, [inner_lo,
/// inner_hi) the blocks (aligned to `step`) where every pair is visible.
struct Range {
  Value lo, hi, inner_lo, inner_hi;
};
Range key_range(Program &pr, Value t0, int64_t bq, int64_t bkv);
Range query_range(Program &pr, Value j0, int64_t bq, int64_t bkv);
/// key_range's lo: the first key of the first block of `bkv` keys (blocks start at
/// multiples of bkv) that a query row from t0 on may see; the left window's bound, else 0
/// (`zero`, an i32 0).
Value first_key(Program &pr, Value t0, int64_t bkv, Value zero);

/// The Masking of the block at `first` of a walk over `r` in steps of `step`, along keys
/// (forward, dq) or queries (dk/dv): none when the problem hides no pair there (no causal,
/// window, lengths or mask tensor, and `step` divides S along keys: query rows past T
/// have lse +inf), every block with a mask tensor or when the spec does not split edges,
/// else the blocks outside [inner_lo, inner_hi).
Masking block_masking(const Program &pr, const Range &r, const Value &first, int64_t step, bool along_keys);

using Carried = std::vector<Value>;
using Body = std::function<Carried(Value, Carried, bool masked)>;
/// Runs `body` over a range: edge blocks masked, inner blocks unmasked when the spec
/// splits edges (and no mask tensor forces masks everywhere), else every block masked.
Carried walk(Program &pr, const Range &r, int64_t step, Carried carried, const Body &body);

/// Rows [r0, r0 + rows) of head `head` of a [B, R, heads, dim] tensor: what a loop
/// reads at each step r0 (load_rows of the program's batch row).
struct BlockSource {
  TensorArg t;
  Value head;
  int64_t dim, rows;
  bool query_side = false;  ///< rows of q / dout (query_rows), else of k / v (key_rows)
};
/// Block i of a step, as load_rows gives it (one chunk per product operand).
using Blocks = std::function<Chunks(size_t)>;
using BlockBody = std::function<Carried(Value, Carried, bool masked, const Blocks &blocks)>;
/// walk() whose body also gets the blocks of `sources` at its step. With the spec's
/// async_copy they are copied into a shared ring of `stages` slots, stages - 1 steps
/// ahead (the loop carries the slot; one wait and barrier per step), and the products
/// read them there; with prefetch the loop carries them in registers, read one step ahead;
/// without either, each is read where it is used.
Carried walk_blocks(Program &pr, const Range &r, int64_t step, Carried carried, const std::vector<BlockSource> &sources,
                    const BlockBody &body);

/// walk_blocks through the ring (async_copy, 3+ stages) looking one step ahead: the body
/// also gets step j + 1's blocks (landed: its copies are waited for at step j), and
/// `prologue` runs before the loop on the first step's blocks; what it returns is
/// carried after `carried` (and returned with it).
using Prologue = std::function<Carried(const Blocks &)>;
using LookaheadBody =
    std::function<Carried(Value, Carried, bool masked, const Blocks &blocks, const Blocks &next)>;
Carried walk_blocks_lookahead(Program &pr, const Range &r, int64_t step, Carried carried,
                              const std::vector<BlockSource> &sources, const Prologue &prologue,
                              const LookaheadBody &body);

/// A program's row block, head and batch row.
struct GridIds {
  Value block, head, batch;
};
/// Sets the grid over `blocks` row blocks x `heads` x batch rows and returns the
/// program's ids. Blocks run along x, the fastest in dispatch order, so the programs
/// resident together share a few heads' streamed blocks in L2 (with heads along x they
/// would each read their own from DRAM: the causal hopper forward at (4, 4096, 32, 128)
/// ran memory-bound that way). With `last_first` the blocks count from the last, so a
/// kernel whose last blocks are the heaviest starts each head's heaviest first and ends
/// the grid with its lightest (dk/dv's heaviest blocks are its first already).
GridIds row_block_grid(Kernel &k, int64_t blocks, int64_t heads, int64_t batch, bool last_first);
/// Whether the forward and dq grids start from their last query block: the hopper
/// kernels under a causal mask, where the last query blocks see the most keys.
bool last_block_first(const KernelSpec &s);

/// Packs chunk lists into one carried list and back.
Carried pack(std::initializer_list<const Chunks *> parts);
std::vector<Chunks> unpack(const Carried &c, std::initializer_list<size_t> sizes);

/// A forward kernel's sinks (with the problem's), outputs and program: sinks, out (and
/// lse when the caller wants it) declared after the operands, one program per (query
/// block t0, head n, batch row), n's kv head kvh.
struct ForwardProgram {
  std::optional<TensorArg> sinks;
  TensorArg out;
  std::optional<TensorArg> lse;
  Program pr;
  Value t0, n, kvh;
};
ForwardProgram forward_program(Kernel &k, const KernelSpec &s, Operands in);

/// The forward's running state: row max and sum (log2 units) and the accumulator.
struct SoftmaxState {
  Chunks m, l, acc;
  Carried pack() const;
  static SoftmaxState unpack(const Carried &c, size_t accSize);
};
/// The online softmax over one key block: the new row max m (log2 units), the
/// probabilities against it and alpha = exp2(m_old - m), which rescales what came before.
struct OnlineSoftmax {
  Value m, prob, alpha;
  Value l(const Value &l_old) const { return l_old * alpha + prob.sum(1); }
};
OnlineSoftmax online_softmax(Program &pr, const Value &m, const Value &qk, Value n, Value t0, Value j0,
                             const Masking &masking);
/// One online-softmax step of the forward over keys [j0, j0 + BKV): qk the raw q . k
/// products, v the step's V block (chunks).
SoftmaxState softmax_step(Program &pr, const SoftmaxState &state, const Value &qk, Value n, Value t0, Value j0,
                          const Masking &masking, const Chunks &v);
/// The forward's epilogue: out = acc / l (zero rows where no key was visible) and lse;
/// with sinks, the head's sink joins l first (every flash forward shares this).
void forward_epilogue(ForwardProgram &f, const SoftmaxState &state);

/// The VJP's per-row inputs: dout, lse and delta, declared after the operands. With
/// `rows` (the hopper kernels) dout is 2-D [B T, N Hv] for TMA and lse and delta are flat
/// [B N T]: their row vectors are then 1-D block loads, which the compiler reads again in
/// the layout of the scores they scale instead of moving them through shared memory.
struct Cotangents {
  TensorArg dout, lse, delta;
};
Cotangents declare_cotangents(Kernel &k, const Problem &p, bool rows = false);
/// The VJP's row statistics of query rows [t0, t0 + rows) of head n, from either shape
/// of lse and delta: lse in log2 units (+inf past T) and delta (0 past T).
struct RowStats {
  Value lse2, delta;
};
RowStats load_row_stats(Program &pr, const Cotangents &ct, Value n, Value t0, int64_t rows);
/// load_row_stats in two halves: the loads, which a loop may issue a step ahead of their
/// use (a global load's latency outlasts a step's first product), and their masking and
/// scaling where they are used.
struct RowStatLoads {
  Value lse, delta;
};
RowStatLoads load_row_stat_values(Program &pr, const Cotangents &ct, Value n, Value t0, int64_t rows);
RowStats finish_row_stats(Program &pr, const Cotangents &ct, const RowStatLoads &loads, Value t0, int64_t rows);

/// The dk/dv kernels' outputs: dk, dv and, for dbias, dS.
struct DkDvOutputs {
  TensorArg dk, dv;
  std::optional<TensorArg> ds;
};
DkDvOutputs declare_dkdv_outputs(Kernel &k, const Problem &p);
/// dk (scaled) and dv of key block j0 of kv head h from the carried sums (dk's chunks first).
void store_dkdv(Program &pr, const DkDvOutputs &o, Value j0, Value h, const Carried &sums, size_t dkChunks);

/// What a dk/dv step hands on besides dk and dv: its dS^T [BKV, BQ] (the compute dtype),
/// once dK's product is issued (the hopper VJP's fused dq: dS K of the step).
using DsConsumer = std::function<void(const Value &dsT)>;
/// One dk/dv step: key block kb / vb (rows from j0) against query block q / d of head n
/// (rows from t0); carried holds dk's chunks then dv's. Stores the step's dS when `ds`,
/// and hands it to `use_ds` when given. The rows' statistics are finished from
/// `given_loads` when given (issued earlier by the caller), else loaded here.
Carried dkdv_step(Program &pr, const Cotangents &ct, const std::optional<TensorArg> &ds, const Chunks &kb,
                  const Chunks &vb, const Chunks &q, const Chunks &d, Value n, Value t0, Value j0,
                  const Masking &masking, const Carried &carried, const DsConsumer &use_ds = {},
                  const RowStatLoads *given_loads = nullptr);
/// One dq step: query block q / d (rows from t0, with their row statistics) against key
/// block kb / vb (rows from j0): acc + dS kb.
Chunks dq_step(Program &pr, const Chunks &q, const Chunks &d, const RowStats &stats, const Chunks &kb,
               const Chunks &vb, Value n, Value t0, Value j0, const Masking &masking, const Chunks &acc);

// Kernel builders (FlashKernels.cpp, HopperKernels.cpp, Reference.cpp).
Kernel flash_forward_kernel(const KernelSpec &s);
Kernel hopper_forward_kernel(const KernelSpec &s);
/// fp8 hopper forward's first kernel: v [B, S, K, Hv] -> vt [B K, Hv, S padded]
/// (Problem::vt_shape), zeros past S.
Kernel v_transpose_kernel(const KernelSpec &s);
Kernel hopper_dkdv_kernel(const KernelSpec &s);
Kernel hopper_dq_kernel(const KernelSpec &s);
Kernel dq_from_sum_kernel(const KernelSpec &s);
Kernel delta_kernel(const KernelSpec &s);
Kernel flash_dkdv_kernel(const KernelSpec &s);
Kernel flash_dq_kernel(const KernelSpec &s);
Kernel dbias_reduce_kernel(const KernelSpec &s);
Kernel dsinks_reduce_kernel(const KernelSpec &s);
Kernel logits_kernel(const KernelSpec &s);
Kernel row_stats_kernel(const KernelSpec &s);
Kernel output_kernel(const KernelSpec &s);
Kernel ref_ds_kernel(const KernelSpec &s);
Kernel ref_dq_kernel(const KernelSpec &s);
Kernel ref_dkdv_kernel(const KernelSpec &s);

} // namespace tokamax::attention_detail
