//===- TileDialect.td - The tile dialect ------------------------*- tablegen -*-===//
//
// The tile dialect is what the C++ DSL builds: SSA tiles with static shapes (builtin
// ranked tensors of scalars or of !tile.ptr), one program instance per grid point.
// Elementwise arithmetic and math come from the upstream arith and math dialects applied
// to tensors; control flow from scf. Layout encodings are attached by the compiler.
//
//===----------------------------------------------------------------------===//
#ifndef TOKAMAX_TILE_DIALECT
#define TOKAMAX_TILE_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Tile_Dialect : Dialect {
  let name = "tile";
  let cppNamespace = "::tokamax::tile";
  let summary = "Tile-level GPU kernels built by the Tokamax C++ DSL";
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 0;
}

class Tile_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Tile_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

class Tile_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Tile_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

class Tile_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tile_Dialect, mnemonic, traits>;

#endif // TOKAMAX_TILE_DIALECT
