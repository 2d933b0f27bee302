//===- Interpreter.cpp - Run tile kernels on the CPU ---------------------------===//
//
// Parses the kernel's tile IR, checks the host arguments against the parameters, then
// runs every program instance of the grid in order (x fastest), one at a time, so atomics
// apply sequentially. Control flow (scf.for / scf.if / scf.while) is interpreted here;
// the operations themselves by the evaluators in Eval*.cpp.
//
//===----------------------------------------------------------------------===//
#include "compiler/Interpreter/HostTile.h"

#include "compiler/Dialect/Tile/IR/LayoutUtils.h"
#include "compiler/lib/Context.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tokamax {

using namespace mlir;

namespace interp {

namespace {

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

} // namespace

Interpreter::Interpreter(func::FuncOp func, std::span<HostArg> hostArgs) : func(func) {
  unsigned n = func.getNumArguments();
  if (hostArgs.size() != n)
    throw Error(fmt::format("interpreter: kernel {} takes {} arguments, got {}",
                            func.getName().str(), n, hostArgs.size()));
  for (unsigned a = 0; a < n; ++a) {
    ArgInfo info;
    if (auto name = func.getArgAttrOfType<StringAttr>(a, "tile.name"))
      info.name = name.str();
    else
      info.name = "arg" + std::to_string(a);
    Type type = func.getArgument(a).getType();
    auto ptr = dyn_cast<tile::PointerType>(type);
    info.isTensor = static_cast<bool>(ptr);
    info.elem = ptr ? ptr.getPointeeType() : type;
    auto dtype = tile::fromMlirType(info.elem);
    if (info.isTensor) {
      if (!dtype)
        throw Error(fmt::format("interpreter: parameter '{}' has unsupported element type {}",
                                info.name, typeName(info.elem)));
      info.dtype = *dtype;
      size_t elemBytes = dtype_size(*dtype);
      const HostArg &host = hostArgs[a];
      if (auto shape = func.getArgAttrOfType<DenseI64ArrayAttr>(a, "tile.shape")) {
        int64_t numel = 1;
        for (int64_t d : shape.asArrayRef())
          numel *= d;
        if (!host.shape.empty() && !std::equal(host.shape.begin(), host.shape.end(), shape.asArrayRef().begin(),
                                               shape.asArrayRef().end()))
          throw Error(fmt::format("interpreter: argument '{}' has shape {}, expected {}", info.name,
                                  shapeText(ArrayRef<int64_t>(host.shape.data(), host.shape.size())), shapeText(shape.asArrayRef())));
        size_t expected = static_cast<size_t>(numel) * elemBytes;
        if (host.bytes != expected)
          throw Error(fmt::format(
              "interpreter: argument '{}' ({} {}) needs {} bytes, got {}", info.name,
              dtype_name(*dtype), shapeText(shape.asArrayRef()), expected, host.bytes));
        info.numel = numel;
      } else {
        info.numel = static_cast<int64_t>(host.bytes / elemBytes);
      }
      if (!host.data && info.numel > 0)
        throw Error(fmt::format("interpreter: argument '{}' has no data", info.name));
      info.data = static_cast<char *>(host.data);
    }
    args.push_back(std::move(info));
  }
  if (auto g = func->getAttrOfType<DenseI64ArrayAttr>(tile::kGridAttr))
    for (int64_t d = 0; d < g.size() && d < 3; ++d)
      grid[d] = g[d];
  scalars.reserve(n);
  for (unsigned a = 0; a < n; ++a) {
    if (args[a].isTensor) {
      HostTile p = HostTile::make(func.getArgument(a).getType(), {});
      p.arg[0] = static_cast<int32_t>(a);
      scalars.push_back(std::move(p));
    } else {
      HostTile s = HostTile::make(args[a].elem, {});
      s.setFromDouble(0, hostArgs[a].scalar);
      scalars.push_back(std::move(s));
    }
  }
}

/// The first operation of the kernel that the interpreter cannot run, or null.
static Operation *firstUnsupported(func::FuncOp func) {
  Operation *bad = nullptr;
  func.walk([&](Operation *op) {
    if (bad || op == func.getOperation())
      return;
    bool ok = (op->getDialect() && isa<tile::TileDialect>(op->getDialect())) ||
              isa<scf::ForOp, scf::IfOp, scf::WhileOp, scf::YieldOp, scf::ConditionOp,
                  func::ReturnOp>(op) ||
              supportsElementwise(op) || supportsMath(op);
    if (!ok)
      bad = op;
  });
  return bad;
}

void Interpreter::run() {
  // Reject unsupported operations up front, even in branches that never run.
  if (Operation *bad = firstUnsupported(func))
    throw Error("interpreter: unsupported operation " + bad->getName().getStringRef().str());
  Block &body = func.getBody().front();
  // Program instances run one after another, x fastest; TOKAMAX_INTERPRETER_ORDER=reverse
  // runs them last to first. A GPU runs them in any order and at once, so a kernel whose
  // results change with the order has programs that read each other's writes: a race.
  // A kernel with tile.semaphore_wait orders its programs itself (each waits for those
  // it reads from), and one program at a time can only follow that order where it is
  // the grid order: such kernels always run first to last.
  const char *order = std::getenv("TOKAMAX_INTERPRETER_ORDER");
  const bool waits = func.walk([](tile::SemaphoreWaitOp) { return WalkResult::interrupt(); }).wasInterrupted();
  const bool reverse = !waits && order && std::string_view(order) == "reverse";
  const int64_t programs = grid[0] * grid[1] * grid[2];
  for (int64_t i = 0; i < programs; ++i) {
    const int64_t linear = reverse ? programs - 1 - i : i;
    pid = {linear % grid[0], linear / grid[0] % grid[1], linear / (grid[0] * grid[1])};
    env.clear();
    for (unsigned a = 0; a < body.getNumArguments(); ++a)
      set(body.getArgument(a), scalars[a]);
    runBlock(body);
  }
}

const HostTile &Interpreter::get(Value v) const {
  auto it = env.find(v);
  if (it == env.end())
    throw Error("interpreter: a value is used before it is defined");
  return it->second;
}

std::string Interpreter::where() const {
  return fmt::format("program instance ({}, {}, {})", pid[0], pid[1], pid[2]);
}

void Interpreter::checkAccess(const char *op, int32_t arg, int64_t offset) const {
  const ArgInfo &a = args[arg];
  if (!a.isTensor)
    throw Error(fmt::format("interpreter: {} through scalar parameter '{}'", op, a.name));
  if (offset < 0 || offset >= a.numel)
    throw Error(fmt::format("interpreter: {} accesses parameter '{}' at element offset {}, "
                            "outside its {} elements (an unmasked out-of-bounds access) in {}",
                            op, a.name, offset, a.numel, where()));
}

void Interpreter::readElem(int32_t arg, int64_t offset, HostTile &dst, size_t k) const {
  const ArgInfo &a = args[arg];
  const char *p = a.data + offset * static_cast<int64_t>(dtype_size(a.dtype));
  switch (a.dtype) {
  case DType::I8: dst.i[k] = static_cast<int8_t>(*p); return;
  case DType::Bool: dst.i[k] = *p != 0; return;
  case DType::I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    dst.i[k] = v;
    return;
  }
  case DType::I64: std::memcpy(&dst.i[k], p, 8); return;
  default: dst.f[k] = load_as_double(a.dtype, p); return;
  }
}

void Interpreter::writeElem(int32_t arg, int64_t offset, const HostTile &src, size_t k) {
  const ArgInfo &a = args[arg];
  char *p = a.data + offset * static_cast<int64_t>(dtype_size(a.dtype));
  switch (a.dtype) {
  case DType::I8: *p = static_cast<char>(static_cast<int8_t>(src.i[k])); return;
  case DType::Bool: *p = src.i[k] != 0; return;
  case DType::I32: {
    int32_t v = static_cast<int32_t>(src.i[k]);
    std::memcpy(p, &v, 4);
    return;
  }
  case DType::I64: std::memcpy(p, &src.i[k], 8); return;
  default: store_from_double(a.dtype, p, src.f[k]); return;
  }
}

std::vector<HostTile> Interpreter::runBlock(Block &block) {
  for (Operation &op : block) {
    if (op.hasTrait<OpTrait::IsTerminator>()) {
      std::vector<HostTile> results;
      results.reserve(op.getNumOperands());
      for (Value v : op.getOperands())
        results.push_back(get(v));
      return results;
    }
    exec(&op);
  }
  return {};
}

void Interpreter::exec(Operation *op) {
  if (auto forOp = dyn_cast<scf::ForOp>(op))
    return execFor(forOp);
  if (auto ifOp = dyn_cast<scf::IfOp>(op))
    return execIf(ifOp);
  if (auto whileOp = dyn_cast<scf::WhileOp>(op))
    return execWhile(whileOp);
  if (evalElementwise(*this, op) || evalMath(*this, op) || evalMemory(*this, op) ||
      evalShape(*this, op))
    return;
  throw Error("interpreter: unsupported operation " + op->getName().getStringRef().str());
}

void Interpreter::execFor(scf::ForOp op) {
  const HostTile &lbT = get(op.getLowerBound()), &ubT = get(op.getUpperBound()),
                 &stepT = get(op.getStep());
  unsigned bits = lbT.bits();
  bool isUnsigned = static_cast<bool>(op.getUnsignedCmp());
  int64_t lb = lbT.i[0], ub = ubT.i[0], step = stepT.i[0];
  if (step == 0 || (step < 0 && !isUnsigned))
    throw Error(fmt::format("interpreter: scf.for step must be positive, got {}", step));
  std::vector<HostTile> carried;
  for (Value init : op.getInitArgs())
    carried.push_back(get(init));
  Block &body = *op.getBody();
  Type ivType = op.getInductionVar().getType();
  auto less = [&](int64_t a, int64_t b) {
    return isUnsigned ? asUnsigned(bits, a) < asUnsigned(bits, b) : a < b;
  };
  for (int64_t iv = lb; less(iv, ub);) {
    HostTile ivTile = HostTile::make(ivType, {});
    ivTile.i[0] = iv;
    set(body.getArgument(0), std::move(ivTile));
    for (size_t j = 0; j < carried.size(); ++j)
      set(body.getArgument(j + 1), std::move(carried[j]));
    carried = runBlock(body);
    int64_t next = wrapInt(bits, static_cast<int64_t>(static_cast<uint64_t>(iv) +
                                                      static_cast<uint64_t>(step)));
    if (!less(iv, next)) // the induction variable wrapped around
      break;
    iv = next;
  }
  for (size_t j = 0; j < carried.size(); ++j)
    set(op.getResult(j), std::move(carried[j]));
}

void Interpreter::execIf(scf::IfOp op) {
  bool cond = get(op.getCondition()).truth(0);
  Region &region = cond ? op.getThenRegion() : op.getElseRegion();
  if (region.empty())
    return;
  std::vector<HostTile> results = runBlock(region.front());
  for (size_t j = 0; j < results.size() && j < op.getNumResults(); ++j)
    set(op.getResult(j), std::move(results[j]));
}

void Interpreter::execWhile(scf::WhileOp op) {
  std::vector<HostTile> values;
  for (Value init : op.getInits())
    values.push_back(get(init));
  Block &before = op.getBefore().front(), &after = op.getAfter().front();
  while (true) {
    for (size_t j = 0; j < values.size(); ++j)
      set(before.getArgument(j), std::move(values[j]));
    std::vector<HostTile> cond = runBlock(before); // condition, forwarded values...
    bool go = cond.at(0).truth(0);
    values.assign(std::make_move_iterator(cond.begin() + 1), std::make_move_iterator(cond.end()));
    if (!go)
      break;
    for (size_t j = 0; j < values.size(); ++j)
      set(after.getArgument(j), std::move(values[j]));
    values = runBlock(after);
  }
  for (size_t j = 0; j < values.size(); ++j)
    set(op.getResult(j), std::move(values[j]));
}

} // namespace interp

void interpret_ir(const std::string &ir, std::span<HostArg> args) {
  auto ctx = compiler_detail::makeContext();
  compiler_detail::DiagnosticCollector diagnostics(*ctx);
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(ir, ParserConfig(ctx.get()));
  if (!module || failed(verify(*module)))
    throw Error("interpreter: tile IR does not parse or verify:\n" + diagnostics.text());
  func::FuncOp kernel;
  for (func::FuncOp f : module->getOps<func::FuncOp>())
    if (!kernel || f->hasAttr(tile::kKernelAttr))
      kernel = f;
  if (!kernel || kernel.isExternal())
    throw Error("interpreter: the IR has no kernel function");
  interp::Interpreter(kernel, args).run();
}

bool interpreter_requested() {
  const char *v = std::getenv("TOKAMAX_INTERPRET");
  return v && std::strcmp(v, "1") == 0;
}

} // namespace tokamax
