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

// The accumulator layout of the warp-level tensor-core instructions mma.sync.m16n8k16
// (bf16, f16) and mma.sync.m16n8k8 (tf32), sm_80 and newer: the result of tile.dot.
def Tile_MmaLayoutAttr : Tile_Attr<"MmaLayout", "mma"> {
  let summary = "mma.sync accumulator layout: 16x8 tiles per warp, warps tiled over the block";
  let description = [{
    One instruction computes a 16x8 f32 tile per warp. Lane l = 4 * g + t (g = groupID =
    l / 4, t = threadID_in_group = l % 4) holds four registers (PTX ISA, "Matrix
    Fragments for mma.m16n8k16"):

        cols:    0 1   2 3   4 5   6 7
        row 0  [ T0  | T1  | T2  | T3  ]     c0 c1 at (g,     2t + {0, 1})
        row 1  [ T4  | T5  | T6  | T7  ]     c2 c3 at (g + 8, 2t + {0, 1})
         ...
        row 7  [ T28 | T29 | T30 | T31 ]
        row 8  [ T0  | T1  | T2  | T3  ]     <- c2, c3 of the same lanes
         ...
        row 15 [ T28 | T29 | T30 | T31 ]

    `warpsPerCTA = [WM, WN]` places warp w at block (w / WN, w % WN) of a 16*WM x 8*WN
    grid, which then repeats over the tile. A 64x32 tile with warpsPerCTA = [2, 2]:

              cols 0..7   8..15   16..23  24..31
        rows  0..15  [ W0 | W1 |  W0 |  W1 ]    each warp: 2 x 2 instruction tiles,
        rows 16..31  [ W2 | W3 |  W2 |  W3 ]    16 f32 registers per thread
        rows 32..47  [ W0 | W1 |  W0 |  W1 ]
        rows 48..63  [ W2 | W3 |  W2 |  W3 ]

    Registers: repeats (N fastest) outer, then c0..c3. Tiles smaller than the warp grid
    wrap around (the extra threads hold replicas), like blocked layouts.
  }];
  let parameters = (ins ArrayRefParameter<"unsigned">:$warpsPerCTA);
  let assemblyFormat = "`<` `{` `warpsPerCTA` `=` `[` $warpsPerCTA `]` `}` `>`";
  let genVerifyDecl = 1;
}

// An operand of tile.dot as the mma.sync instructions read it from registers.
def Tile_DotOperandLayoutAttr : Tile_Attr<"DotOperandLayout", "dot_op"> {
  let summary = "operand A (opIdx 0) or B (opIdx 1) of mma.sync with accumulator layout `parent`";
  let description = [{
    `kWidth` consecutive K elements share a 32-bit register: 2 for bf16/f16 (m16n8k16),
    1 for f32 read as tf32 (m16n8k8), 4 for fp8 (m16n8k32, sm_89 and newer). For
    kWidth = 2, one instruction's A (16x16) and B (16x8), lane l = 4 * g + t:

        A (M x K):   k: 0..7                     8..15
        rows 0..7    a0 a1 at (g, 2t + {0, 1})   a4 a5 at (g, 2t + 8 + {0, 1})
        rows 8..15   a2 a3 at (g + 8, 2t + ..)   a6 a7 at (g + 8, 2t + 8 + ..)

        B (K x N):   n: 0..7
        k 0..7       b0 b1 at (2t + {0, 1}, g)
        k 8..15      b2 b3 at (2t + 8 + {0, 1}, g)

    For kWidth = 1 (tf32, K = 8 per instruction): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
    a3 (g + 8, t + 4); b0 (t, g), b1 (t + 4, g). For kWidth = 4 (fp8, K = 32): a0
    (g, 4t + {0..3}), a1 (g + 8, ..), a2 (g, 4t + 16 + {0..3}), a3 (g + 8, ..); b0
    (4t + {0..3}, g), b1 (4t + 16 + {0..3}, g).

    A is split over the parent's WM warps along M and replicated over its WN warps; B
    over WN along N, replicated over WM. Instruction tiles repeat along M (N) as in the
    parent and along K to cover the tile. The lowering fills these registers with
    ldmatrix from a swizzled shared-memory copy of the operand when it can.
  }];
  let parameters = (ins "unsigned":$opIdx, "::mlir::Attribute":$parent, "unsigned":$kWidth);
  let assemblyFormat = "`<` `{` struct(params) `}` `>`";
  let genVerifyDecl = 1;
}

// A 2-D tile held in shared memory rather than registers: what tile.async_block_load
// writes (rows of the source tensor, 16-byte chunks XOR-swizzled by row as tile.dot's
// operand staging) and what tile.trans of such a tile names (the same bytes, the other
// dimension contiguous). `contiguousDim` is the tile dimension along a stored row. Its
// consumers read it with ldmatrix (a dot operand) or element loads (anything else).
def Tile_SharedLayoutAttr : Tile_Attr<"SharedLayout", "shared"> {
  let summary = "a 2-D tile in shared memory, stored rows along `contiguousDim`";
  let parameters = (ins "unsigned":$contiguousDim);
  let assemblyFormat = "`<` `{` struct(params) `}` `>`";
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

// What tile.tma_store does with the elements of the tensor it meets.
def Tile_TmaStoreKind : I32EnumAttr<"TmaStoreKind", "tile.tma_store: overwrite or add", [
    I32EnumAttrCase<"Store", 0, "store">, I32EnumAttrCase<"Add", 1, "add">]> {
  let cppNamespace = "::tokamax::tile";
  let genSpecializedAttr = 0;
}
def Tile_TmaStoreKindAttr : EnumAttr<Tile_Dialect, Tile_TmaStoreKind, "tma_store_kind">;

#endif // TOKAMAX_TILE_TYPES
