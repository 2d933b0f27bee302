//===- TileTypes.td - Types and layout attributes of the tile dialect -*- tablegen -*-===//
#ifndef TOKAMAX_TILE_TYPES
#define TOKAMAX_TILE_TYPES

include "TileDialect.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Tile_PtrType : Tile_Type<"Pointer", "ptr"> {
  let summary = "pointer to global memory holding elements of one type";
  let parameters = (ins "::mlir::Type":$pointeeType);
  let assemblyFormat = "`<` $pointeeType `>`";
}

def Tile_Float : AnyTypeOf<[F8E4M3FN, F8E5M2, F16, BF16, F32, F64]>;
def Tile_Int : AnyTypeOf<[I1, I8, I16, I32, I64]>;
def Tile_Scalar : AnyTypeOf<[Tile_Float, Tile_Int, Index]>;
def Tile_ScalarTensor : RankedTensorOf<[Tile_Float, Tile_Int]>;
def Tile_PtrTensor : RankedTensorOf<[Tile_PtrType]>;
def Tile_IntTensor : RankedTensorOf<[Tile_Int]>;
def Tile_BoolTensor : RankedTensorOf<[I1]>;
def Tile_AnyTensor : RankedTensorOf<[Tile_Float, Tile_Int, Tile_PtrType]>;
def Tile_Ptrs : AnyTypeOf<[Tile_PtrType, Tile_PtrTensor]>;
def Tile_Value : AnyTypeOf<[Tile_Scalar, Tile_PtrType, Tile_AnyTensor]>;
def Tile_Numeric : AnyTypeOf<[Tile_Float, Tile_Int, Tile_ScalarTensor]>;

// Distributed layouts. A blocked layout splits each dimension of a tile over registers
// (sizePerThread), lanes (threadsPerWarp) and warps (warpsPerCTA); `order` lists the
// dimensions fastest first. A 4x256 bf16 tile over 4 warps:
//
//   sizePerThread = [1, 8]   each thread owns 8 contiguous elements (one 16-byte access)
//   threadsPerWarp = [1, 32] a warp spans 256 columns of one row
//   warpsPerCTA    = [4, 1]  one row per warp
//
// Shapes and layout parameters are powers of two; a layout larger than its tile wraps
// around (threads then hold replicas).
def Tile_BlockedLayoutAttr : Tile_Attr<"BlockedLayout", "blocked"> {
  let summary = "registers x lanes x warps split of each tile dimension";
  let parameters = (ins ArrayRefParameter<"unsigned">:$sizePerThread,
                        ArrayRefParameter<"unsigned">:$threadsPerWarp,
                        ArrayRefParameter<"unsigned">:$warpsPerCTA,
                        ArrayRefParameter<"unsigned">:$order);
  let assemblyFormat = [{
    `<` `{` `sizePerThread` `=` `[` $sizePerThread `]` `,` `threadsPerWarp` `=` `[` $threadsPerWarp `]`
    `,` `warpsPerCTA` `=` `[` $warpsPerCTA `]` `,` `order` `=` `[` $order `]` `}` `>`
  }];
  let genVerifyDecl = 1;
}

// The layout of a reduction's result: the parent layout with dimension `dim` removed.
// Threads that differed only along `dim` hold the same values.
def Tile_SliceLayoutAttr : Tile_Attr<"SliceLayout", "slice"> {
  let summary = "a distributed layout with one dimension reduced away";
  let parameters = (ins "unsigned":$dim, "::mlir::Attribute":$parent);
  let assemblyFormat = "`<` `{` struct(params) `}` `>`";
  let genVerifyDecl = 1;
}

def Tile_ReduceKind : I32EnumAttr<"ReduceKind", "reduction combiner", [
    I32EnumAttrCase<"Sum", 0, "sum">, I32EnumAttrCase<"Max", 1, "max">,
    I32EnumAttrCase<"Min", 2, "min">, I32EnumAttrCase<"Argmax", 3, "argmax">]> {
  let cppNamespace = "::tokamax::tile";
  let genSpecializedAttr = 0;
}
def Tile_ReduceKindAttr : EnumAttr<Tile_Dialect, Tile_ReduceKind, "reduce_kind">;

def Tile_AtomicKind : I32EnumAttr<"AtomicKind", "atomic read-modify-write", [
    I32EnumAttrCase<"Add", 0, "add">, I32EnumAttrCase<"Max", 1, "max">]> {
  let cppNamespace = "::tokamax::tile";
  let genSpecializedAttr = 0;
}
def Tile_AtomicKindAttr : EnumAttr<Tile_Dialect, Tile_AtomicKind, "atomic_kind">;

#endif // TOKAMAX_TILE_TYPES
