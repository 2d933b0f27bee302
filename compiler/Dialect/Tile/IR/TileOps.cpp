//===- TileOps.cpp - Verifiers and folds of tile operations -----------------===//
#include "compiler/Dialect/Tile/IR/TileDialect.h"
#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/Dialect/Tile/IR/TileVerifiers.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

using namespace mlir;
using namespace tokamax::tile;

// tile.tma_store's kind: an optional leading keyword (`add`); a store prints none, so
// store IR prints as it always did (the kind prints its own space: the format has none
// after it).
static ParseResult parseTmaStoreKind(OpAsmParser &parser, TmaStoreKindAttr &kind) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  std::optional<TmaStoreKind> value = TmaStoreKind::Store;
  if (succeeded(parser.parseOptionalKeyword(&keyword)) && !(value = symbolizeTmaStoreKind(keyword)))
    return parser.emitError(loc, "unknown tile.tma_store kind '") << keyword << "' (store or add)";
  kind = TmaStoreKindAttr::get(parser.getContext(), *value);
  return success();
}

static void printTmaStoreKind(OpAsmPrinter &printer, Operation *, TmaStoreKindAttr kind) {
  if (kind.getValue() == TmaStoreKind::Add)
    printer << "add ";
}

#define GET_OP_CLASSES
#include "compiler/Dialect/Tile/IR/TileOps.cpp.inc"

namespace {

bool isPowerOfTwo(int64_t value) { return value > 0 && !(value & (value - 1)); }

LogicalResult verifyTileShape(Operation *op, Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return success();
  for (int64_t dim : tensor.getShape())
    if (!isPowerOfTwo(dim))
      return op->emitOpError("tile dimensions must be static powers of two, got ") << type;
  return success();
}

} // namespace

// The checks shared with TileMemoryOps.cpp (TileVerifiers.h).

Type tokamax::tile::pointee(Type ptrLike) {
  return cast<PointerType>(getElementTypeOrSelf(ptrLike)).getPointeeType();
}

bool tokamax::tile::isKernelParameter(Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && arg.getOwner()->isEntryBlock() && isa<FunctionOpInterface>(arg.getOwner()->getParentOp());
}

LogicalResult tokamax::tile::verifyBlockAccess(Operation *op, Type base, size_t numOffsets,
                                               ArrayRef<int64_t> dims, ArrayRef<int64_t> strides,
                                               RankedTensorType tile) {
  if (dims.size() != strides.size())
    return op->emitOpError("has ") << dims.size() << " dims but " << strides.size()
                                   << " strides";
  if (numOffsets != dims.size())
    return op->emitOpError("needs one offset per tensor dimension (") << dims.size()
                                                                     << "), got " << numOffsets;
  if (tile.getRank() != static_cast<int64_t>(dims.size()))
    return op->emitOpError("block ") << tile << " must have the tensor's rank " << dims.size();
  for (int64_t d : dims)
    if (d < 0)
      return op->emitOpError("tensor dims must be non-negative");
  if (pointee(base) != tile.getElementType())
    return op->emitOpError("element type ") << tile.getElementType()
                                            << " does not match the pointer's " << pointee(base);
  return verifyTileShape(op, tile);
}

namespace {

LogicalResult verifySameShape(Operation *op, Type a, Type b, StringRef what) {
  auto ta = cast<RankedTensorType>(a), tb = cast<RankedTensorType>(b);
  if (ta.getShape() != tb.getShape())
    return op->emitOpError() << what << " shape " << tb << " does not match " << ta;
  return success();
}

/// An op naming one of its kernel's mbarriers by `index`: the kernel declares them
/// (tile.mbarriers) and a constant index is one of them.
LogicalResult verifyMbarrierIndex(Operation *op, Value index) {
  auto func = op->getParentOfType<FunctionOpInterface>();
  auto declared = func ? func->getAttrOfType<DenseI64ArrayAttr>(kMbarriersAttr) : DenseI64ArrayAttr();
  if (!declared || declared.empty())
    return op->emitOpError("names an mbarrier, but its kernel declares none (") << kMbarriersAttr << ")";
  APInt value;
  if (matchPattern(index, m_ConstantInt(&value)) &&
      (value.isNegative() || value.getSExtValue() >= static_cast<int64_t>(declared.size())))
    return op->emitOpError("names mbarrier ") << value.getSExtValue() << ", but the kernel declares "
                                              << declared.size();
  return success();
}

} // namespace

LogicalResult ArangeOp::verify() {
  auto type = getResult().getType();
  if (type.getRank() != 1 || type.getDimSize(0) != getEnd() - getStart())
    return emitOpError("result must be a 1-D tile of end - start = ")
           << getEnd() - getStart() << " elements, got " << type;
  return verifyTileShape(*this, type);
}

LogicalResult SplatOp::verify() {
  if (getValue().getType() != getResult().getType().getElementType())
    return emitOpError("scalar type ") << getValue().getType()
                                       << " does not match the tile's element type";
  return verifyTileShape(*this, getResult().getType());
}

LogicalResult LoadOp::verify() {
  auto ptrs = getPtrs().getType();
  if (pointee(ptrs) != getResult().getType().getElementType())
    return emitOpError("result element type does not match the pointee type ") << pointee(ptrs);
  if (failed(verifySameShape(*this, ptrs, getResult().getType(), "result")))
    return failure();
  if (getMask() && failed(verifySameShape(*this, ptrs, getMask().getType(), "mask")))
    return failure();
  if (getOther() && getOther().getType() != getResult().getType())
    return emitOpError("other must have the result type ") << getResult().getType();
  return verifyTileShape(*this, ptrs);
}

LogicalResult StoreOp::verify() {
  auto ptrs = getPtrs().getType();
  if (pointee(ptrs) != getValue().getType().getElementType())
    return emitOpError("value element type does not match the pointee type ") << pointee(ptrs);
  if (failed(verifySameShape(*this, ptrs, getValue().getType(), "value")))
    return failure();
  if (getMask() && failed(verifySameShape(*this, ptrs, getMask().getType(), "mask")))
    return failure();
  return verifyTileShape(*this, ptrs);
}

LogicalResult BlockLoadOp::verify() {
  return verifyBlockAccess(*this, getBase().getType(), getOffsets().size(), getDims(),
                           getStrides(), getResult().getType());
}

namespace {
/// A block's extents without its unit dims: the shape of the tile that holds the block
/// (tile.async_block_load's result, tile.block_atomic_add's value).
SmallVector<int64_t> withoutUnitDims(ArrayRef<int64_t> block) {
  SmallVector<int64_t> kept;
  for (int64_t d : block)
    if (d != 1)
      kept.push_back(d);
  return kept;
}
} // namespace

LogicalResult AsyncBlockLoadOp::verify() {
  ArrayRef<int64_t> dims = getDims(), strides = getStrides(), block = getBlock();
  if (block.size() != dims.size())
    return emitOpError("block has ") << block.size() << " dims, the tensor " << dims.size();
  auto type = getResult().getType();
  SmallVector<int64_t> kept = withoutUnitDims(block);
  while (kept.size() < 2)
    kept.insert(kept.begin(), 1);
  if (type.getRank() != 2 || ArrayRef<int64_t>(kept) != type.getShape())
    return emitOpError("result must be the block without its unit dims (2-D), got ") << type;
  if (block.back() == 1)
    return emitOpError("the block's last dim must not be a unit dim (it is the contiguous one)");
  // The block as tile.block_load would read it: same checks on offsets, dims, dtype.
  auto full = RankedTensorType::get(block, type.getElementType());
  if (failed(verifyBlockAccess(*this, getBase().getType(), getOffsets().size(), dims, strides, full)))
    return failure();
  unsigned bytes = elementBytes(type.getElementType());
  const int64_t chunk = 16 / std::max(1u, bytes);
  if (!isFp8(type.getElementType()) && bytes != 2 && bytes != 4)
    return emitOpError("copies fp8, 16- or 32-bit elements, got ") << type.getElementType();
  if (strides.back() != 1)
    return emitOpError("the last dim must be contiguous (stride 1), got stride ") << strides.back();
  if (block.back() % chunk != 0 || dims.back() % chunk != 0)
    return emitOpError("the block's and the tensor's last dims must be whole 16-byte chunks (multiples of ")
           << chunk << "), got " << block.back() << " and " << dims.back();
  for (size_t d = 0; d + 1 < strides.size(); ++d)
    if (strides[d] % chunk != 0)
      return emitOpError("stride ") << strides[d] << " of dim " << d << " is not a multiple of 16 bytes";
  if (getSlots() < 1 || getBuffer() < 0)
    return emitOpError("needs slots >= 1 and buffer >= 0");
  if (auto layout = type.getEncoding(); layout && !isa<SharedLayoutAttr>(layout))
    return emitOpError("result lives in shared memory (#tile.shared), got ") << layout;
  if (isTma())
    return verifyTmaCopy();
  return success();
}

LogicalResult AsyncBlockLoadOp::verifyTmaCopy() {
  if (failed(verifyMbarrierIndex(*this, getBarrier())))
    return failure();
  if (!hasWgmmaDots(*this))
    return emitOpError("a TMA copy needs a kernel with tile.wgmma_dots (shared tiles stored as wgmma swizzle atoms)");
  if (!isKernelParameter(getBase()))
    return emitOpError("a TMA copy reads a kernel tensor parameter (its tensor map is a launch parameter)");
  ArrayRef<int64_t> fullDims = getDims(), fullBlock = getBlock(), strides = getStrides();
  // 2-D [rows, cols], or 3-D [batches, rows, cols] copied a batch at a time (block [1,
  // rows, cols]): the box stays within its batch, zeros past the batch's last row.
  if (fullDims.size() != 2 && fullDims.size() != 3)
    return emitOpError("a TMA copy reads 2-D tensors or 3-D ones a batch at a time, got ") << fullDims.size()
                                                                                            << " dims";
  const bool batched = fullDims.size() == 3;
  if (batched && fullBlock[0] != 1)
    return emitOpError("a TMA copy of a 3-D tensor copies within one batch (block [1, rows, cols]), got ")
           << fullBlock[0] << " batches";
  ArrayRef<int64_t> dims = fullDims.take_back(2), block = fullBlock.take_back(2);
  if (strides.take_back(2)[0] != dims[1] || (batched && strides[0] != dims[0] * dims[1]))
    return emitOpError("a TMA copy reads row-major contiguous tensors (stride ")
           << dims[1] << " for its rows), got strides [" << strides << "]";
  const int64_t rowBytes = block[1] * elementBytes(getResult().getType().getElementType());
  if (rowBytes != 32 && rowBytes != 64 && rowBytes % 128 != 0)
    return emitOpError("a TMA copy's block rows must be 32 or 64 bytes or a multiple of 128, got ") << rowBytes;
  if (block[0] % 8 != 0 || block[0] > 256)
    return emitOpError("a TMA copy's block must have a multiple of 8 rows, at most 256, got ") << block[0];
  return success();
}

LogicalResult MbarrierWaitOp::verify() { return verifyMbarrierIndex(*this, getIndex()); }

LogicalResult MbarrierArriveOp::verify() { return verifyMbarrierIndex(*this, getIndex()); }

namespace {

bool inWarpSpecializedLoop(Operation *op) {
  for (auto loop = op->getParentOfType<scf::ForOp>(); loop; loop = loop->getParentOfType<scf::ForOp>())
    if (loop->hasAttr(kWarpSpecializeAttr))
      return true;
  return false;
}

/// Turns order the consumer warpgroups of a warp-specialized loop.
LogicalResult verifyTurn(Operation *op) {
  if (op->hasAttr(kProducerAttr))
    return op->emitOpError("orders the consumer warpgroups and cannot run on the producer warpgroup");
  if (inWarpSpecializedLoop(op))
    return success();
  return op->emitOpError("must sit inside a warp-specialized loop (an scf.for marked ") << kWarpSpecializeAttr << ")";
}

/// A warp-specialized loop of one step is folded into its parent by scf.for's
/// canonicalization, leaving its turns outside any loop: with one step there are no
/// turns to take, so they go too (before the pass's verifier sees them).
LogicalResult eraseStrayTurn(Operation *op, PatternRewriter &rewriter) {
  if (inWarpSpecializedLoop(op))
    return failure();
  rewriter.eraseOp(op);
  return success();
}

} // namespace

LogicalResult TurnWaitOp::verify() { return verifyTurn(*this); }

LogicalResult TurnPassOp::verify() { return verifyTurn(*this); }

LogicalResult TurnWaitOp::canonicalize(TurnWaitOp op, PatternRewriter &rewriter) { return eraseStrayTurn(op, rewriter); }

LogicalResult TurnPassOp::canonicalize(TurnPassOp op, PatternRewriter &rewriter) { return eraseStrayTurn(op, rewriter); }

LogicalResult BlockAtomicAddOp::verify() {
  ArrayRef<int64_t> dims = getDims(), block = getBlock();
  if (block.size() != dims.size())
    return emitOpError("block has ") << block.size() << " dims, the tensor " << dims.size();
  auto type = getValue().getType();
  SmallVector<int64_t> kept = withoutUnitDims(block);
  if (ArrayRef<int64_t>(kept) != type.getShape() && !(kept.empty() && type.getNumElements() == 1))
    return emitOpError("value must be the block without its unit dims, got ") << type;
  Type elem = type.getElementType();
  if (!elem.isF32() && !elem.isF64() && !elem.isInteger(32) && !elem.isInteger(64))
    return emitOpError("adds f32, f64, i32 or i64 elements, got ") << elem;
  return verifyBlockAccess(*this, getBase().getType(), getOffsets().size(), dims, getStrides(),
                           RankedTensorType::get(block, elem));
}

LogicalResult BlockStoreOp::verify() {
  const std::optional<int64_t> dim = getLimitDim();
  if (bool(getLimit()) != dim.has_value())
    return emitOpError("takes a limit and its limit_dim together");
  if (dim && (*dim < 0 || *dim + 1 >= static_cast<int64_t>(getDims().size())))
    return emitOpError("limit_dim must name a dimension before the last, got ") << *dim << " of "
                                                                               << getDims().size();
  return verifyBlockAccess(*this, getBase().getType(), getOffsets().size(), getDims(),
                           getStrides(), getValue().getType());
}

LogicalResult CastOp::verify() {
  // Each thread converts its own registers: source and result share one layout.
  auto source = dyn_cast<RankedTensorType>(getSource().getType());
  auto result = dyn_cast<RankedTensorType>(getResult().getType());
  if (source && result && source.getEncoding() != result.getEncoding())
    return emitOpError("keeps the layout of its source (move tiles with tile.convert_layout), got ")
           << source << " to " << result;
  return success();
}

LogicalResult Exp2Op::verify() {
  if (getFmaCount() > getFmaPeriod())
    return emitOpError("computes fma_count of every fma_period registers on the FMA pipes: fma_count must be at "
                       "most fma_period, got ")
           << getFmaCount() << " of " << getFmaPeriod();
  return success();
}

LogicalResult AtomicRMWOp::verify() {
  Type elem = getValue().getType().getElementType();
  if (pointee(getPtrs().getType()) != elem)
    return emitOpError("value element type does not match the pointee type");
  if (!elem.isF32() && !elem.isInteger(32) && !elem.isInteger(64) && !elem.isF64())
    return emitOpError("supports f32, f64, i32 and i64 elements, got ") << elem;
  if (getKind() == AtomicKind::Max && elem.isF64())
    return emitOpError("max is not supported on f64");
  if (getMask() && failed(verifySameShape(*this, getPtrs().getType(), getMask().getType(), "mask")))
    return failure();
  return verifySameShape(*this, getPtrs().getType(), getValue().getType(), "value");
}

LogicalResult AtomicCASOp::verify() {
  Type elem = getValue().getType().getElementType();
  if (!elem.isInteger(32) && !elem.isInteger(64))
    return emitOpError("supports i32 and i64 elements, got ") << elem;
  if (pointee(getPtrs().getType()) != elem || getCompare().getType() != getValue().getType())
    return emitOpError("compare, value and pointee types must agree");
  return verifySameShape(*this, getPtrs().getType(), getValue().getType(), "value");
}

LogicalResult ReduceOp::verify() {
  auto source = getSource().getType();
  int64_t axis = static_cast<int32_t>(getAxis());
  if (axis < 0 || axis >= source.getRank())
    return emitOpError("axis ") << axis << " is out of range for " << source;
  Type expectedElem = getKind() == ReduceKind::Argmax
                          ? Type(IntegerType::get(getContext(), 32))
                          : source.getElementType();
  Type result = getResult().getType();
  if (source.getRank() == 1) {
    if (result != expectedElem)
      return emitOpError("reducing a 1-D tile gives a scalar of type ") << expectedElem;
    return success();
  }
  auto resultTensor = dyn_cast<RankedTensorType>(result);
  SmallVector<int64_t> shape(source.getShape());
  shape.erase(shape.begin() + axis);
  if (!resultTensor || resultTensor.getShape() != ArrayRef<int64_t>(shape) ||
      resultTensor.getElementType() != expectedElem)
    return emitOpError("result must drop axis ") << axis << " with element type "
                                                 << expectedElem << ", got " << result;
  return success();
}

LogicalResult ExpandDimsOp::verify() {
  auto source = getSource().getType();
  auto result = getResult().getType();
  int64_t axis = static_cast<int32_t>(getAxis());
  if (axis < 0 || axis > source.getRank())
    return emitOpError("axis ") << axis << " is out of range for " << source;
  SmallVector<int64_t> shape(source.getShape());
  shape.insert(shape.begin() + axis, 1);
  if (result.getShape() != ArrayRef<int64_t>(shape) ||
      result.getElementType() != source.getElementType())
    return emitOpError("result must insert a unit dimension at ") << axis << ", got " << result;
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto source = getSource().getType();
  auto result = getResult().getType();
  if (source.getRank() != result.getRank() || source.getElementType() != result.getElementType())
    return emitOpError("source ") << source << " and result " << result
                                  << " must have the same rank and element type";
  for (int64_t d = 0; d < source.getRank(); ++d)
    if (source.getDimSize(d) != 1 && source.getDimSize(d) != result.getDimSize(d))
      return emitOpError("cannot broadcast dimension ") << d << " of " << source << " to "
                                                        << result;
  return verifyTileShape(*this, result);
}

LogicalResult ReshapeOp::verify() {
  auto source = getSource().getType();
  auto result = getResult().getType();
  if (source.getNumElements() != result.getNumElements() ||
      source.getElementType() != result.getElementType())
    return emitOpError("cannot reshape ") << source << " to " << result;
  return verifyTileShape(*this, result);
}

LogicalResult TransOp::verify() {
  auto source = getSource().getType();
  auto result = getResult().getType();
  ArrayRef<int32_t> order = getOrder();
  if (static_cast<int64_t>(order.size()) != source.getRank())
    return emitOpError("order must have one entry per dimension of ") << source;
  SmallVector<bool> seen(order.size(), false);
  for (auto [i, d] : llvm::enumerate(order)) {
    if (d < 0 || d >= source.getRank() || seen[d])
      return emitOpError("order must be a permutation");
    seen[d] = true;
    if (result.getDimSize(i) != source.getDimSize(d))
      return emitOpError("result ") << result << " is not " << source << " permuted";
  }
  return success();
}

LogicalResult DotWaitOp::verify() {
  if (getPending() < 0 || getPending() > 7)
    return emitOpError("pending must be in [0, 7], got ") << getPending();
  return success();
}

LogicalResult DotOp::verify() {
  auto a = getA().getType(), b = getB().getType(), acc = getAcc().getType();
  if (a.getRank() != 2 || b.getRank() != 2 || acc.getRank() != 2)
    return emitOpError("operands must be 2-D tiles");
  if (a.getDimSize(1) != b.getDimSize(0))
    return emitOpError("inner dimensions differ: ") << a << " @ " << b;
  if (acc.getDimSize(0) != a.getDimSize(0) || acc.getDimSize(1) != b.getDimSize(1))
    return emitOpError("accumulator ") << acc << " does not match " << a << " @ " << b;
  if (a.getElementType() != b.getElementType())
    return emitOpError("a and b must have one element type");
  if (!acc.getElementType().isF32() && !acc.getElementType().isF64())
    return emitOpError("accumulates in f32 (or f64 on the interpreter), got ")
           << acc.getElementType();
  if (getResult().getType() != acc)
    return emitOpError("result type must equal the accumulator type");
  if (getAKInterleaved() && a.getDimSize(1) % 16 != 0)
    return emitOpError("a_k_interleaved permutes K within 16-wide groups: K must be a multiple of 16, got ")
           << a.getDimSize(1);
  return success();
}

namespace {
/// Checks shared by the main-loop dots: kernel tensor operands of one element type,
/// matching K, a 2-D f32 accumulator, stages in [2, 8], rows of whole 16-byte chunks
/// (TMA boxes and cp.async chunks both move 16 bytes at a time).
/// `windowedB`: op(b)'s K is a window from a run-time start, so b's stored K may differ.
template <class Op> LogicalResult verifyMainLoopDot(Op op, Type &elem, bool windowedB = false) {
  if (!isKernelParameter(op.getA()) || !isKernelParameter(op.getB()))
    return op.emitOpError("a and b must be kernel tensor parameters");
  elem = pointee(op.getA().getType());
  if (elem != pointee(op.getB().getType()))
    return op.emitOpError("a and b must have one element type");
  if (op.getADims().size() != 2 || op.getBDims().size() != 2)
    return op.emitOpError("a and b must be 2-D");
  int64_t kb = op.getTransB() ? op.getBDims()[1] : op.getBDims()[0];
  if (op.getK() != kb && !windowedB)
    return op.emitOpError("inner dimensions differ: op(a) has K = ") << op.getK() << ", op(b) has K = " << kb;
  auto acc = op.getAcc().getType();
  if (acc.getRank() != 2 || !acc.getElementType().isF32())
    return op.emitOpError("the accumulator must be a 2-D f32 tile, got ") << acc;
  if (op.getStages() < 2 || op.getStages() > 8)
    return op.emitOpError("stages must be in [2, 8], got ") << op.getStages();
  if (!elem.isIntOrFloat())
    return op.emitOpError("operands must be floats, got ") << elem;
  int64_t bytes = std::max<int64_t>(1, elem.getIntOrFloatBitWidth() / 8);
  for (ArrayRef<int64_t> dims : {op.getADims(), op.getBDims()})
    if (dims[1] * bytes % 16 != 0)
      return op.emitOpError("rows of a and b must be multiples of 16 bytes, got a row of ") << dims[1]
             << " elements";
  return success();
}
} // namespace

LogicalResult TmaDotOp::verify() {
  Type elem;
  if (failed(verifyMainLoopDot(*this, elem, static_cast<bool>(getBK0()))))
    return failure();
  bool fp8 = isFp8(elem);
  if (!elem.isBF16() && !elem.isF16() && !fp8)
    return emitOpError("operands must be bf16, f16, f8E4M3FN or f8E5M2, got ") << elem;
  // wgmma reads 8-bit operands K-major only: a as [M, K], b as [N, K].
  if (fp8 && (getTransA() || !getTransB()))
    return emitOpError("8-bit operands must both be K-major (trans_a = false, trans_b = true)");
  int64_t bytes = fp8 ? 1 : 2;
  int64_t bm = getBlockM(), bn = getBlockN();
  if (bm % 64 != 0 || bm > 256)
    return emitOpError("block M must be 64, 128 or 256 (wgmma works on 64-row slabs), got ") << bm;
  if (bn < 64 || bn > 256 || !isPowerOfTwo(bn))
    return emitOpError("block N must be 64, 128 or 256, got ") << bn;
  // A K-major slice row is one swizzle row: 32, 64 or 128 bytes.
  int64_t rowBytes = getBlockK() * bytes;
  if (rowBytes != 32 && rowBytes != 64 && rowBytes != 128)
    return emitOpError("block_k must span a 32-, 64- or 128-byte swizzle row (")
           << 32 / bytes << ", " << 64 / bytes << " or " << 128 / bytes << " elements), got " << getBlockK();
  if (getWarpSpecialize()) {
    // The producer warps skip the rest of the op's block: nothing computed there may
    // leave it, and the block is the kernel body or a loop directly in it.
    Operation *parent = (*this)->getParentOp();
    bool topLevel = isa<FunctionOpInterface>(parent) ||
                    (isa<scf::ForOp>(parent) && isa<FunctionOpInterface>(parent->getParentOp()));
    if (!topLevel)
      return emitOpError("with warp_specialize must sit in the kernel body or in a loop directly in it");
    for (Value v : (*this)->getBlock()->getTerminator()->getOperands())
      if (Operation *def = v.getDefiningOp(); def && def->getBlock() == (*this)->getBlock() &&
                                              (*this)->isBeforeInBlock(def))
        return emitOpError("with warp_specialize: its loop may not carry values computed after it (only its own "
                           "warps run that part)");
  }
  if (getAInRegisters() && getTransA())
    return emitOpError("a_in_registers needs a as [M, K] (trans_a = false): ldmatrix reads K-major rows");
  if (getRebalanceRegisters()) {
    auto loop = dyn_cast<scf::ForOp>((*this)->getParentOp());
    if (!getWarpSpecialize() || !loop || !loop.getInitArgs().empty())
      return emitOpError("with rebalance_registers must be warp-specialized and sit directly in a loop that carries "
                         "no values (each warp role runs its own copy of the loop)");
    for (Operation &other : loop.getBody()->without_terminator())
      if (auto dot = dyn_cast<TmaDotOp>(other); dot && dot != *this && dot.getWarpSpecialize())
        return emitOpError("with rebalance_registers must be the only warp-specialized tma_dot of its loop");
  }
  int64_t cluster = getClusterM();
  if (cluster != 1 && cluster != 2)
    return emitOpError("cluster_m must be 1 or 2, got ") << cluster;
  if (cluster == 2) {
    // The two CTAs release each stage to both producers: only the warp-specialized ring
    // has the per-stage empty barriers that count them.
    if (!getWarpSpecialize())
      return emitOpError("cluster_m = 2 needs warp_specialize");
    // Each CTA multicasts half of b's slice: whole [64 K][64] boxes when b is N-major.
    if (!getTransB() && bn < 128)
      return emitOpError("cluster_m = 2 with b as [K, N] needs block N of at least 128 (two 64-column boxes), got ")
             << bn;
  }
  return success();
}

LogicalResult CpAsyncDotOp::verify() {
  Type elem;
  if (failed(verifyMainLoopDot(*this, elem)))
    return failure();
  if (!elem.isBF16() && !elem.isF16() && !elem.isF32())
    return emitOpError("operands must be bf16, f16 or f32 (as tf32), got ") << elem;
  // One mma.sync K step is 32 bytes of K (k16 for 16-bit, k8 for tf32); a row of the
  // swizzled slice holds whole 16-byte chunks, at most 8 of them per swizzle phase.
  int64_t bytes = elem.getIntOrFloatBitWidth() / 8;
  if (getBlockK() * bytes % 32 != 0 || getBlockK() * bytes > 256)
    return emitOpError("block_k must be a multiple of ") << 32 / bytes << " elements up to " << 256 / bytes
                                                         << ", got " << getBlockK();
  int64_t bm = getBlockM(), bn = getBlockN();
  if (bm % 16 != 0 || bn % 16 != 0 || !isPowerOfTwo(bm) || !isPowerOfTwo(bn) || bm > 256 || bn > 256)
    return emitOpError("block M and N must be powers of two in [16, 256], got ") << bm << " x " << bn;
  return success();
}

OpFoldResult ConvertLayoutOp::fold(FoldAdaptor) {
  if (getSource().getType() == getResult().getType())
    return getSource();
  return {};
}

namespace {
/// convert(convert(x)) -> convert(x); convert(splat) -> splat; convert(arange) -> arange.
struct FoldConvertOfProducer : OpRewritePattern<ConvertLayoutOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ConvertLayoutOp op, PatternRewriter &rewriter) const override {
    Operation *producer = op.getSource().getDefiningOp();
    if (!producer)
      return failure();
    Type type = op.getResult().getType();
    if (auto inner = dyn_cast<ConvertLayoutOp>(producer)) {
      rewriter.replaceOpWithNewOp<ConvertLayoutOp>(op, type, inner.getSource());
      return success();
    }
    if (auto splat = dyn_cast<SplatOp>(producer)) {
      rewriter.replaceOpWithNewOp<SplatOp>(op, type, splat.getValue());
      return success();
    }
    if (auto arange = dyn_cast<ArangeOp>(producer)) {
      rewriter.replaceOpWithNewOp<ArangeOp>(op, type, arange.getStartAttr(), arange.getEndAttr());
      return success();
    }
    return failure();
  }
};
} // namespace

void ConvertLayoutOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *ctx) {
  results.add<FoldConvertOfProducer>(ctx);
}
