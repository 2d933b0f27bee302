"""AutotuningResult: dumps / loads round trip, use as a context manager (a config scope
of the library), merging; autotune's recording of the calls a function binds. Timing
needs a GPU: autotune itself is checked on the GPU machine."""

import io
import json

import numpy as np
import pytest

import tokamax_cpp as tokamax
from tokamax_cpp import _capi, autotuning


def result_for(call, implementation, config):
    return json.dumps({"format": "tokamax-autotuning", "version": 1, "device": None,
                       "entries": [{"args": json.loads(call.json()), "implementation": implementation,
                                    "config": config, "candidates": []}]})


X = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def layer_norm_call():
    specs = [(_capi.F32, X.shape), None, None]
    return _capi.get_call("layer_norm", specs, _capi.options_json({"axis": -1, "epsilon": 1e-6,
                                                                   "residuals": False}))


def test_round_trip():
    text = result_for(layer_norm_call(), "reference", {})
    result = tokamax.AutotuningResult.loads(text)
    again = tokamax.AutotuningResult.loads(result.dumps())
    assert again.dumps() == result.dumps() and len(again) == 1
    buffer = io.StringIO()
    result.dump(buffer)
    buffer.seek(0)
    assert tokamax.AutotuningResult.load(buffer).entries == result.entries
    assert (result | again).entries == result.entries


def test_not_a_result():
    with pytest.raises(ValueError, match="format"):
        tokamax.AutotuningResult.loads('{"entries": []}')


def test_scope_applies_and_closes():
    # The reference VJP sums dscale over `programs` partial sums: another count, other
    # rounding, so the bits show which config ran.
    r = np.random.default_rng(1)
    x, dy = r.standard_normal((256, 16)).astype(np.float32), r.standard_normal((256, 16)).astype(np.float32)
    scale = r.standard_normal(16).astype(np.float32)
    _, mean, rstd = tokamax.call("layer_norm", x, scale, None, axis=-1, epsilon=1e-6)
    options = {"axis": -1, "implementation": "reference", "doffset": False}
    vjp = lambda: tokamax.call("layer_norm_vjp", dy, x, scale, mean, rstd, **options)[1]
    specs = [(_capi.F32, a.shape) for a in (dy, x, scale, mean, rstd)]
    call = _capi.get_call("layer_norm_vjp", specs, _capi.options_json(options))
    config = {"block_rows": 4, "block_cols": 16, "num_warps": 1, "programs": 1}
    result = tokamax.AutotuningResult.loads(result_for(call, "reference", config))
    heuristic = vjp()
    with result:
        with result:  # scopes nest
            tuned = vjp()
        assert not np.array_equal(tuned, heuristic)
        np.testing.assert_allclose(tuned, heuristic, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(vjp(), tuned)
    np.testing.assert_array_equal(vjp(), heuristic)


def test_scope_rejects_a_bad_result_when_entered():
    bad = tokamax.AutotuningResult.loads(json.dumps({"format": "tokamax-autotuning", "version": 99,
                                                     "device": None, "entries": []}))
    with pytest.raises(ValueError, match="version"):
        with bad:
            pass


def test_autotune_records_the_calls_of_a_function(monkeypatch):
    seen = []
    monkeypatch.setattr(_capi, "autotune", lambda calls, stream=None: seen.extend(calls) or
                        result_for(calls[0], "reference", {}))
    result = tokamax.autotune(lambda x: tokamax.rms_norm(tokamax.layer_norm(x, None, None)), X)
    assert sorted(c.op for c in seen) == ["layer_norm", "rms_norm"]
    assert isinstance(result, tokamax.AutotuningResult)
    with pytest.raises(ValueError, match="no op"):
        tokamax.autotune(lambda x: x, X)
    assert not autotuning._recorder.stacks
