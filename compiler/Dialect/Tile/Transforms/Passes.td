//===- Passes.td - Tile dialect passes -------------------------*- tablegen -*-===//
#ifndef TOKAMAX_TILE_PASSES
#define TOKAMAX_TILE_PASSES

include "mlir/Pass/PassBase.td"

def TileAssignLayouts : Pass<"tile-assign-layouts", "mlir::ModuleOp"> {
  let summary = "Give every tile a distributed layout";
  let description = [{
    Anchors: memory accesses get the default blocked layout of their tile (each thread
    issues 16-byte, coalesced accesses along the fastest dimension). Layouts then flow
    forward: elementwise results take their first laid-out operand's layout, reductions
    give slice layouts, expand_dims of a slice gives back its parent. Operands that
    disagree get a tile.convert_layout, which canonicalization folds into splats and
    aranges, so conversions through shared memory remain only where data must move.
  }];
  let options = [Option<"numWarps", "num-warps", "unsigned", "4",
                        "warps per program when the kernel does not say">];
  let dependentDialects = ["::tokamax::tile::TileDialect"];
}

def TileRemoveLayoutConversions : Pass<"tile-remove-layout-conversions", "mlir::ModuleOp"> {
  let summary = "Remove tile.convert_layout operations that need not move data";
  let description = [{
    Runs after tile-assign-layouts. Drops conversions to the layout a tile already has
    and collapses chains (a round trip disappears). Builds a converted value in the
    wanted layout instead when fewer conversions remain (or as many, moving fewer
    bytes): splats, aranges and splat constants are recreated there, and elementwise
    ops (arith, math, tile.cast, tile.addptr) are cloned over operands built the same
    way, so the conversion moves backward through them onto tiles that are already in
    that layout or must move anyway. Conversions of one value to one layout share a
    dominating one. Conversions into or out of layouts fixed by tile.dot (operands,
    result), tile.tma_dot and tile.cp_async_dot (accumulators) and tile.reduce are left
    alone except for exact no-ops; a replacement always has the type of the value it
    replaces.
  }];
  let dependentDialects = ["::tokamax::tile::TileDialect", "::mlir::arith::ArithDialect"];
}

def TileAllocateShared : Pass<"tile-allocate-shared", "mlir::ModuleOp"> {
  let summary = "Size the shared-memory scratch of cross-warp reductions and layout conversions";
  let description = [{
    Scratch is transient (live only inside one operation), so users share offset 0 and
    the kernel's static shared memory is the largest single need, recorded as
    `tile.shared_bytes` on the kernel. Barriers keep the users apart. The B operand
    conversion of a tile.dot goes after the A operand's (`tile.scratch_offset`), so both
    operands of a dot are staged together.
  }];
}

def TileInsertBarriers : Pass<"tile-insert-barriers", "mlir::ModuleOp"> {
  let summary = "Separate consecutive shared-memory scratch users with barriers";
  let description = [{
    Every operation that uses scratch reads it after its own internal barrier; the next
    user must not overwrite it before all threads have read, so a tile.barrier goes before
    every scratch user whose region overlaps one that may still be read on some path to it
    (in practice: every user but the first in straight-line code, every user inside a
    loop, except users at disjoint offsets such as a dot's two operand conversions).
  }];
}

def ConvertTileToLLVM : Pass<"convert-tile-to-llvm", "mlir::ModuleOp"> {
  let summary = "Lower laid-out tile kernels to LLVM and NVVM, one thread's registers per tile";
  let options = [Option<"arch", "arch", "std::string", "\"sm_90a\"", "target GPU architecture">];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect",
                           "::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect"];
}

#endif // TOKAMAX_TILE_PASSES
