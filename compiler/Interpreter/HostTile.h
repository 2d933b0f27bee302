//===- HostTile.h - Values and state of the CPU interpreter -------*- C++ -*-===//
//
// A host tile is an element type, a static shape (empty for scalars) and row-major
// storage: doubles for floats (always holding a value of the element type, because every
// float operation rounds its result), int64 for integers/bool/index (wrapped to the bit
// width: sign-extended, i1 as 0/1), and (argument, element offset) pairs for pointers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "compiler/Dialect/Tile/IR/DTypes.h"
#include "compiler/Dialect/Tile/IR/TileDialect.h"

#include <tokamax/compiler/Interpreter.h>
#include <tokamax/runtime/Error.h>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tokamax::interp {

enum class Kind : uint8_t { Float, Int, Ptr };

/// The storage kind of an element type (a scalar type or a !tile.ptr).
Kind kindOf(mlir::Type elem);
/// Bit width of an integer or index element type (index is 64).
unsigned intBits(mlir::Type elem);
/// Wraps `v` to `bits`: sign-extended for bits > 1, 0/1 for i1.
int64_t wrapInt(unsigned bits, int64_t v);
/// The signed value of a stored integer (i1 true is -1, as arith's signed ops see it).
int64_t asSigned(unsigned bits, int64_t v);
/// The unsigned value of a stored integer.
uint64_t asUnsigned(unsigned bits, int64_t v);
/// Rounds an arithmetic result to a float element type the way the GPU does: f64 stays,
/// everything narrower goes through f32 (as the GPU computes half types in f32).
double roundFloat(mlir::Type elem, double x);
/// Rounds `x` to a float element type in one step (casts).
double castFloat(mlir::Type elem, double x);
/// Float -> integer per tile.cast: i1 is x != 0, else clamp to the range and truncate
/// toward zero; NaN gives 0.
int64_t floatToInt(unsigned bits, double x);
/// MLIR type text, for messages.
std::string typeName(mlir::Type type);

struct HostTile {
  mlir::Type elem; ///< scalar element type or !tile.ptr<...>
  Kind kind = Kind::Float;
  std::vector<int64_t> shape; ///< empty for scalars
  std::vector<double> f;      ///< Kind::Float
  std::vector<int64_t> i;     ///< Kind::Int values; Kind::Ptr element offsets
  std::vector<int32_t> arg;   ///< Kind::Ptr argument indices

  /// A zero-filled tile of `type` (a ranked tensor or a scalar type).
  static HostTile of(mlir::Type type);
  /// A zero-filled tile of element type `elem` and `shape`.
  static HostTile make(mlir::Type elem, std::vector<int64_t> shape);

  size_t numel() const;
  bool isScalar() const { return shape.empty(); }
  /// Index of element `k` of an operand that may be a scalar broadcast over a tile.
  size_t at(size_t k) const { return numel() == 1 ? 0 : k; }
  unsigned bits() const { return intBits(elem); }
  /// Element k as a double (ints by their signed value, i1 as 0/1).
  double asDouble(size_t k) const;
  /// Element k as int64 (floats truncate; i1 as 0/1).
  int64_t asInt(size_t k) const;
  bool truth(size_t k) const { return kind == Kind::Float ? f[k] != 0 : i[k] != 0; }
  /// Copies element `from` of `src` (same kind) into element `to`.
  void copyElem(size_t to, const HostTile &src, size_t from);
  /// Sets element k from a double, converting to the element type (tile.cast rules).
  void setFromDouble(size_t k, double v);
};

/// Row-major strides of a shape.
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape);
/// The shape of a tensor type, or {} for a scalar type.
std::vector<int64_t> shapeOf(mlir::Type type);

/// One kernel argument as the interpreter sees it.
struct ArgInfo {
  std::string name;
  bool isTensor = false;
  mlir::Type elem; ///< pointee type for tensors, the scalar type otherwise
  DType dtype = DType::F32;
  char *data = nullptr;
  int64_t numel = 0;
};

/// Runs the program instances of one kernel.
class Interpreter {
public:
  Interpreter(mlir::func::FuncOp func, std::span<HostArg> args);
  void run();

  // Values.
  const HostTile &get(mlir::Value v) const;
  void set(mlir::Value v, HostTile tile) { env[v] = std::move(tile); }

  // Memory: element `offset` of argument `arg`, bounds checked (`op` names the access).
  void checkAccess(const char *op, int32_t arg, int64_t offset) const;
  /// Reads into element k of `dst` (whose kind matches the argument's element type).
  void readElem(int32_t arg, int64_t offset, HostTile &dst, size_t k) const;
  /// Writes element k of `src`.
  void writeElem(int32_t arg, int64_t offset, const HostTile &src, size_t k);
  const ArgInfo &argInfo(int32_t arg) const { return args[arg]; }
  /// "program instance (x, y, z)", for messages.
  std::string where() const;

  std::array<int64_t, 3> grid{1, 1, 1};
  std::array<int64_t, 3> pid{0, 0, 0};

private:
  /// Executes the operations of a block; returns the operands of its terminator.
  std::vector<HostTile> runBlock(mlir::Block &block);
  void exec(mlir::Operation *op);
  void execFor(mlir::scf::ForOp op);
  void execIf(mlir::scf::IfOp op);
  void execWhile(mlir::scf::WhileOp op);

  mlir::func::FuncOp func;
  std::vector<ArgInfo> args;
  std::vector<HostTile> scalars; ///< the value of each parameter (pointers for tensors)
  llvm::DenseMap<mlir::Value, HostTile> env;
};

// Evaluators of each family of operations; each returns false when `op` is not theirs.
bool evalElementwise(Interpreter &in, mlir::Operation *op);
bool evalMath(Interpreter &in, mlir::Operation *op);
bool evalMemory(Interpreter &in, mlir::Operation *op);
bool evalShape(Interpreter &in, mlir::Operation *op);
/// Whether the evaluators above handle `op` (checked for the whole kernel before running).
bool supportsElementwise(mlir::Operation *op);
bool supportsMath(mlir::Operation *op);

} // namespace tokamax::interp
