"""On a GPU machine: does cuTensorMapEncodeTiled accept an overlapping ("window") 3-D map,
dims {K, bk, M} with strides {K*2, K*2} (row i + j of a [M, K] bf16 tensor at box
coordinate (i, j))? Such a map would let a TMA box stop at a group's last row (rows past
it read zeros when the box starts at a negative j): ragged_dot's drhs and packed
variable-length attention on TMA. Prints each encode's CUresult (0: accepted)."""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
print("cuInit", cuda.cuInit(0))
dev = ctypes.c_int(); cuda.cuDeviceGet(ctypes.byref(dev), 0)
ctx = ctypes.c_void_p(); print("ctx", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), cuda.cuCtxSetCurrent(ctx))
ptr = ctypes.c_uint64(); print("alloc", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(32768 * 4096 * 2)))
U64 = ctypes.c_uint64 * 3; U32 = ctypes.c_uint32 * 3
def enc(dims, strides, box, rank=3):
    m = (ctypes.c_uint8 * 128)()
    r = cuda.cuTensorMapEncodeTiled(m, 10, rank, ctypes.c_void_p(ptr.value), U64(*dims), (ctypes.c_uint64 * 2)(*strides),
                                    U32(*box), U32(1, 1, 1), 0, 3, 2, 0)  # bf16, swizzle 128B, L2 256B
    return r
K, bk, M = 4096, 64, 32768
print("plain batched (non-overlapping)", enc([K, bk, M // bk], [K * 2, K * 2 * bk], [64, bk, 1]))
print("window (overlapping)", enc([K, bk, M], [K * 2, K * 2], [64, bk, 1]))
print("window bk 32", enc([K, 32, M], [K * 2, K * 2], [64, 32, 1]))
print("window stride smaller than dim", enc([K, bk, M], [K * 2, K * 2], [64, 64, 1]))
