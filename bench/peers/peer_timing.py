"""Timing shared by the peer scripts: CUDA-event medians with L2 flushed before each run."""

import statistics

import torch

FLUSH_BYTES = 256 << 20


def flush_buffer():
    """A buffer whose overwrite leaves none of the inputs in L2."""
    return torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")


def time_runs(work, iters, warmup, flush):
    """Median ms of `work` over `iters` runs, each after an L2 flush, by CUDA events."""
    for _ in range(warmup):
        work()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush.fill_(1)  # overwrite 256 MB: L2 holds none of the inputs afterwards
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)
