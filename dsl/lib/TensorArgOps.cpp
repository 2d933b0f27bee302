//===- TensorArgOps.cpp - Block memory of kernel tensors in the DSL ---------===//
//
// TensorArg's block loads and stores (plain, asynchronous into shared memory, TMA) and
// the whole-main-loop products over two kernel tensors (tma_dot, cp_async_dot).
//
//===----------------------------------------------------------------------===//
#include "dsl/lib/KernelBuilder.h"

#include <fmt/ranges.h>

#include <algorithm>

using namespace mlir;

namespace tokamax::dsl {

//===----------------------------------------------------------------------===//
// TensorArg
//===----------------------------------------------------------------------===//

Value TensorArg::ptr() const {
  return builder_->wrap(builder_->func().getArgument(index_));
}

static SmallVector<mlir::Value> blockOffsets(KernelBuilder &kb, const std::string &name, size_t rank,
                                             const std::vector<Value> &offsets, const char *op) {
  if (offsets.size() != rank)
    kb.fail(fmt::format("{} {}: needs {} offsets (one per dimension), got {}", op, name, rank, offsets.size()));
  SmallVector<mlir::Value> result;
  for (const Value &o : offsets)
    result.push_back(kb.index(o, op));
  return result;
}

/// Checks a block of `block` elements of the tensor for `op`: the tensor's rank, powers of two.
static void checkBlock(KernelBuilder &kb, const std::string &name, const char *op, const std::vector<int64_t> &block,
                       size_t rank) {
  if (block.size() != rank)
    kb.fail(fmt::format("{} {}: block [{}] must have the tensor's rank {}", op, name, fmt::join(block, ", "), rank));
  for (int64_t d : block)
    if (!isPowerOfTwo(d))
      kb.fail(fmt::format("{} {}: block dimensions must be powers of two, got [{}]", op, name, fmt::join(block, ", ")));
}

/// A block's extents without its unit dims (the shape of the tile that holds it).
static std::vector<int64_t> withoutUnitDims(const std::vector<int64_t> &block) {
  std::vector<int64_t> kept;
  for (int64_t d : block)
    if (d != 1)
      kept.push_back(d);
  return kept;
}

Value TensorArg::load(std::vector<Value> offsets, std::vector<int64_t> block, double padding) const {
  KernelBuilder &kb = *builder_;
  checkBlock(kb, name_, "load", block, shape_.size());
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, "load");
  mlir::Value base = kb.func().getArgument(index_);
  auto type = RankedTensorType::get(block, tile::toMlirType(&kb.context(), dtype_));
  auto op = kb.b().create<tile::BlockLoadOp>(kb.loc(), type, base, offs, kb.b().getDenseI64ArrayAttr(shape_),
                                             kb.b().getDenseI64ArrayAttr(strides_), kb.b().getF64FloatAttr(padding));
  return kb.wrap(op);
}

Value TensorArg::load_tma(std::vector<Value> offsets, std::vector<int64_t> block, const SharedBuffer &buffer,
                          const Value &slot, const Mbarriers &barriers, const Value &index) const {
  KernelBuilder &kb = *builder_;
  if (!kb.wgmmaDots())
    kb.fail(fmt::format("load_tma {}: needs KernelOptions::wgmma_dots (shared tiles stored as wgmma swizzle atoms)",
                        name_));
  const bool batched = shape_.size() == 3 && block.size() == 3 && block[0] == 1;
  if (!(shape_.size() == 2 && block.size() == 2) && !batched)
    kb.fail(fmt::format("load_tma {}: copies 2-D blocks of 2-D tensors, or [1, rows, cols] blocks of 3-D ones (a "
                        "batch at a time), got a [{}] block of a [{}] tensor",
                        name_, fmt::join(block, ", "), fmt::join(shape_, ", ")));
  const int64_t rows = block[block.size() - 2], cols = block.back();
  const int64_t rowBytes = cols * static_cast<int64_t>(dtype_size(dtype_));
  if (rowBytes != 32 && rowBytes != 64 && (rowBytes % 128 != 0 || rowBytes <= 0))
    kb.fail(fmt::format("load_tma {}: block rows must be 32 or 64 bytes or a multiple of 128, got {} bytes", name_,
                        rowBytes));
  if (rows % 8 != 0 || rows < 8 || rows > 256)
    kb.fail(fmt::format("load_tma {}: the block needs a multiple of 8 rows, 8 to 256, got {}", name_, rows));
  mlir::Value barrier = kb.mbarrierIndex(barriers, index, "load_tma");
  Value copy = load_async(std::move(offsets), std::move(block), buffer, slot);
  mlir::Operation *op = KernelBuilder::raw(copy).getDefiningOp();
  cast<tile::AsyncBlockLoadOp>(op).getBarrierMutable().assign(barrier);
  return copy;
}

Value TensorArg::load_async(std::vector<Value> offsets, std::vector<int64_t> block, const SharedBuffer &buffer,
                            const Value &slot) const {
  KernelBuilder &kb = *builder_;
  if (buffer.id < 0 || buffer.id >= kb.sharedBuffers)
    kb.fail(fmt::format("load_async {}: the buffer does not come from this kernel's shared_buffer()", name_));
  checkBlock(kb, name_, "load_async", block, shape_.size());
  std::vector<int64_t> kept = withoutUnitDims(block);
  if (kept.size() > 2 || block.back() == 1)
    kb.fail(fmt::format("load_async {}: the block [{}] must have at most two non-unit dims, the last one of them",
                        name_, fmt::join(block, ", ")));
  while (kept.size() < 2)
    kept.insert(kept.begin(), 1);
  const int64_t bytes = static_cast<int64_t>(dtype_size(dtype_));
  if (!is_fp8(dtype_) && bytes != 2 && bytes != 4)
    kb.fail(fmt::format("load_async {}: copies fp8, 16- or 32-bit elements, got {}", name_, dtype_name(dtype_)));
  const int64_t chunk = 16 / bytes;
  if (block.back() % chunk != 0 || shape_.back() % chunk != 0)
    kb.fail(fmt::format("load_async {}: the block's and the tensor's last dims must be multiples of {} (16 bytes), "
                        "got {} and {}",
                        name_, chunk, block.back(), shape_.back()));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, "load_async");
  mlir::Value slotValue = kb.index(slot, "load_async");
  auto type = RankedTensorType::get(kept, tile::toMlirType(&kb.context(), dtype_));
  auto op = kb.b().create<tile::AsyncBlockLoadOp>(
      kb.loc(), type, kb.func().getArgument(index_), offs, slotValue, /*barrier=*/mlir::Value(),
      kb.b().getDenseI64ArrayAttr(shape_),
      kb.b().getDenseI64ArrayAttr(strides_), kb.b().getDenseI64ArrayAttr(block), kb.b().getI64IntegerAttr(buffer.id),
      kb.b().getI64IntegerAttr(buffer.slots));
  return kb.wrap(op);
}

void TensorArg::store(std::vector<Value> offsets, const Value &tile) const {
  storeBlock(std::move(offsets), tile, -1, Value(), "store");
}

void TensorArg::store_below(std::vector<Value> offsets, const Value &tile, int dim, const Value &limit) const {
  if (dim < 0 || dim + 1 >= static_cast<int>(shape_.size()))
    builder_->fail(fmt::format("store_below {}: dim must be a dimension before the last, got {} of {}", name_, dim,
                               shape_.size()));
  storeBlock(std::move(offsets), tile, dim, limit, "store_below");
}

void TensorArg::storeBlock(std::vector<Value> offsets, const Value &tile, int limitDim, const Value &limit,
                           const char *what) const {
  KernelBuilder &kb = *builder_;
  Type elem = tile::toMlirType(&kb.context(), dtype_);
  mlir::Value v = kb.materialize(tile, elem);
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() != static_cast<int64_t>(shape_.size()))
    kb.fail(fmt::format("{} {}: needs a tile of rank {}, got {}", what, name_, shape_.size(), shapeString(v.getType())));
  if (type.getElementType() != elem)
    kb.fail(fmt::format("{} {}: tile dtype {} does not match the tensor dtype {}; cast with .to()", what, name_,
                        typeString(type), dtype_name(dtype_)));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, what);
  mlir::Value bound = limitDim >= 0 ? kb.index(limit, what) : mlir::Value();
  kb.b().create<tile::BlockStoreOp>(kb.loc(), kb.func().getArgument(index_), offs, v, bound,
                                    kb.b().getDenseI64ArrayAttr(shape_), kb.b().getDenseI64ArrayAttr(strides_),
                                    limitDim >= 0 ? kb.b().getI64IntegerAttr(limitDim) : mlir::IntegerAttr());
}

void TensorArg::atomic_add(std::vector<Value> offsets, std::vector<int64_t> block, const Value &tile) const {
  KernelBuilder &kb = *builder_;
  if (dtype_ != DType::F32 && dtype_ != DType::F64 && dtype_ != DType::I32 && dtype_ != DType::I64)
    kb.fail(fmt::format("atomic_add {}: adds into f32, f64, i32 or i64 tensors, got {}", name_, dtype_name(dtype_)));
  checkBlock(kb, name_, "atomic_add", block, shape_.size());
  std::vector<int64_t> kept = withoutUnitDims(block);
  Type elem = tile::toMlirType(&kb.context(), dtype_);
  mlir::Value v = kb.materialize(tile, elem);
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getShape() != ArrayRef<int64_t>(kept))
    kb.fail(fmt::format("atomic_add {}: needs the block [{}] without its unit dims, [{}], got {}", name_,
                        fmt::join(block, ", "), fmt::join(kept, ", "), shapeString(v.getType())));
  if (type.getElementType() != elem)
    kb.fail(fmt::format("atomic_add {}: tile dtype {} does not match the tensor dtype {}; cast with .to()", name_,
                        typeString(type), dtype_name(dtype_)));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, "atomic_add");
  kb.b().create<tile::BlockAtomicAddOp>(kb.loc(), kb.func().getArgument(index_), offs, v,
                                        kb.b().getDenseI64ArrayAttr(shape_), kb.b().getDenseI64ArrayAttr(strides_),
                                        kb.b().getDenseI64ArrayAttr(block));
}

void TensorArg::tma_store(std::vector<Value> offsets, const Value &tile) const {
  tma_write(std::move(offsets), tile, /*add=*/false);
}

void TensorArg::tma_reduce_add(std::vector<Value> offsets, const Value &tile) const {
  tma_write(std::move(offsets), tile, /*add=*/true);
}

void TensorArg::tma_write(std::vector<Value> offsets, const Value &tile, bool add) const {
  KernelBuilder &kb = *builder_;
  const char *what = add ? "tma_reduce_add" : "tma_store";
  Type elem = tile::toMlirType(&kb.context(), dtype_);
  if (dtype_ != DType::BF16 && dtype_ != DType::F16 && dtype_ != DType::F32)
    kb.fail(fmt::format("{} {}: stores bf16, f16 or f32 tensors, got {}", what, name_, dtype_name(dtype_)));
  if (add && dtype_ != DType::F32)
    kb.fail(fmt::format("{} {}: adds into f32 tensors only (a 16-bit sum would round at every partial sum), got {}",
                        what, name_, dtype_name(dtype_)));
  if (shape_.size() != 2)
    kb.fail(fmt::format("{} {}: needs a 2-D tensor, got [{}]", what, name_, fmt::join(shape_, ", ")));
  const int64_t bytes = static_cast<int64_t>(dtype_size(dtype_)), columns = 128 / bytes;
  if (shape_[1] * bytes % 16 != 0)
    kb.fail(fmt::format("{} {}: rows must be multiples of 16 bytes ({} elements), got [{}]", what, name_, 16 / bytes,
                        fmt::join(shape_, ", ")));
  mlir::Value v = kb.materialize(tile, elem);
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() != 2 || type.getDimSize(0) > 256 || type.getDimSize(1) % columns != 0)
    kb.fail(fmt::format("{} {}: needs a [BM, BN] tile with BM <= 256 and BN a multiple of {} (128 bytes), got {}",
                        what, name_, columns, shapeString(v.getType())));
  if (type.getElementType() != elem)
    kb.fail(fmt::format("{} {}: tile dtype {} does not match the tensor dtype {}; cast with .to()", what, name_,
                        typeString(type), dtype_name(dtype_)));
  auto offs = blockOffsets(kb, name_, 2, offsets, what);
  kb.b().create<tile::TmaStoreOp>(kb.loc(), kb.func().getArgument(index_), offs, v, kb.b().getDenseI64ArrayAttr(shape_),
                                  add ? tile::TmaStoreKind::Add : tile::TmaStoreKind::Store);
}

void TensorArg::semaphore_wait(std::vector<Value> offsets, const Value &expected) const {
  semaphore(std::move(offsets), expected, /*wait=*/true);
}

void TensorArg::semaphore_signal(std::vector<Value> offsets, const Value &add) const {
  semaphore(std::move(offsets), add, /*wait=*/false);
}

void TensorArg::semaphore(std::vector<Value> offsets, const Value &value, bool wait) const {
  KernelBuilder &kb = *builder_;
  const char *what = wait ? "semaphore_wait" : "semaphore_signal";
  if (dtype_ != DType::I32)
    kb.fail(fmt::format("{} {}: counts in an i32 tensor, got {}", what, name_, dtype_name(dtype_)));
  auto offs = blockOffsets(kb, name_, shape_.size(), offsets, what);
  mlir::Value v = kb.index(value, what);
  mlir::Value base = kb.func().getArgument(index_);
  auto dims = kb.b().getDenseI64ArrayAttr(shape_), strides = kb.b().getDenseI64ArrayAttr(strides_);
  if (wait)
    kb.b().create<tile::SemaphoreWaitOp>(kb.loc(), base, offs, v, dims, strides);
  else
    kb.b().create<tile::SemaphoreSignalOp>(kb.loc(), base, offs, v, dims, strides);
}

/// Checks shared by the main-loop dots (tma_dot, cp_async_dot): 2-D tensors of one
/// kernel and one of `dtypes`, rows of 16-byte multiples, matching K, stages in [2, 8],
/// an f32 [BM, BN] accumulator with BM and BN powers of two in [lo, 256].
struct MainLoopDotArgs {
  KernelBuilder &kb;
  mlir::Value acc;
  RankedTensorType type;

  /// `windowedB`: op(b)'s K is a window of b's from a run-time start (tma_dot's b_k0).
  MainLoopDotArgs(const char *op, const TensorArg &a, const TensorArg &b, const Value &accValue, bool transA,
                  bool transB, int64_t stages, const std::vector<DType> &dtypes, int64_t lo, bool windowedB = false)
      : kb(builderOf(op, a, b)) {
    std::string names;  // "bf16, f16 or f32"
    for (size_t i = 0; i < dtypes.size(); ++i)
      names += fmt::format("{}{}", i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ", dtype_name(dtypes[i]));
    for (const TensorArg *t : {&a, &b}) {
      if (t->shape_.size() != 2)
        kb.fail(fmt::format("{}: {} must be 2-D, got [{}]", op, t->name_, fmt::join(t->shape_, ", ")));
      if (std::find(dtypes.begin(), dtypes.end(), t->dtype_) == dtypes.end())
        kb.fail(fmt::format("{}: {} must be {}, got {}", op, t->name_, names, dtype_name(t->dtype_)));
      int64_t bytes = static_cast<int64_t>(dtype_size(t->dtype_));
      if (t->shape_[1] * bytes % 16 != 0)
        kb.fail(fmt::format("{}: rows of {} must be multiples of 16 bytes ({} elements), got [{}]", op, t->name_,
                            16 / bytes, fmt::join(t->shape_, ", ")));
    }
    if (a.dtype_ != b.dtype_)
      kb.fail(fmt::format("{}: a is {} but b is {}", op, dtype_name(a.dtype_), dtype_name(b.dtype_)));
    int64_t ka = transA ? a.shape_[0] : a.shape_[1];
    int64_t kb2 = transB ? b.shape_[1] : b.shape_[0];
    if (ka != kb2 && !windowedB)
      kb.fail(fmt::format("{}: op({}) has K = {} but op({}) has K = {}", op, a.name_, ka, b.name_, kb2));
    if (stages < 2 || stages > 8)
      kb.fail(fmt::format("{}: stages must be in [2, 8], got {}", op, stages));
    acc = kb.materialize(accValue, kb.b().getF32Type());
    type = dyn_cast<RankedTensorType>(acc.getType());
    auto valid = [&](int64_t d) { return d >= lo && d <= 256 && (d & (d - 1)) == 0; };
    if (!type || type.getRank() != 2 || !valid(type.getDimSize(0)) || !valid(type.getDimSize(1)))
      kb.fail(fmt::format("{}: the accumulator must be an f32 [BM, BN] tile with BM, BN powers of two in [{}, 256], "
                          "got {}",
                          op, lo, shapeString(acc.getType())));
  }

  static KernelBuilder &builderOf(const char *op, const TensorArg &a, const TensorArg &b) {
    if (!a.builder_ || a.builder_ != b.builder_)
      throw Error(fmt::format("{}: a and b must be tensor parameters of one kernel", op));
    return *a.builder_;
  }

  /// The operands every main-loop dot op takes, then its own trailing attributes.
  template <class Op, class... Extra>
  Value create(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0, bool transA, bool transB,
               int64_t blockK, int64_t stages, Extra... extra) {
    const char *name = Op::getOperationName().data();
    auto op = kb.b().create<Op>(kb.loc(), type, kb.func().getArgument(a.index_), kb.func().getArgument(b.index_),
                                kb.index(m0, name), kb.index(n0, name), acc, kb.b().getDenseI64ArrayAttr(a.shape_),
                                kb.b().getDenseI64ArrayAttr(b.shape_), kb.b().getBoolAttr(transA),
                                kb.b().getBoolAttr(transB), kb.b().getI64IntegerAttr(blockK),
                                kb.b().getI64IntegerAttr(stages), extra...);
    return kb.wrap(op);
  }
};

Value tma_dot(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0, const Value &acc,
              const TmaDotOptions &options) {
  MainLoopDotArgs args("tma_dot", a, b, acc, options.trans_a, options.trans_b, options.stages,
                       {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}, 64, options.b_k0.has_value());
  const bool fp8 = is_fp8(a.dtype_);
  const int64_t bytes = fp8 ? 1 : 2;
  if (fp8 && (options.trans_a || !options.trans_b))
    args.kb.fail("tma_dot: 8-bit operands must both be K-major: a as [M, K] (trans_a = false) and b as [N, K] "
                 "(trans_b = true)");
  if (options.block_k * bytes != 32 && options.block_k * bytes != 64 && options.block_k * bytes != 128)
    args.kb.fail(fmt::format("tma_dot: block_k must be {}, {} or {} (one 32-, 64- or 128-byte swizzle row), got {}",
                             32 / bytes, 64 / bytes, 128 / bytes, options.block_k));
  if (options.a_in_registers && options.trans_a)
    args.kb.fail("tma_dot: a_in_registers needs a as [M, K] (trans_a = false)");
  if (options.cluster_m != 1 && options.cluster_m != 2)
    args.kb.fail(fmt::format("tma_dot: cluster_m must be 1 or 2, got {}", options.cluster_m));
  if (options.cluster_m == 2 && !options.warp_specialize)
    args.kb.fail("tma_dot: cluster_m = 2 needs warp_specialize");
  if (options.rebalance_registers && !options.warp_specialize)
    args.kb.fail("tma_dot: rebalance_registers needs warp_specialize (it moves registers from the producer "
                 "warpgroup to the kernel's warps)");
  if (options.cluster_m == 2 && !options.trans_b && args.type.getDimSize(1) < 128)
    args.kb.fail(fmt::format("tma_dot: cluster_m = 2 with b as [K, N] needs block N >= 128 (two 64-column boxes to "
                             "multicast), got {}",
                             args.type.getDimSize(1)));
  mlir::Value bK0 = options.b_k0 ? args.kb.index(*options.b_k0, "tma_dot") : mlir::Value();
  return args.create<tile::TmaDotOp>(a, b, m0, n0, options.trans_a, options.trans_b, options.block_k,
                                     options.stages, bK0, args.kb.b().getBoolAttr(options.warp_specialize),
                                     args.kb.b().getI64IntegerAttr(options.cluster_m),
                                     args.kb.b().getBoolAttr(options.a_in_registers),
                                     args.kb.b().getBoolAttr(options.rebalance_registers));
}

Value cp_async_dot(const TensorArg &a, const TensorArg &b, const Value &m0, const Value &n0, const Value &acc,
                   const CpAsyncDotOptions &options) {
  MainLoopDotArgs args("cp_async_dot", a, b, acc, options.trans_a, options.trans_b, options.stages,
                       {DType::BF16, DType::F16, DType::F32}, 16);
  const int64_t bytes = static_cast<int64_t>(dtype_size(a.dtype_));
  if (options.block_k < 1 || options.block_k * bytes % 32 != 0 || options.block_k * bytes > 256)
    args.kb.fail(fmt::format("cp_async_dot: block_k must be a multiple of {} up to {} ({} operands), got {}",
                             32 / bytes, 256 / bytes, dtype_name(a.dtype_), options.block_k));
  return args.create<tile::CpAsyncDotOp>(a, b, m0, n0, options.trans_a, options.trans_b, options.block_k,
                                         options.stages);
}

} // namespace tokamax::dsl
