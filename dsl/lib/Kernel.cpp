//===- Kernel.cpp - Kernels, parameters, control flow -----------------------===//
#include "dsl/lib/KernelBuilder.h"

#include "compiler/lib/Context.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/ranges.h>

#include <algorithm>

using namespace mlir;

namespace tokamax::dsl {

namespace {

void checkIdentifier(const std::string &name, const char *what) {
  bool ok = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!ok)
    throw Error(fmt::format("{} name '{}' must be a C identifier", what, name));
}
} // namespace

std::string shapeString(Type type) {
  if (auto t = dyn_cast<RankedTensorType>(type))
    return fmt::format("[{}]", fmt::join(t.getShape(), ", "));
  return "scalar";
}

std::string typeString(Type type) {
  Type elem = getElementTypeOrSelf(type);
  if (auto ptr = dyn_cast<tile::PointerType>(elem))
    return "ptr<" + typeString(ptr.getPointeeType()) + ">";
  if (auto dtype = tile::fromMlirType(elem))
    return std::string(dtype_name(*dtype));
  std::string s;
  llvm::raw_string_ostream os(s);
  elem.print(os);
  return s;
}

KernelBuilder &builderOf(const char *op, std::initializer_list<const Value *> values) {
  for (const Value *v : values) {
    if (!v->valid())
      continue;
    if (v->builder())
      return *v->builder();
  }
  throw Error(fmt::format("{}: every operand is a literal; make one a kernel value "
                          "(e.g. k.constant(v, dtype))",
                          op));
}

KernelBuilder::KernelBuilder(std::string name, KernelOptions options)
    : ctx(compiler_detail::makeContext()), builder(ctx.get()), name_(std::move(name)),
      options(options) {
  checkIdentifier(name_, "kernel");
  if (options.num_warps < 1 || options.num_warps > 32 || !isPowerOfTwo(options.num_warps))
    throw Error(fmt::format("kernel {}: num_warps must be a power of two in [1, 32], got {}", name_,
                            options.num_warps));
  moduleOp = ModuleOp::create(loc());
  builder.setInsertionPointToEnd(moduleOp->getBody());
  kernel = builder.create<func::FuncOp>(loc(), name_, builder.getFunctionType({}, {}));
  kernel->setAttr("tile.kernel", builder.getUnitAttr());
  kernel->setAttr("tile.num_warps", builder.getI32IntegerAttr(options.num_warps));
  if (options.mma_rows_per_warp)
    kernel->setAttr("tile.mma_rows_per_warp", builder.getUnitAttr());
  if (options.wgmma_dots)
    kernel->setAttr("tile.wgmma_dots", builder.getUnitAttr());
  if (options.producer_registers < 24 || options.producer_registers > 256 || options.producer_registers % 8 != 0)
    throw Error(fmt::format("kernel {}: producer_registers must be a multiple of 8 in [24, 256], got {}", name_,
                            options.producer_registers));
  if (options.producer_registers != 24)
    kernel->setAttr("tile.producer_registers", builder.getI32IntegerAttr(options.producer_registers));
  if (options.blocks_per_sm != 1 && options.blocks_per_sm != 2 && options.blocks_per_sm != 4)
    throw Error(fmt::format("kernel {}: blocks_per_sm must be 1, 2 or 4, got {}", name_, options.blocks_per_sm));
  if (options.blocks_per_sm != 1)
    kernel->setAttr("tile.blocks_per_sm", builder.getI32IntegerAttr(options.blocks_per_sm));
  kernel->setAttr("tile.grid", builder.getDenseI64ArrayAttr(grid));
  Block *entry = kernel.addEntryBlock();
  builder.setInsertionPointToEnd(entry);
  auto ret = builder.create<func::ReturnOp>(loc());
  builder.setInsertionPoint(ret);
}

mlir::Value KernelBuilder::addParameter(const std::string &name, Type type, bool isOutput,
                                  const std::vector<int64_t> &shape) {
  checkIdentifier(name, "parameter");
  if (std::find(paramNames.begin(), paramNames.end(), name) != paramNames.end())
    fail(fmt::format("kernel {}: parameter '{}' is declared twice", name_, name));
  paramNames.push_back(name);
  SmallVector<NamedAttribute> attrs{builder.getNamedAttr("tile.name", builder.getStringAttr(name))};
  if (isOutput)
    attrs.push_back(builder.getNamedAttr("tile.output", builder.getUnitAttr()));
  if (isa<tile::PointerType>(type))
    attrs.push_back(builder.getNamedAttr("tile.shape", builder.getDenseI64ArrayAttr(shape)));
  unsigned index = kernel.getNumArguments();
  (void)kernel.insertArgument(index, type, builder.getDictionaryAttr(attrs), loc());
  return kernel.getArgument(index);
}

mlir::Value KernelBuilder::materialize(const Value &v, Type elementType, ArrayRef<int64_t> shape) {
  if (!v.is_literal()) {
    if (v.builder() != this)
      fail(fmt::format("kernel {}: a value of another kernel was used", name_));
    return raw(v);
  }
  double value = *v.literal();
  mlir::Value scalar;
  if (auto ft = dyn_cast<FloatType>(elementType))
    scalar = builder.create<arith::ConstantOp>(loc(), builder.getFloatAttr(ft, value));
  else if (elementType.isIntOrIndex())
    scalar = builder.create<arith::ConstantOp>(
        loc(), builder.getIntegerAttr(elementType, static_cast<int64_t>(value)));
  else
    fail(fmt::format("kernel {}: a literal cannot become a {}", name_, typeString(elementType)));
  if (shape.empty())
    return scalar;
  return builder.create<tile::SplatOp>(loc(), RankedTensorType::get(shape, elementType), scalar);
}

mlir::Value KernelBuilder::index(const Value &v, const char *op) {
  mlir::Value x = materialize(v, builder.getI32Type());
  if (x.getType() != builder.getI32Type())
    fail(fmt::format("{}: expected an i32 scalar, got {} {}", op, typeString(x.getType()),
                     shapeString(x.getType())));
  return x;
}

mlir::Value KernelBuilder::broadcastTo(mlir::Value v, ArrayRef<int64_t> shape, const char *op) {
  ArrayRef<int64_t> from = shapeOf(v);
  if (from == shape)
    return v;
  Type elem = elementType(v);
  auto target = RankedTensorType::get(shape, elem);
  if (!isa<RankedTensorType>(v.getType()))
    return builder.create<tile::SplatOp>(loc(), target, v);
  bool ok = from.size() == shape.size();
  for (size_t d = 0; ok && d < shape.size(); ++d)
    ok = from[d] == shape[d] || from[d] == 1;
  if (!ok)
    fail(fmt::format("{}: cannot broadcast {} to [{}]", op, shapeString(v.getType()),
                     fmt::join(shape, ", ")));
  return builder.create<tile::BroadcastOp>(loc(), target, v);
}

std::pair<mlir::Value, mlir::Value> KernelBuilder::unify(const Value &a, const Value &b, const char *op) {
  mlir::Value x, y;
  if (a.is_literal() && !b.is_literal()) {
    y = raw(b);
    x = materialize(a, elementType(y), shapeOf(y));
  } else if (b.is_literal() && !a.is_literal()) {
    x = raw(a);
    y = materialize(b, elementType(x), shapeOf(x));
  } else {
    x = materialize(a, {});
    y = materialize(b, {});
  }
  if (elementType(x) != elementType(y))
    fail(fmt::format("{}: operand dtypes {} and {} differ; cast one with .to()", op,
                     typeString(x.getType()), typeString(y.getType())));
  ArrayRef<int64_t> sx = shapeOf(x), sy = shapeOf(y);
  if (sx == sy)
    return {x, y};
  std::vector<int64_t> shape;
  if (sx.empty() || sy.empty()) {
    shape.assign((sx.empty() ? sy : sx).begin(), (sx.empty() ? sy : sx).end());
  } else {
    if (sx.size() != sy.size())
      fail(fmt::format("{}: shapes {} and {} have different ranks", op, shapeString(x.getType()),
                       shapeString(y.getType())));
    for (size_t d = 0; d < sx.size(); ++d) {
      if (sx[d] != sy[d] && sx[d] != 1 && sy[d] != 1)
        fail(fmt::format("{}: shapes {} and {} cannot be broadcast", op, shapeString(x.getType()),
                         shapeString(y.getType())));
      shape.push_back(std::max(sx[d], sy[d]));
    }
  }
  return {broadcastTo(x, shape, op), broadcastTo(y, shape, op)};
}

std::string KernelBuilder::ir() {
  kernel->setAttr("tile.grid", builder.getDenseI64ArrayAttr(grid));
  compiler_detail::DiagnosticCollector diagnostics(*ctx);
  if (failed(verify(*moduleOp)))
    fail(fmt::format("kernel {} does not verify:\n{}", name_, diagnostics.text()));
  std::string text;
  llvm::raw_string_ostream os(text);
  moduleOp->print(os);
  return text;
}

//===----------------------------------------------------------------------===//
// Kernel
//===----------------------------------------------------------------------===//

Kernel::Kernel(std::string name, KernelOptions options)
    : builder_(std::make_unique<KernelBuilder>(std::move(name), options)) {}
Kernel::~Kernel() = default;
Kernel::Kernel(Kernel &&) noexcept = default;
Kernel &Kernel::operator=(Kernel &&) noexcept = default;

const std::string &Kernel::name() const { return builder_->name(); }
const std::vector<int64_t> &Kernel::grid_size() const { return builder_->grid; }
int Kernel::num_warps() const { return builder_->numWarps(); }
std::string Kernel::ir() const { return builder_->ir(); }

TensorArg Kernel::input(std::string name, DType dtype, std::vector<int64_t> shape) {
  return tensorParameter(std::move(name), dtype, std::move(shape), false);
}

TensorArg Kernel::output(std::string name, DType dtype, std::vector<int64_t> shape) {
  return tensorParameter(std::move(name), dtype, std::move(shape), true);
}

TensorArg Kernel::input(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  return tensorParameter(std::move(name), dtype, std::move(shape), false, std::move(strides));
}

TensorArg Kernel::output(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  return tensorParameter(std::move(name), dtype, std::move(shape), true, std::move(strides));
}

namespace {

/// Whether `strides` are a contiguous tensor's with `shape`'s dims in some order: taken
/// from the innermost (smallest stride, unit dims anywhere), each is the product of the
/// dims inside it.
bool permutedContiguous(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides) {
  if (strides.size() != shape.size())
    return false;
  std::vector<size_t> order(shape.size());
  for (size_t d = 0; d < order.size(); ++d)
    order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t inner = 1;
  for (size_t d : order) {
    if (shape[d] != 1 && strides[d] != inner)
      return false;
    inner *= std::max<int64_t>(1, shape[d]);
  }
  return true;
}

} // namespace

TensorArg Kernel::tensorParameter(std::string name, DType dtype, std::vector<int64_t> shape,
                                  bool isOutput, std::vector<int64_t> strides) {
  KernelBuilder &kb = *builder_;
  if (shape.empty())
    kb.fail(fmt::format("kernel {}: tensor '{}' needs at least one dimension", kb.name(), name));
  for (int64_t d : shape)
    if (d < 0 || d > (int64_t(1) << 31) - 1)
      kb.fail(fmt::format("kernel {}: tensor '{}' has dimension {} outside [0, 2^31)", kb.name(),
                          name, d));
  Type elem = tile::toMlirType(&kb.context(), dtype);
  mlir::Value arg = kb.addParameter(name, tile::PointerType::get(&kb.context(), elem), isOutput, shape);
  TensorArg t;
  t.builder_ = &kb;
  t.index_ = cast<BlockArgument>(arg).getArgNumber();
  t.name_ = std::move(name);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  if (!strides.empty()) {
    if (!permutedContiguous(t.shape_, strides))
      kb.fail(fmt::format("kernel {}: tensor '{}' [{}] with strides [{}]: strides must be a contiguous tensor's "
                          "with the dims in some order",
                          kb.name(), t.name_, fmt::join(t.shape_, ", "), fmt::join(strides, ", ")));
    t.strides_ = std::move(strides);
    return t;
  }
  t.strides_.assign(t.shape_.size(), 1);
  for (size_t d = t.shape_.size() - 1; d > 0; --d)
    t.strides_[d - 1] = t.strides_[d] * std::max<int64_t>(1, t.shape_[d]);
  return t;
}

Value Kernel::scalar(std::string name, DType dtype) {
  KernelBuilder &kb = *builder_;
  return kb.wrap(kb.addParameter(name, tile::toMlirType(&kb.context(), dtype), false, {}));
}

void Kernel::grid(int64_t x, int64_t y, int64_t z) {
  for (int64_t g : {x, y, z})
    if (g < 1 || g > (int64_t(1) << 31) - 1)
      builder_->fail(fmt::format("kernel {}: grid ({}, {}, {}) must be positive and below 2^31",
                                 name(), x, y, z));
  if (y > 65535 || z > 65535)
    builder_->fail(fmt::format("kernel {}: grid y and z are limited to 65535, got ({}, {}, {})",
                               name(), x, y, z));
  builder_->grid = {x, y, z};
}

Value Kernel::program_id(int axis) {
  if (axis < 0 || axis > 2)
    builder_->fail(fmt::format("program_id: axis must be 0, 1 or 2, got {}", axis));
  KernelBuilder &kb = *builder_;
  return kb.wrap(kb.b().create<tile::ProgramIdOp>(kb.loc(), kb.b().getI32Type(), axis));
}

Value Kernel::num_programs(int axis) {
  if (axis < 0 || axis > 2)
    builder_->fail(fmt::format("num_programs: axis must be 0, 1 or 2, got {}", axis));
  KernelBuilder &kb = *builder_;
  return kb.wrap(kb.b().create<tile::NumProgramsOp>(kb.loc(), kb.b().getI32Type(), axis));
}

Value Kernel::constant(double value, DType dtype) {
  KernelBuilder &kb = *builder_;
  return kb.wrap(kb.materialize(Value(value), tile::toMlirType(&kb.context(), dtype)));
}

Value Kernel::arange(int64_t start, int64_t end) {
  KernelBuilder &kb = *builder_;
  if (!isPowerOfTwo(end - start))
    kb.fail(fmt::format("arange({}, {}): the length must be a power of two", start, end));
  auto type = RankedTensorType::get({end - start}, kb.b().getI32Type());
  return kb.wrap(kb.b().create<tile::ArangeOp>(kb.loc(), type, int32_t(start), int32_t(end)));
}

Value Kernel::full(std::vector<int64_t> shape, double value, DType dtype) {
  KernelBuilder &kb = *builder_;
  for (int64_t d : shape)
    if (!isPowerOfTwo(d))
      kb.fail(fmt::format("full: tile dimensions must be powers of two, got [{}]", fmt::join(shape, ", ")));
  return kb.wrap(kb.materialize(Value(value), tile::toMlirType(&kb.context(), dtype), shape));
}

std::vector<Value> Kernel::loop(const Value &lo, const Value &hi, const Value &step,
                                std::vector<Value> carried,
                                const std::function<std::vector<Value>(Value, std::vector<Value>)> &body) {
  KernelBuilder &kb = *builder_;
  OpBuilder &b = kb.b();
  SmallVector<mlir::Value> inits;
  for (const Value &v : carried) {
    if (v.is_literal())
      kb.fail("loop: carried values must be kernel values, not literals (use k.constant)");
    inits.push_back(kb.materialize(v, {}));
  }
  auto forOp = b.create<scf::ForOp>(kb.loc(), kb.index(lo, "loop lower bound"),
                                    kb.index(hi, "loop upper bound"), kb.index(step, "loop step"),
                                    inits);
  OpBuilder::InsertPoint saved = b.saveInsertionPoint();
  Block *bodyBlock = forOp.getBody();
  if (bodyBlock->mightHaveTerminator())
    b.setInsertionPoint(bodyBlock->getTerminator());
  else
    b.setInsertionPointToEnd(bodyBlock);
  // A misuse inside the body must leave the kernel as it was before the loop.
  try {
    std::vector<Value> args;
    for (mlir::Value a : forOp.getRegionIterArgs())
      args.push_back(kb.wrap(a));
    std::vector<Value> results = body(kb.wrap(forOp.getInductionVar()), args);
    if (results.size() != inits.size())
      kb.fail(fmt::format("loop: the body returned {} values for {} carried values", results.size(),
                          inits.size()));
    SmallVector<mlir::Value> yields;
    for (size_t i = 0; i < results.size(); ++i) {
      mlir::Value v = kb.materialize(results[i], elementType(inits[i]), shapeOf(inits[i]));
      if (v.getType() != inits[i].getType())
        kb.fail(fmt::format("loop: carried value {} enters as {} {} but the body returns {} {}", i,
                            typeString(inits[i].getType()), shapeString(inits[i].getType()),
                            typeString(v.getType()), shapeString(v.getType())));
      yields.push_back(v);
    }
    if (!inits.empty())
      b.create<scf::YieldOp>(kb.loc(), yields);
  } catch (...) {
    b.restoreInsertionPoint(saved);
    forOp.erase();
    throw;
  }
  b.restoreInsertionPoint(saved);
  std::vector<Value> out;
  for (mlir::Value r : forOp.getResults())
    out.push_back(kb.wrap(r));
  return out;
}

std::vector<Value> Kernel::if_else(const Value &cond, const std::function<std::vector<Value>()> &then_branch,
                                   const std::function<std::vector<Value>()> &else_branch) {
  KernelBuilder &kb = *builder_;
  OpBuilder &b = kb.b();
  mlir::Value c = kb.materialize(cond, b.getI1Type());
  if (c.getType() != b.getI1Type())
    kb.fail("if_else: the condition must be a bool scalar, got " + typeString(c.getType()) + " " +
            shapeString(c.getType()));
  // Result types are known only after the branches are built: build them in a
  // result-less if, then move them into the final one.
  auto draft = b.create<scf::IfOp>(kb.loc(), TypeRange{}, c, /*withElseRegion=*/true);
  OpBuilder::InsertPoint saved = b.saveInsertionPoint();
  auto build = [&](Block &block, const std::function<std::vector<Value>()> &fn) {
    b.setInsertionPoint(block.getTerminator());
    SmallVector<mlir::Value> values;
    for (const Value &v : fn()) {
      if (v.is_literal())
        kb.fail("if_else: branches must return kernel values, not literals (use k.constant)");
      values.push_back(kb.materialize(v, {}));
    }
    block.getTerminator()->erase();
    b.setInsertionPointToEnd(&block);
    b.create<scf::YieldOp>(kb.loc(), values);
    return values;
  };
  SmallVector<Type> types;
  try {
    auto thenValues = build(draft.getThenRegion().front(), then_branch);
    auto elseValues = build(draft.getElseRegion().front(), else_branch);
    if (thenValues.size() != elseValues.size())
      kb.fail("if_else: the branches return different numbers of values");
    for (size_t i = 0; i < thenValues.size(); ++i) {
      if (thenValues[i].getType() != elseValues[i].getType())
        kb.fail(fmt::format("if_else: value {} is {} {} in one branch and {} {} in the other", i,
                            typeString(thenValues[i].getType()), shapeString(thenValues[i].getType()),
                            typeString(elseValues[i].getType()), shapeString(elseValues[i].getType())));
      types.push_back(thenValues[i].getType());
    }
  } catch (...) {
    b.restoreInsertionPoint(saved);
    draft.erase();
    throw;
  }
  b.restoreInsertionPoint(saved);
  auto final = b.create<scf::IfOp>(kb.loc(), types, c, /*withElseRegion=*/true);
  final.getThenRegion().takeBody(draft.getThenRegion());
  final.getElseRegion().takeBody(draft.getElseRegion());
  draft.erase();
  std::vector<Value> out;
  for (mlir::Value r : final.getResults())
    out.push_back(kb.wrap(r));
  return out;
}

SharedBuffer Kernel::shared_buffer(int64_t slots) {
  if (slots < 1 || slots > 8)
    builder_->fail(fmt::format("kernel {}: shared_buffer needs 1 to 8 slots, got {}", name(), slots));
  return SharedBuffer{builder_->sharedBuffers++, slots};
}

void Kernel::wait_async(int pending) {
  if (pending < 0 || pending > 7)
    builder_->fail(fmt::format("kernel {}: wait_async takes 0 to 7 pending copies, got {}", name(), pending));
  builder_->b().create<tile::AsyncWaitOp>(builder_->loc(), pending);
}

mlir::Value KernelBuilder::mbarrierIndex(const Mbarriers &barriers, const Value &index, const char *op) {
  if (barriers.first < 0 || barriers.count < 1 ||
      barriers.first + barriers.count > static_cast<int64_t>(mbarrierArrivals.size()))
    fail(fmt::format("kernel {}: {}: the barriers do not come from this kernel's mbarriers()", name_, op));
  if (auto literal = index.literal(); literal && index.is_literal() && (*literal < 0 || *literal >= barriers.count))
    fail(fmt::format("kernel {}: {}: barrier {} is outside the {} barriers", name_, op, *literal, barriers.count));
  mlir::Value i = this->index(index, op);
  if (barriers.first == 0)
    return i;
  auto first = b().create<arith::ConstantOp>(loc(), b().getI32IntegerAttr(static_cast<int32_t>(barriers.first)));
  return b().create<arith::AddIOp>(loc(), i, first);
}

namespace {

/// A loop whose `producer` part (its ops, nested ones included) is marked for the
/// producer warpgroup; the `consumer` part follows it in each step.
std::vector<Value> splitLoop(Kernel &k, KernelBuilder &kb, const Value &lo, const Value &hi, const Value &step,
                             std::vector<Value> carried, const Kernel::LoopProducer &producer,
                             const Kernel::LoopConsumer &consumer, mlir::Operation *&loopOp) {
  return k.loop(lo, hi, step, std::move(carried), [&](Value i, std::vector<Value> c) {
    Block *body = kb.b().getInsertionBlock();
    loopOp = body->getParentOp();
    Operation *before = kb.b().getInsertionPoint() == body->begin() ? nullptr : &*std::prev(kb.b().getInsertionPoint());
    std::vector<Value> produced = producer(i);
    Block::iterator end = kb.b().getInsertionPoint();
    Operation *stop = end == body->end() ? nullptr : &*end;
    for (Operation *op = before ? before->getNextNode() : (body->empty() ? nullptr : &body->front()); op && op != stop;
         op = op->getNextNode())
      op->walk([&](Operation *inner) {
        auto copy = dyn_cast<tile::AsyncBlockLoadOp>(inner);
        if (!(copy && copy.isTma()) &&
            !isa<tile::MbarrierWaitOp, tile::MbarrierArriveOp, scf::IfOp, scf::ForOp, scf::YieldOp>(inner) &&
            !isMemoryEffectFree(inner))
          kb.fail(fmt::format("kernel {}: specialized_loop: the producer may issue TMA copies (load_tma), wait on and "
                              "arrive at mbarriers and compute, not {}",
                              k.name(), inner->getName().getStringRef().str()));
        inner->setAttr("tile.producer", kb.b().getUnitAttr());
      });
    return consumer(i, std::move(c), std::move(produced));
  });
}

} // namespace

std::vector<Value> Kernel::specialized_loop(const Value &lo, const Value &hi, const Value &step,
                                            std::vector<Value> carried, const LoopProducer &producer,
                                            const LoopConsumer &consumer) {
  KernelBuilder &kb = *builder_;
  if (kb.b().getInsertionBlock() != &kb.func().getBody().front())
    kb.fail(fmt::format("kernel {}: specialized_loop must sit at the kernel's top level (its producer warps skip "
                        "the rest of the kernel)",
                        name()));
  for (Operation &op : kb.func().getBody().front())
    if (op.hasAttr("tile.warp_specialize"))
      kb.fail(fmt::format("kernel {}: a kernel has one specialized_loop (one producer warpgroup)", name()));
  if (kb.numWarps() % 4 != 0)
    kb.fail(fmt::format("kernel {}: specialized_loop needs whole warpgroups of consumers (num_warps a multiple of "
                        "4), got {}",
                        name(), kb.numWarps()));
  Operation *loopOp = nullptr;
  std::vector<Value> results = splitLoop(
      *this, kb, lo, hi, step, std::move(carried), producer,
      [&](Value i, std::vector<Value> c, std::vector<Value> produced) {
        Block *outer = std::exchange(kb.specializedConsumer, kb.b().getInsertionBlock());
        std::vector<Value> next = consumer(i, std::move(c), std::move(produced));
        kb.specializedConsumer = outer;
        return next;
      },
      loopOp);
  loopOp->setAttr("tile.warp_specialize", kb.b().getUnitAttr());
  return results;
}

std::vector<Value> Kernel::specialized_steps(const Value &lo, const Value &hi, const Value &step,
                                             std::vector<Value> carried, const LoopProducer &producer,
                                             const LoopConsumer &consumer) {
  KernelBuilder &kb = *builder_;
  if (!kb.specializedConsumer || kb.b().getInsertionBlock() != kb.specializedConsumer)
    kb.fail(fmt::format("kernel {}: specialized_steps must sit directly in a specialized_loop's consumer", name()));
  Block *outer = std::exchange(kb.specializedConsumer, nullptr);  // no deeper nesting
  Operation *loopOp = nullptr;
  std::vector<Value> results = splitLoop(*this, kb, lo, hi, step, std::move(carried), producer, consumer, loopOp);
  kb.specializedConsumer = outer;
  return results;
}

Mbarriers Kernel::mbarriers(int64_t count, int64_t arrivals) {
  KernelBuilder &kb = *builder_;
  if (count < 1 || count > 64)
    kb.fail(fmt::format("kernel {}: mbarriers needs 1 to 64 barriers, got {}", name(), count));
  if (arrivals < 1 || arrivals > 32 * 32)
    kb.fail(fmt::format("kernel {}: mbarriers needs 1 to 1024 arrivals per phase, got {}", name(), arrivals));
  Mbarriers barriers{static_cast<int64_t>(kb.mbarrierArrivals.size()), count};
  kb.mbarrierArrivals.insert(kb.mbarrierArrivals.end(), static_cast<size_t>(count), arrivals);
  kb.func()->setAttr("tile.mbarriers", kb.b().getDenseI64ArrayAttr(kb.mbarrierArrivals));
  return barriers;
}

void Kernel::wait(const Mbarriers &barriers, const Value &index, const Value &phase) {
  KernelBuilder &kb = *builder_;
  mlir::Value i = kb.mbarrierIndex(barriers, index, "wait");
  kb.b().create<tile::MbarrierWaitOp>(kb.loc(), i, kb.index(phase, "wait"));
}

void Kernel::arrive(const Mbarriers &barriers, const Value &index) {
  KernelBuilder &kb = *builder_;
  kb.b().create<tile::MbarrierArriveOp>(kb.loc(), kb.mbarrierIndex(barriers, index, "arrive"));
}

void Kernel::turn_wait() {
  KernelBuilder &kb = *builder_;
  kb.b().create<tile::TurnWaitOp>(kb.loc());
}

void Kernel::turn_pass() {
  KernelBuilder &kb = *builder_;
  kb.b().create<tile::TurnPassOp>(kb.loc());
}

void Kernel::when(const Value &cond, const std::function<void()> &body) {
  if_else(cond, [&] { body(); return std::vector<Value>{}; }, [] { return std::vector<Value>{}; });
}

} // namespace tokamax::dsl
