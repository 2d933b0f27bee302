/* c_header_check.c - The C ABI's header compiled as C99 (not C++), and a call made,
 * run and freed through it from C: rms_norm of a [2, 4] f32 tensor on the host
 * interpreter, checked against the formula. Exit 0 when every check holds. */
#include <tokamax/c/tokamax.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (last error: %s)\n", what, tkx_last_error());
    ++failures;
  }
}

int main(void) {
  float x[8] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
  float y[8], rstd[2];
  int64_t shape[2] = {2, 4}, rows[1] = {2};
  tkx_tensor tx, ty, tr;
  const tkx_tensor *inputs[2], *outputs[2];
  tkx_call *call = NULL;
  int32_t dtype = -2, rank = -2, num_inputs = 0;
  int64_t out_shape[TKX_MAX_RANK];
  const char *args = NULL;
  char *resolved = NULL;
  int r, j;

  check(tkx_api_version() == TOKAMAX_C_API_VERSION, "tkx_api_version");
  check(tkx_struct_size("tkx_tensor") == sizeof(tkx_tensor), "tkx_struct_size(tkx_tensor)");
  check(strstr(tkx_op_names(), "rms_norm") != NULL, "tkx_op_names lists rms_norm");
  check(tkx_op_args("rms_norm", &args, &num_inputs) == TKX_OK && num_inputs == 2 &&
            strcmp(args, "x\nscale\ny\nrstd") == 0,
        "tkx_op_args(rms_norm)");

  memset(&tx, 0, sizeof tx);
  tx.struct_size = sizeof(tkx_tensor);
  tx.dtype = TKX_F32;
  tx.rank = 2;
  tx.device = -1;
  tx.shape = shape;
  tx.data = x;
  ty = tx;
  ty.data = y;
  tr = tx;
  tr.rank = 1;
  tr.shape = rows;
  tr.data = rstd;
  inputs[0] = &tx;
  inputs[1] = NULL; /* no scale */
  outputs[0] = &ty;
  outputs[1] = &tr;

  check(tkx_call_create("rms_norm", inputs, 2, "{\"epsilon\": 0.001}", &call) == TKX_OK, "tkx_call_create");
  if (!call)
    return 1;
  check(tkx_call_num_outputs(call) == 2, "tkx_call_num_outputs");
  check(tkx_call_output(call, 1, &dtype, &rank, out_shape) == TKX_OK && dtype == TKX_F32 && rank == 1 &&
            out_shape[0] == 2,
        "tkx_call_output(rstd)");
  check(strstr(tkx_call_json(call), "\"op\":\"rms_norm\"") != NULL, "tkx_call_json");
  check(tkx_call_run(call, inputs, 2, outputs, 2, NULL, NULL, 0) == TKX_OK, "tkx_call_run");
  for (r = 0; r < 2; ++r) {
    double ss = 0;
    for (j = 0; j < 4; ++j)
      ss += (double)x[r * 4 + j] * x[r * 4 + j];
    for (j = 0; j < 4; ++j) {
      double want = x[r * 4 + j] / sqrt(ss / 4 + 0.001);
      check(fabs(y[r * 4 + j] - want) <= 1e-5 * fabs(want) + 1e-6, "rms_norm's value");
    }
  }
  check(tkx_call_resolve(call, "sm_90a", &resolved) == TKX_OK && resolved != NULL &&
            strstr(resolved, "\"implementation\":") != NULL && strstr(resolved, "\"config\":{") != NULL,
        "tkx_call_resolve");
  tkx_free_string(resolved);
  tkx_call_destroy(call);

  call = NULL;
  check(tkx_call_create("rms_norm", inputs, 2, "{\"eps\": 1}", &call) == TKX_INVALID_ARGUMENT && call == NULL,
        "an unknown option is TKX_INVALID_ARGUMENT");
  check(strstr(tkx_last_error(), "eps") != NULL, "the message names the option");
  if (failures == 0)
    printf("c_header_check: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
