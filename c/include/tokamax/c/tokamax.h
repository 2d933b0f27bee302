/*===- tokamax.h - The C ABI of the Tokamax op library -------------*- C -*-===//
 *
 * A small, versioned, exception-free C surface over the op framework (C99; C++ sees
 * it as extern "C"). Find an op by name, bind it once to its inputs' specs and a JSON
 * object of options (a tkx_call), read the outputs' specs, then run it as often as
 * wanted: on a caller's CUstream with a caller-owned workspace, or on host memory
 * through the CPU interpreter. docs/c-api.md has the per-op tables.
 *
 * Errors: every function returning tkx_status catches everything inside; on a status
 * other than TKX_OK, tkx_last_error() holds the calling thread's message, which names
 * the offending argument.
 *
 * Ownership: strings returned as `const char *` belong to the library (tkx_op_names,
 * tkx_op_args: for the process; tkx_call_json: for the call; tkx_last_error: until the
 * thread's next failing call). Strings returned as `char *` (tkx_autotune) are the
 * caller's, freed with tkx_free_string. Tensors are never owned by the library.
 *
 * Evolution: enum values are frozen; structs begin with struct_size (the caller's
 * sizeof), so fields are only ever added at their end; tkx_struct_size is the layout
 * self-test.
 *
 *===----------------------------------------------------------------------===*/
#ifndef TOKAMAX_C_TOKAMAX_H
#define TOKAMAX_C_TOKAMAX_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TKX_API
#else
#define TKX_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TOKAMAX_C_API_VERSION 1
#define TKX_MAX_RANK 8

typedef enum {
  TKX_OK = 0,
  TKX_INVALID_ARGUMENT = 1,    /* bad input: names the argument, attribute or option */
  TKX_NOT_SUPPORTED = 2,       /* valid, but no implementation / device can serve it: the reason */
  TKX_DRIVER_ERROR = 3,        /* a CUDA driver call failed (or no driver / device) */
  TKX_OUT_OF_MEMORY = 4,       /* a host or device allocation failed */
  TKX_WORKSPACE_TOO_SMALL = 5, /* the caller's workspace is smaller than the call needs */
  TKX_INTERNAL = 6             /* anything else (a bug of ours) */
} tkx_status;

/* Frozen numbering: the same as tokamax::DType. */
typedef enum {
  TKX_BF16 = 0,
  TKX_F16 = 1,
  TKX_F32 = 2,
  TKX_F64 = 3,
  TKX_I8 = 4,
  TKX_I32 = 5,
  TKX_I64 = 6,
  TKX_BOOL = 7,
  TKX_F8E4M3 = 8,
  TKX_F8E5M2 = 9
} tkx_dtype;

/* A tensor: a flat descriptor the caller owns (the library keeps no pointer to it). */
typedef struct {
  uint32_t struct_size;   /* sizeof(tkx_tensor) of the caller: additive evolution */
  int32_t dtype;          /* tkx_dtype */
  int32_t rank;           /* 0..TKX_MAX_RANK */
  int32_t device;         /* CUDA ordinal, or -1: host memory (runs on the CPU interpreter) */
  const int64_t *shape;   /* rank entries (may be NULL when rank is 0) */
  const int64_t *strides; /* rank entries, in elements; NULL = contiguous row-major.
                             Only contiguous row-major strides are accepted today. */
  void *data;
} tkx_tensor;

/* An op bound to its input specs and options; immutable once created, so one call may be
   run from several threads at once. */
typedef struct tkx_call tkx_call;

/* TOKAMAX_C_API_VERSION of the library. */
TKX_API uint32_t tkx_api_version(void);
/* sizeof of each public struct as the library sees it (layout self-test):
   "tkx_tensor" -> sizeof(tkx_tensor); 0 for an unknown name (or NULL). */
TKX_API size_t tkx_struct_size(const char *name);
/* The calling thread's message for the last status != TKX_OK (never NULL; "" if none). */
TKX_API const char *tkx_last_error(void);

/* Ops: names as the C++ registry has them, '\n'-separated, sorted (library-owned). */
TKX_API const char *tkx_op_names(void);
/* The op's argument names, inputs then outputs, '\n'-separated (library-owned);
   *num_inputs is the number of inputs. Either out pointer may be NULL. */
TKX_API tkx_status tkx_op_args(const char *op, const char **names, int32_t *num_inputs);

/* Binds `op` to its inputs' specs (dtype/shape only are read; data may be NULL; absent
   optional inputs are NULL pointers in `inputs`; num_inputs is the op's input count or
   fewer: ops only ever append optional arguments, and the missing last ones are absent) and
   options: NULL or a JSON object of the op's attributes (e.g. {"axis": -1,
   "epsilon": 1e-6}, {"is_causal": true, "scale": 0.125}) plus optional "implementation"
   (string) and "config" (object of integers). Unknown keys are errors. Parsed and
   validated once; outputs' specs are inferred. A forward op's optional residual outputs
   (layer_norm's mean and rstd, rms_norm's rstd, attention's lse: what its VJP takes) are
   produced unless options say "residuals": false (gated_linear_unit's pre-activations,
   twice its output's size, only with "residuals": true); a VJP's optional gradients (dscale,
   doffset, dbias) are produced when their input is present. On success *call is the caller's, freed
   with tkx_call_destroy; on failure *call is NULL. */
TKX_API tkx_status tkx_call_create(const char *op, const tkx_tensor *const *inputs, int32_t num_inputs,
                                   const char *options_json, tkx_call **call);
/* NULL is a no-op. */
TKX_API void tkx_call_destroy(tkx_call *call);
/* The op's output count (its outputs in tkx_op_args order); -1 for a NULL call. */
TKX_API int32_t tkx_call_num_outputs(const tkx_call *call);
/* Output i's dtype, rank and shape (shape: room for TKX_MAX_RANK entries; any of the
   three may be NULL). An optional output this call does not produce (e.g. dscale without
   a scale input) gives *rank = -1 and *dtype = -1; pass NULL for it to tkx_call_run. */
TKX_API tkx_status tkx_call_output(const tkx_call *call, int32_t i, int32_t *dtype, int32_t *rank,
                                   int64_t *shape);
/* The canonical BoundArgs JSON of the call (library-owned string, lives with the call). */
TKX_API const char *tkx_call_json(const tkx_call *call);
/* Device scratch bytes a run of the call needs on `device` (0 for host runs, device -1):
   what the implementation and config a run would resolve now (explicit, config scopes,
   heuristic) ask for. */
TKX_API tkx_status tkx_call_workspace_bytes(const tkx_call *call, int32_t device, size_t *bytes);
/* Runs the call. Device tensors: on their device, whose primary context the run makes
   current (the thread's own is current again after it), on `stream` (a CUstream of that
   device, else TKX_INVALID_ARGUMENT; NULL = the legacy default stream), with `workspace`
   (caller-owned, >= tkx_call_workspace_bytes, 16-byte aligned; may be NULL when that is
   0). No allocation of ours on this path. Host tensors (device -1): the CPU interpreter,
   stream and workspace ignored. Every tensor of one call on the same device;
   shapes/dtypes must match the bound specs; num_inputs / num_outputs are the op's counts
   or fewer (absent optional tensors NULL; the missing last ones absent). */
TKX_API tkx_status tkx_call_run(const tkx_call *call, const tkx_tensor *const *inputs, int32_t num_inputs,
                                const tkx_tensor *const *outputs, int32_t num_outputs, void *stream,
                                void *workspace, size_t workspace_bytes);
/* Compiles the call's kernels for `arch` (e.g. "sm_90a") into the kernel cache, no GPU
   needed (the implementation and config as a run on such a GPU would resolve them). */
TKX_API tkx_status tkx_call_precompile(const tkx_call *call, const char *arch);

/* Autotuning. A result is JSON text (AutotuningResult dumps/loads format). Times every
   call's candidate configs on the device of `stream`'s context (device 0 when NULL) and
   returns the best per call in *result_json (the caller's: tkx_free_string). */
TKX_API tkx_status tkx_autotune(const tkx_call *const *calls, int32_t num_calls, void *stream,
                                char **result_json);
/* Frees a string the library handed over (NULL is a no-op). */
TKX_API void tkx_free_string(char *s);
/* Opens a config scope on the calling thread from a result's JSON: runs and workspace
   queries of calls on this thread use its configs; close with its id (any order). */
TKX_API tkx_status tkx_config_scope_push(const char *result_json, uint64_t *id);
TKX_API tkx_status tkx_config_scope_pop(uint64_t id);
/* What a run of the call on the calling thread would resolve to now, for a GPU of `arch`
   (e.g. "sm_90a"; NULL: CUDA device 0's, which needs a driver): the implementation (the
   one the options named, else the first that serves the call) and its config (the
   options' "config", else this thread's config scopes newest first, then the process's
   autotuning cache, else the heuristic). *json = {"implementation":"hopper","config":
   {...}}, the caller's (tkx_free_string). For a binding that runs the call on another
   thread (an XLA FFI handler): create it there with these as "implementation" and
   "config" and it runs what this thread would. */
TKX_API tkx_status tkx_call_resolve(const tkx_call *call, const char *arch, char **json);

/* Kernel time through CUPTI's activity records (libcupti.so.13, loaded on first use and
   searched as docs/c-api.md says), for timing a framework's whole function: a trace counts
   every kernel of the process that finishes while it is open (memcpys and memsets are
   not kernels). One trace at a time per process: a start while another is open waits for
   it to stop, so never start two on one thread. TKX_NOT_SUPPORTED (with the paths tried)
   where CUPTI cannot be loaded or another profiler holds it. */
typedef struct tkx_kernel_trace tkx_kernel_trace;
TKX_API tkx_status tkx_kernel_trace_start(tkx_kernel_trace **trace);
/* The kernels finished since the start or the previous take (synchronise the work
   first): their number, the sum of their durations in ms, and how many records CUPTI
   could not deliver since the start (a nonzero count means the sum is short). Any
   output pointer may be NULL. */
TKX_API tkx_status tkx_kernel_trace_take(tkx_kernel_trace *trace, int64_t *kernels, double *total_ms,
                                         uint64_t *dropped);
/* Stops recording (NULL is a no-op). */
TKX_API void tkx_kernel_trace_stop(tkx_kernel_trace *trace);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TOKAMAX_C_TOKAMAX_H */
