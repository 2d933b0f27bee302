"""What the op peer scripts (glu.py, ragged_dot.py, cross_entropy.py) share: their command
line, the loop over shapes and (pass, backend) rows, the printed lines and the JSON their
tokamax benchmark reads with --peers.

The scripts import it as `common` (their own folder is first on sys.path however they are
started: `python3 bench/peers/glu.py` from the repository root or `python3 glu.py` here).
"""

import argparse
import json
import os
import sys

import torch

from peer_timing import flush_buffer, time_runs

PASSES = ("fwd", "fwd+bwd")


def each_pass(backends):
    """The (pass, backend) rows of a shape: every backend, forward first."""
    return [(pass_, backend) for pass_ in PASSES for backend in backends]


def timed_ms(work, grad, iters, warmup, flush):
    """Median ms of `work` (see peer_timing.time_runs), with autograd on for a fwd+bwd pass only."""
    with grad_mode(grad):
        return time_runs(work, iters, warmup=warmup, flush=flush)


def grad_mode(grad):
    return torch.enable_grad() if grad else torch.no_grad()


def ok_row(name, pass_, backend, ms, flops, iters, **figures):
    """A row that ran: its median ms, TFLOP/s from `flops` a run, and any other `figures`."""
    return {"shape": name, "pass": pass_, "backend": backend, "status": "ok", "ms": ms,
            "tflops": flops / ms / 1e9, **figures, "iterations": iters}


def describe(row):
    if row["status"] != "ok":
        return row["status"]
    line = f"{row['ms']:9.3f} ms {row['tflops']:7.1f} TFLOP/s"
    if "extra_mib" in row:
        line += f" {row['extra_mib']:9.1f} MiB extra"
    return line


def main(doc, shapes, quick_shapes, runs, bench_row, backend_width, announce=None):
    """Parses [--json FILE] [--iters N] [--quick]; for each shape of `shapes` (`quick_shapes`
    with --quick), calls announce(name, shape) if given, then for each (pass, backend) of
    `runs` prints and keeps bench_row(name, shape, pass_, backend, iters, flush) (a
    RuntimeError, e.g. out of memory or a refused kernel, makes a failed row); writes the
    rows to --json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit(f"{os.path.basename(sys.argv[0])} needs a CUDA device")
    flush = flush_buffer()
    rows = []
    for name, shape in (quick_shapes if args.quick else shapes).items():
        if announce:
            announce(name, shape)
        for pass_, backend in runs:
            try:
                row = bench_row(name, shape, pass_, backend, args.iters, flush)
            except RuntimeError as e:
                row = {"shape": name, "pass": pass_, "backend": backend, "status": f"failed: {e}"}
            rows.append(row)
            print(f"{name} {pass_:8} {backend:{backend_width}} " + describe(row))
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
