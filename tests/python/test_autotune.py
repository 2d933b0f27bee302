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
    expected = tokamax.layer_norm(X, None, None)
    good = tokamax.AutotuningResult.loads(result_for(layer_norm_call(), "reference",
                                                     {"block_rows": 2, "block_cols": 16, "num_warps": 1}))
    bad = tokamax.AutotuningResult.loads(result_for(layer_norm_call(), "reference",
                                                    {"block_rows": 2, "block_cols": 3, "num_warps": 1}))
    with good:
        with good:  # scopes nest
            inner = tokamax.layer_norm(X, None, None)
        np.testing.assert_allclose(inner, expected, rtol=1e-5, atol=1e-6)
        with bad:  # the scope's config is the one used: a column block of 3 is refused
            with pytest.raises((ValueError, NotImplementedError), match="block_cols"):
                tokamax.layer_norm(X, None, None)
    np.testing.assert_array_equal(tokamax.layer_norm(X, None, None), expected)


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
