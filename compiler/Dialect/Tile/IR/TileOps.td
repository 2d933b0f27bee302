//===- TileOps.td - Operations of the tile dialect -------------*- tablegen -*-===//
#ifndef TOKAMAX_TILE_OPS
#define TOKAMAX_TILE_OPS

include "TileTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Program instance
//===----------------------------------------------------------------------===//

def Tile_ProgramIdOp : Tile_Op<"program_id", [Pure]> {
  let summary = "index of this program instance along a grid axis";
  let arguments = (ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<2>]>:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
}

def Tile_NumProgramsOp : Tile_Op<"num_programs", [Pure]> {
  let summary = "number of program instances along a grid axis";
  let arguments = (ins ConfinedAttr<I32Attr, [IntMinValue<0>, IntMaxValue<2>]>:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Tile construction
//===----------------------------------------------------------------------===//

def Tile_ArangeOp : Tile_Op<"arange", [Pure]> {
  let summary = "the 1-D tile [start, start + 1, ..., end - 1]";
  let arguments = (ins I32Attr:$start, I32Attr:$end);
  let results = (outs RankedTensorOf<[I32]>:$result);
  let assemblyFormat = "$start `to` $end attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_SplatOp : Tile_Op<"splat", [Pure]> {
  let summary = "a tile with every element equal to a scalar";
  let arguments = (ins AnyTypeOf<[Tile_Scalar, Tile_PtrType]>:$value);
  let results = (outs Tile_AnyTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($value) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def Tile_AddPtrOp : Tile_Op<"addptr", [Pure, Elementwise, SameOperandsAndResultShape,
                                       AllTypesMatch<["ptr", "result"]>]> {
  let summary = "pointer + element offset, elementwise";
  let arguments = (ins Tile_Ptrs:$ptr, AnyTypeOf<[I32, I64, RankedTensorOf<[I32, I64]>]>:$offset);
  let results = (outs Tile_Ptrs:$result);
  let assemblyFormat = "$ptr `,` $offset attr-dict `:` type($ptr) `,` type($offset)";
}

def Tile_LoadOp : Tile_Op<"load", [AttrSizedOperandSegments,
                                   MemoryEffects<[MemRead]>]> {
  let summary = "gather: load each element through a tile of pointers";
  let description = [{
    Lanes whose mask is false read nothing and produce `other` (zero when absent).
  }];
  let arguments = (ins Tile_PtrTensor:$ptrs, Optional<Tile_BoolTensor>:$mask,
                       Optional<Tile_ScalarTensor>:$other);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = [{
    $ptrs (`,` $mask^)? (`,` `other` $other^)? attr-dict `:` type($ptrs)
    (`,` type($mask)^)? (`,` type($other)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_StoreOp : Tile_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "scatter: store each element through a tile of pointers";
  let arguments = (ins Tile_PtrTensor:$ptrs, Tile_ScalarTensor:$value,
                       Optional<Tile_BoolTensor>:$mask);
  let assemblyFormat = [{
    $ptrs `,` $value (`,` $mask^)? attr-dict `:` type($ptrs) `,` type($value) (`,` type($mask)^)?
  }];
  let hasVerifier = 1;
}

class Tile_BlockAccess<string mnemonic, list<Trait> traits>
    : Tile_Op<mnemonic, traits> {
  // `dims` and `strides` (in elements) describe the whole tensor behind `base`; the block
  // starts at `offsets` (one index per dimension). Elements outside `dims` are masked.
  code blockAccessDecls = [{
    int64_t getRank() { return getDims().size(); }
  }];
}

def Tile_BlockLoadOp : Tile_BlockAccess<"block_load", [MemoryEffects<[MemRead]>]> {
  let summary = "load a rectangular block of a strided tensor, padding out-of-bounds elements";
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$offsets,
                       DenseI64ArrayAttr:$dims, DenseI64ArrayAttr:$strides,
                       DefaultValuedAttr<F64Attr, "0.0">:$padding);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = [{
    $base `[` $offsets `]` attr-dict `:` type($base) `->` type($result)
  }];
  let extraClassDeclaration = blockAccessDecls;
  let hasVerifier = 1;
}

def Tile_BlockStoreOp : Tile_BlockAccess<"block_store", [MemoryEffects<[MemWrite]>, AttrSizedOperandSegments]> {
  let summary = "store a rectangular block of a strided tensor, dropping out-of-bounds elements";
  let description = [{
    With `limit` (an i32), the elements whose index along dimension `limit_dim` (not the
    last) is at or past it are dropped too: a bound known only at run time, such as the
    end of a packed sequence's rows in a tensor of several. Vectors along the last
    dimension keep their width (a row is kept or dropped whole).
  }];
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$offsets, Tile_ScalarTensor:$value, Optional<I32>:$limit,
                       DenseI64ArrayAttr:$dims, DenseI64ArrayAttr:$strides, OptionalAttr<I64Attr>:$limit_dim);
  let assemblyFormat = [{
    $base `[` $offsets `]` `,` $value (`below` $limit^)? attr-dict `:` type($base) `,` type($value)
  }];
  let extraClassDeclaration = blockAccessDecls;
  let hasVerifier = 1;
}

def Tile_BlockAtomicAddOp : Tile_BlockAccess<"block_atomic_add", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "add a tile into a rectangular block of a strided tensor with atomic adds";
  let description = [{
    `value` is the block of extents `block` (one per tensor dimension) with its unit dims
    dropped, as tile.async_block_load gives it. Each element is added once, by the thread
    that owns it, with a relaxed atomic add (red.global.add): blocks of several programs
    may overlap, in an unspecified order. Elements outside the tensor are dropped.
  }];
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$offsets, Tile_ScalarTensor:$value,
                       DenseI64ArrayAttr:$dims, DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$block);
  let assemblyFormat = [{
    $base `[` $offsets `]` `,` $value attr-dict `:` type($base) `,` type($value)
  }];
  let extraClassDeclaration = blockAccessDecls;
  let hasVerifier = 1;
}

def Tile_AsyncBlockLoadOp : Tile_Op<"async_block_load", [AttrSizedOperandSegments,
                                                          MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "copy a block of a strided tensor into a slot of a shared-memory buffer (cp.async)";
  let description = [{
    The block of `block` elements at `offsets` (one per dimension) of the tensor behind
    `base` (`dims`, `strides` as tile.block_load) is copied into slot `slot` (0 <=
    slot < `slots`) of the kernel's shared buffer number `buffer`; elements outside the
    tensor read as zero. The result is that block with its unit dimensions dropped (2-D),
    held in shared memory (#tile.shared), and is valid only after a tile.async_wait
    that covers this copy and until a later copy into the same slot: ordering the slots
    is the kernel's job. Every op naming one buffer shares its slots (a loop's copy
    and the copy before the loop that it continues).

    On the GPU (sm_80+) every thread copies 16-byte chunks with cp.async and commits
    one group; the last dimension must be contiguous (stride 1), the block's and the
    tensor's last dims whole 16-byte chunks, and every other stride a multiple of 16
    bytes. The interpreter loads the block.

    With a `barrier` (the index of one of the kernel's mbarriers, `tile.mbarriers`) the
    copy is a TMA box copy instead (sm_90a, kernels with `tile.wgmma_dots`, whose shared
    tiles are wgmma swizzle atoms): one thread of the program arrives on the barrier,
    expecting the block's bytes, and issues one cp.async.bulk.tensor per 128-byte panel
    of the block's rows; the copy completes on the barrier (tile.mbarrier_wait), not on
    tile.async_wait. The tensor must be a 2-D kernel parameter (its tensor map is a
    launch parameter), the block's rows 32 or 64 bytes or a multiple of 128, at most
    256 of them and a multiple of 8, and every TMA copy of one tensor in a kernel copies
    blocks of one shape.
  }];
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$offsets, I32:$slot, Optional<I32>:$barrier,
                       DenseI64ArrayAttr:$dims, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$block, I64Attr:$buffer, I64Attr:$slots);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = [{
    $base `[` $offsets `]` `slot` $slot (`barrier` $barrier^)? attr-dict `:` type($base) `->` type($result)
  }];
  let extraClassDeclaration = [{
    /// A TMA box copy completing on an mbarrier (else cp.async).
    bool isTma() { return static_cast<bool>(getBarrier()); }
    ::mlir::LogicalResult verifyTmaCopy();
  }];
  let hasVerifier = 1;
}

def Tile_MbarrierWaitOp : Tile_Op<"mbarrier_wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "wait until a phase of one of the kernel's mbarriers has completed";
  let description = [{
    `index` names one of the kernel's mbarriers (the function attribute
    `tile.mbarriers` lists each one's arrivals per phase; they are initialized when the
    kernel starts, in phase 0). Every thread that runs the op waits until the phase of
    parity `phase` (0 or 1) has completed: all its arrivals made and, for TMA copies,
    all their bytes written and visible. The interpreter runs programs one at a time,
    so there it does nothing.
  }];
  let arguments = (ins I32:$index, I32:$phase);
  let assemblyFormat = "$index `,` $phase attr-dict";
  let hasVerifier = 1;
}

def Tile_MbarrierArriveOp : Tile_Op<"mbarrier_arrive", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "every thread that runs it arrives once on one of the kernel's mbarriers";
  let description = [{
    Release semantics: the thread's earlier accesses are ordered before the phase
    completes (e.g. "I have finished reading this slot"). A barrier all threads of a
    program arrive on is declared with 32 x warps arrivals. The interpreter does nothing.
  }];
  let arguments = (ins I32:$index);
  let assemblyFormat = "$index attr-dict";
  let hasVerifier = 1;
}

class Tile_TurnOp<string mnemonic> : Tile_Op<mnemonic, [MemoryEffects<[MemRead, MemWrite]>]> {
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
  // Erased where canonicalization folded their loop away (a loop of one step): one step
  // has no turns to take.
  let hasCanonicalizeMethod = 1;
}

def Tile_TurnWaitOp : Tile_TurnOp<"turn_wait"> {
  let summary = "wait for this consumer warpgroup's turn (ping-pong between warpgroups)";
  let description = [{
    In the consumers' part of a warp-specialized loop (an scf.for marked
    tile.warp_specialize), whose num_warps / 4 = W consumer warpgroups take turns
    through the code between tile.turn_wait and tile.turn_pass: warpgroup w waits here
    until warpgroup (w - 1) mod W has passed the turn since w's last one (warpgroup 0
    goes first). With two warpgroups, one issues its tensor-core products while the
    other runs its softmax. Lowered to named barriers 2 + w of 256 threads (bar.sync
    here, bar.arrive in turn_pass; warpgroup 0 arrives on its own before the loop); with
    one warpgroup, and on the interpreter, it does nothing. No barrier among the
    consumers may fall inside a turn (the others wait for the turn and never reach it):
    the lowering rejects one.
  }];
}

def Tile_TurnPassOp : Tile_TurnOp<"turn_pass"> {
  let summary = "hand the turn to the next consumer warpgroup";
  let description = [{
    The end of a turn begun by tile.turn_wait: warpgroup w lets warpgroup (w + 1) mod W
    enter its turn, without waiting.
  }];
}

def Tile_AsyncWaitOp : Tile_Op<"async_wait", []> {
  let summary = "wait for this thread's tile.async_block_load copies, then a block-wide barrier";
  let description = [{
    Waits until at most `pending` of the calling thread's most recent copy groups (one
    per tile.async_block_load) are still in flight, then synchronizes the block: every
    thread's completed copies are visible to all, and every thread has finished reading
    what it read before (so a slot read before the wait may be refilled after it).
  }];
  let arguments = (ins DefaultValuedAttr<I32Attr, "0">:$pending);
  let assemblyFormat = "attr-dict";
}

def Tile_TmaStoreOp : Tile_Op<"tma_store", [DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "store (or add) a 2-D block into a kernel tensor with TMA (sm_90a), dropping what falls outside";
  let description = [{
    `base` is a kernel tensor parameter: a row-major [M, N] tensor (`dims`) whose rows
    are multiples of 16 bytes; the [BM, BN] block `value` (bf16, f16 or f32, BM <= 256,
    BN a multiple of 128 bytes of elements) goes to rows offsets[0] .. and columns
    offsets[1] ..; what lies outside the tensor is dropped. On the GPU
    (LowerTmaStore.cpp) the threads write 128-byte-wide column strips of the block into
    two alternating swizzled shared buffers and one thread hands each strip to TMA
    (cp.async.bulk.tensor, bulk groups), which writes it out while the threads go on:
    only reusing a buffer waits for its previous strip to have been read. The value must
    be in the mma accumulator layout (a dot product's result, after elementwise math).

    `kind` add (`tile.tma_store add ...`) adds the block into the tensor element by
    element instead (cp.reduce.async.bulk.tensor .add: the same strips and bulk groups),
    so that several programs may accumulate into overlapping blocks; their adds land in
    no fixed order (float sums may differ in their last bits between runs). Only f32:
    PTX also adds f16 and bf16 tensors, but a 16-bit sum rounds at every partial sum
    (accumulate in f32 and convert once).
  }];
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$offsets, Tile_ScalarTensor:$value,
                       DenseI64ArrayAttr:$dims,
                       DefaultValuedAttr<Tile_TmaStoreKindAttr, "::tokamax::tile::TmaStoreKind::Store">:$kind);
  let assemblyFormat = [{
    custom<TmaStoreKind>($kind) `` $base `[` $offsets `]` `,` $value attr-dict `:` type($base) `,` type($value)
  }];
  let extraClassDeclaration = [{
    /// Columns per 128-byte strip (64 16-bit, 32 f32 elements).
    int64_t getStripColumns() {
      return 128 / (getValue().getType().getElementType().getIntOrFloatBitWidth() / 8);
    }
    bool isAdd() { return getKind() == TmaStoreKind::Add; }
  }];
  let hasVerifier = 1;
}

class Tile_SemaphoreOp<string mnemonic> : Tile_Op<mnemonic, [MemoryEffects<[MemRead, MemWrite]>]> {
  // `base` is a kernel tensor parameter of i32 counters: `dims` and `strides` (in
  // elements) describe it, `offsets` name one counter (one index per dimension).
  let arguments = (ins Tile_PtrType:$base, Variadic<I32>:$offsets, I32:$value,
                       DenseI64ArrayAttr:$dims, DenseI64ArrayAttr:$strides);
  let assemblyFormat = [{
    $base `[` $offsets `]` `,` $value attr-dict `:` type($base)
  }];
  let hasVerifier = 1;
}

def Tile_SemaphoreWaitOp : Tile_SemaphoreOp<"semaphore_wait"> {
  let summary = "spin until a global-memory i32 counter equals `value` (orders programs)";
  let description = [{
    Thread 0 of the CTA polls the counter with ld.acquire.gpu until it equals `value`,
    then a CTA barrier lets every thread go on: what the program that signalled the
    counter wrote before its tile.semaphore_signal is visible to every thread after
    the wait. Programs wait for each other only if the GPU runs them at once (a grid
    no larger than fits, or waits only on programs launched earlier). The interpreter
    runs programs one at a time: the wait passes when the counter already holds
    `value`, else it fails naming the deadlock; kernels that wait run their programs
    in grid order even under TOKAMAX_INTERPRETER_ORDER=reverse.
  }];
}

def Tile_SemaphoreSignalOp : Tile_SemaphoreOp<"semaphore_signal"> {
  let summary = "add `value` to a global-memory i32 counter after the CTA's writes (release)";
  let description = [{
    A CTA barrier (every thread's global writes before it are done), then thread 0
    adds `value` with red.release.gpu.global.add.s32, so that a tile.semaphore_wait that
    sees the sum sees those writes. TMA stores (tile.tma_store, bulk groups of thread
    0) are asynchronous: where the kernel has issued any before the signal, thread 0
    first waits for all of them to complete (cp.async.bulk.wait_group 0), so the caller
    need not. Plain stores and atomics need nothing more.
  }];
}

def Tile_AtomicRMWOp : Tile_Op<"atomic_rmw", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "atomic read-modify-write through a tile of pointers; returns the old values";
  let arguments = (ins Tile_AtomicKindAttr:$kind, Tile_PtrTensor:$ptrs,
                       Tile_ScalarTensor:$value, Optional<Tile_BoolTensor>:$mask);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = [{
    $kind $ptrs `,` $value (`,` $mask^)? attr-dict `:` type($ptrs) `,` type($value)
    (`,` type($mask)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_AtomicCASOp : Tile_Op<"atomic_cas", [MemoryEffects<[MemRead, MemWrite]>,
                                              AllTypesMatch<["compare", "value", "result"]>]> {
  let summary = "atomic compare-and-swap through a tile of pointers; returns the old values";
  let arguments = (ins Tile_PtrTensor:$ptrs, Tile_IntTensor:$compare, Tile_IntTensor:$value);
  let results = (outs Tile_IntTensor:$result);
  let assemblyFormat = [{
    $ptrs `,` $compare `,` $value attr-dict `:` type($ptrs) `,` type($value)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Conversion, reduction and shape manipulation
//===----------------------------------------------------------------------===//

def Tile_CastOp : Tile_Op<"cast", [Pure, SameOperandsAndResultShape]> {
  let summary = "convert between element types (round to nearest even, saturating fp8)";
  let description = [{
    Float to float rounds to nearest even; fp8 e4m3 saturates to +-448. Float to int
    truncates toward zero; anything to i1 is `!= 0`; i1 to anything is 0 or 1.
  }];
  let arguments = (ins Tile_Numeric:$source);
  let results = (outs Tile_Numeric:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `to` type($result)";
  let hasVerifier = 1;
}

def Tile_Exp2Op : Tile_Op<"exp2", [Pure, Elementwise, SameOperandsAndResultType]> {
  let summary = "2^x in f32, a share of each thread's registers on the FMA pipes";
  let description = [{
    2^x, as math.exp2 on f32, where the special-function unit that computes it bounds a
    kernel's step (attention's softmax at head dim 64): of every `fma_period` registers
    a thread holds, `fma_count` are computed by a cubic polynomial on the FMA pipes
    instead (relative error below 1e-4; the others by ex2.approx.ftz). On those
    registers x is clamped to [-127, 127]: 0 exactly from -127 down (-inf included),
    NaN stays NaN. The interpreter computes 2^x exactly.
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$x,
                       ConfinedAttr<I32Attr, [IntMinValue<0>]>:$fma_count,
                       ConfinedAttr<I32Attr, [IntMinValue<1>, IntMaxValue<64>]>:$fma_period);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = "$x `fma` $fma_count `of` $fma_period attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def Tile_ReduceOp : Tile_Op<"reduce", [Pure]> {
  let summary = "reduce a tile along one axis (sum, max, min or argmax)";
  let description = [{
    The result drops `axis`; reducing a 1-D tile gives a scalar. argmax gives i32 indices
    (the first maximum).
  }];
  let arguments = (ins Tile_ReduceKindAttr:$kind, Tile_ScalarTensor:$source, I32Attr:$axis);
  let results = (outs AnyTypeOf<[Tile_Scalar, Tile_ScalarTensor]>:$result);
  let assemblyFormat = "$kind $source `axis` `=` $axis attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_ExpandDimsOp : Tile_Op<"expand_dims", [Pure]> {
  let summary = "insert a dimension of size 1";
  let arguments = (ins Tile_AnyTensor:$source, I32Attr:$axis);
  let results = (outs Tile_AnyTensor:$result);
  let assemblyFormat = "$source `axis` `=` $axis attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_BroadcastOp : Tile_Op<"broadcast", [Pure]> {
  let summary = "repeat dimensions of size 1 up to the result shape";
  let arguments = (ins Tile_AnyTensor:$source);
  let results = (outs Tile_AnyTensor:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_ReshapeOp : Tile_Op<"reshape", [Pure]> {
  let summary = "reinterpret a tile's shape in row-major order";
  let arguments = (ins Tile_AnyTensor:$source);
  let results = (outs Tile_AnyTensor:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_TransOp : Tile_Op<"trans", [Pure]> {
  let summary = "permute the dimensions of a tile";
  let arguments = (ins Tile_AnyTensor:$source, DenseI32ArrayAttr:$order);
  let results = (outs Tile_AnyTensor:$result);
  let assemblyFormat = "$source $order attr-dict `:` type($source) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_DotOp : Tile_Op<"dot", [Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "matrix product accumulated in f32: acc + a @ b";
  let description = [{
    With `async`, a dot that runs on wgmma (LowerWgmmaDot.cpp) is issued and committed
    as one wgmma group but not waited for: its result may be used only through a
    tile.dot_wait, and the shared tiles it reads must stay unchanged until then. Other
    dots (mma.sync, the interpreter) complete at once, so `async` changes nothing there.

    With `fresh` (an i1 scalar) holding, the product starts from zero and `acc` is not
    read: a loop over several products' steps (a persistent kernel's tiles) restarts
    its accumulator without a select on registers that may be in flight (on wgmma the
    first step's scale-d is 0).

    With `a_k_interleaved`, a's columns are read in the order an mma accumulator holds
    them: K index k of each 16-wide group reads a's column 2 (k / 4) + k % 2 + 8 ((k % 4)
    / 2) of the group (b's rows must be in that order: the caller stored them so). An fp8
    accumulator-layout a then becomes the product's A operand by renaming registers
    (no shuffles); K must be a multiple of 16.
  }];
  let arguments = (ins Tile_ScalarTensor:$a, Tile_ScalarTensor:$b, Tile_ScalarTensor:$acc, Optional<I1>:$fresh,
                       UnitAttr:$async, UnitAttr:$a_k_interleaved);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = "$a `,` $b `,` $acc (`fresh` $fresh^)? attr-dict `:` type($a) `,` type($b) `->` type($acc)";
  let hasVerifier = 1;
}

def Tile_DotWaitOp : Tile_Op<"dot_wait", [MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["value", "result"]>]> {
  let summary = "the result of an async tile.dot, once at most `pending` wgmma groups are in flight";
  let description = [{
    Waits until at most `pending` of this warpgroup's most recently committed wgmma
    groups (one per async tile.dot) are still running, then returns `value` (the result
    of an async dot, or anything computed from completed ones). The result is the value
    flowing through the wait, so no use of it is scheduled before the wait. On dots that
    completed at once (mma.sync, the interpreter) it is the identity. Its memory effects
    keep it ordered with the copies that may refill the shared tiles the dots read.
  }];
  let arguments = (ins Tile_ScalarTensor:$value, DefaultValuedAttr<I32Attr, "0">:$pending);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

// A whole matrix-product main loop over two kernel tensors; the ops differ in how the
// operand slices reach shared memory and which tensor-core instructions read them.
class Tile_MainLoopDotOp<string mnemonic, dag extraArgs> :
    Tile_Op<mnemonic, [MemoryEffects<[MemRead]>, AllTypesMatch<["acc", "result"]>]> {
  let arguments = !con((ins Tile_PtrType:$a, Tile_PtrType:$b, I32:$m0, I32:$n0, Tile_ScalarTensor:$acc,
                            DenseI64ArrayAttr:$a_dims, DenseI64ArrayAttr:$b_dims,
                            BoolAttr:$trans_a, BoolAttr:$trans_b, I64Attr:$block_k, I64Attr:$stages),
                       extraArgs);
  let results = (outs Tile_ScalarTensor:$result);
  let assemblyFormat = [{
    $a `,` $b `[` $m0 `,` $n0 `]` `,` $acc attr-dict `:` type($a) `,` type($b) `,` type($acc)
  }];
  let extraClassDeclaration = [{
    int64_t getM() { return getTransA() ? getADims()[1] : getADims()[0]; }
    int64_t getK() { return getTransA() ? getADims()[0] : getADims()[1]; }
    int64_t getN() { return getTransB() ? getBDims()[0] : getBDims()[1]; }
    int64_t getBlockM() { return getAcc().getType().getDimSize(0); }
    int64_t getBlockN() { return getAcc().getType().getDimSize(1); }
  }];
  let hasVerifier = 1;
}

def Tile_TmaDotOp : Tile_MainLoopDotOp<"tma_dot", (ins Optional<I32>:$b_k0,
                                                     DefaultValuedAttr<BoolAttr, "false">:$warp_specialize,
                                                     DefaultValuedAttr<I64Attr, "1">:$cluster_m,
                                                     DefaultValuedAttr<BoolAttr, "false">:$a_in_registers,
                                                     DefaultValuedAttr<BoolAttr, "false">:$rebalance_registers)> {
  let summary = "acc + op(a)[m0 : m0 + BM, :] @ op(b)[:, n0 : n0 + BN] over all of K, on sm_90a";
  // Operands: bf16 or f16 (either may be transposed), or fp8 (e4m3 / e5m2) with a as
  // [M, K] and b as [N, K], as wgmma reads 8-bit operands K-major only.
  let description = [{
    A whole matrix-product main loop: `a` and `b` are kernel tensor parameters (2-D,
    row-major, `a_dims` / `b_dims`); op(a) is a ([M, K]) or a^T (a is [K, M] when
    `trans_a`), op(b) is b ([K, N]) or b^T (b is [N, K] when `trans_b`). Out-of-range
    rows, columns and K read as zero, so no dimension needs to be a multiple of the
    block. The result is the f32 accumulator [BM, BN].

    On the GPU (LowerTmaDot.cpp) the runtime encodes one TMA tensor map per operand;
    `block_k`-wide slices of both operands stream through a ring of `stages` shared-
    memory buffers (cp.async.bulk.tensor, completion on mbarriers; K-major slices are
    swizzled by their 32-, 64- or 128-byte rows, MN-major ones with the 128-byte
    swizzle) and every warpgroup issues wgmma.mma_async m64nBNk16 on its 64-row slabs
    straight from shared memory. The accumulator takes the mma layout with every warp
    along M.

    With `a_in_registers` (a as [M, K] only), each warp first reads its rows of a's
    slice into registers (ldmatrix, in wgmma's A-fragment layout) and the wgmma takes A
    from registers and only B from shared memory (the form a product of computed
    values, such as attention's probabilities, needs).

    With `warp_specialize`, the kernel gets one more warpgroup (a producer): one of its
    threads issues every TMA load while the kernel's `num_warps` warps only wait and
    issue wgmma; the rest of the op's block runs on the kernel's warps only, so the op
    must sit at the top level of the kernel body (or of a loop directly in it).

    With `rebalance_registers` (warp-specialized, directly in a loop that carries no
    values and holds no other warp-specialized tma_dot: a persistent kernel), the loop
    is lowered once per role: the producer warpgroup runs a copy with only the loads and
    first lowers its register limit to 40 per thread (setmaxnreg), the kernel's warps
    run a copy with everything else and raise theirs by what that freed (232 with 8
    warps: 2 x 128 x 232 + 128 x 40 = 384 x 168).

    With `cluster_m` = 2 (warp-specialized only) programs 2c and 2c + 1 form a cluster
    of two CTAs that compute vertically adjacent blocks of C: they must pass the same
    `n0` and run the op equally often. Each loads its own slices of a and half of b's,
    which TMA multicasts into both CTAs' rings, halving b's traffic from L2.

    With `b_k0` (an i32 known at run time), op(b)'s K runs from b_k0 over op(a)'s K: a
    window of a wider b (its stored K may be anything), e.g. a chunk of a weight's
    columns read in place; K past b's stored extent reads as zero.
  }];
  let assemblyFormat = [{
    $a `,` $b `[` $m0 `,` $n0 `]` `,` $acc (`b_k0` $b_k0^)? attr-dict `:` type($a) `,` type($b) `,` type($acc)
  }];
}

def Tile_CpAsyncDotOp : Tile_MainLoopDotOp<"cp_async_dot", (ins)> {
  let summary = "acc + op(a)[m0 : m0 + BM, :] @ op(b)[:, n0 : n0 + BN] over all of K, on sm_80+";
  let description = [{
    The same product as tile.tma_dot for bf16, f16 and f32 (as tf32) operands, either
    transposed, on any GPU with mma.sync (sm_80 and newer). On the GPU
    (LowerCpAsyncDot.cpp) every thread copies 16-byte chunks of the next `block_k`-wide
    slices into a ring of `stages` swizzled shared buffers with cp.async (zero-filled
    outside the tensors), `stages - 1` slices ahead of the one being multiplied; ldmatrix
    reads mma.sync fragments from the ring. The accumulator takes the tile.dot layout
    (#tile.mma over the kernel's warps), one barrier per K slice.
  }];
}

//===----------------------------------------------------------------------===//
// Compiler-inserted operations
//===----------------------------------------------------------------------===//

def Tile_ConvertLayoutOp : Tile_Op<"convert_layout", [Pure, SameOperandsAndResultShape,
                                                        SameOperandsAndResultElementType]> {
  let summary = "move a tile between distributed layouts (through shared memory)";
  let arguments = (ins Tile_AnyTensor:$source);
  let results = (outs Tile_AnyTensor:$result);
  let assemblyFormat = "$source attr-dict `:` type($source) `->` type($result)";
  let hasCanonicalizer = 1;
  let hasFolder = 1;
}

def Tile_BarrierOp : Tile_Op<"barrier", []> {
  let summary = "block-wide barrier ordering shared-memory scratch accesses";
  let assemblyFormat = "attr-dict";
}

#endif // TOKAMAX_TILE_OPS
