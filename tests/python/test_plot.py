"""tokamax_cpp.plot: reading the bench tools' JSON (always), drawing (where matplotlib is)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tokamax_cpp import plot

OURS = {"device": "NVIDIA H100", "rows": [
    {"shape": "S1", "pass": "fwd", "impl": "tile", "status": "ok", "ms": 1.0, "tflops": 300.0, "causal": True},
    {"shape": "S1", "pass": "fwd", "impl": "chunked", "status": "not supported: no", "ms": 0, "tflops": 0},
]}
PEERS = {"device": "NVIDIA H100", "torch": "2.11", "rows": [
    {"shape": "S1", "pass": "fwd", "backend": "flash", "status": "ok", "ms": 1.2, "tflops": 250.0, "causal": True},
]}
FLAT = {"memcpy_dtod_gbs": 2900.0, "layer_norm_gbs_16384x4096": 2739.0}


def test_points_of_each_format():
    points, lines = plot.points_of(OURS)
    assert [(p.group, p.series, p.value) for p in points] == [("S1 causal fwd", "ours: tile", 300.0)]
    points, _ = plot.points_of(PEERS)
    assert points[0].series == "peer: flash" and not points[0].ours
    points, lines = plot.points_of(FLAT)
    assert points[0].group == "layer_norm 16384x4096" and points[0].metric == "gbs"
    assert lines["gbs"][1] == 2900.0
    with pytest.raises(ValueError):
        plot.points_of([1, 2])


def test_tokamax_bench_op_and_pass_keys_group_with_the_peers_rows():
    # tokamax-bench writes "layer_norm fwd_gbs_<shape>"; bench/peers/norms.py rows with op,
    # shape and pass: both must land in one group, so the bars stand side by side.
    ours, _ = plot.points_of({"layer_norm fwd_gbs_4096x16384": 2736.0})
    peer, _ = plot.points_of({"rows": [{"op": "layer_norm", "shape": "4096x16384", "pass": "fwd",
                                        "backend": "torch", "status": "ok", "gbs": 1752.0}]})
    assert ours[0].group == peer[0].group == "layer_norm 4096x16384 fwd"


def test_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    files = []
    for name, doc in (("ours", OURS), ("peers", PEERS), ("flat", FLAT)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        files.append(str(path))
    out = tmp_path / "out.png"
    assert plot.main(files + ["-o", str(out), "--peak-tflops", "989"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_says_so(tmp_path):
    try:
        import matplotlib  # noqa: F401
        pytest.skip("matplotlib is installed: the message for its absence is not reachable")
    except ImportError:
        pass
    path = tmp_path / "ours.json"
    path.write_text(json.dumps(OURS))
    env_path = str(Path(plot.__file__).resolve().parents[1])
    r = subprocess.run([sys.executable, "-m", "tokamax_cpp.plot", str(path), "-o", str(tmp_path / "x.png")],
                       capture_output=True, text=True, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin",
                                                            **{k: v for k, v in __import__("os").environ.items()
                                                               if k.startswith("TOKAMAX")}})
    assert r.returncode != 0 and "matplotlib" in r.stderr
