"""A scope's configs reach calls that run on other threads (JAX's FFI handler on XLA's
threads): at trace time the adapter binds the handler's call with the implementation and
config the call resolves to on the tracing thread (autotuning.scoped_options over
tkx_call_resolve). Without jax: the options are built here, on the host, for sm_90a (the
interpreter selects as on sm_90a), and a call bound with them on another thread runs
what the scope runs."""

import json
import threading

import numpy as np

import tokamax_cpp as tokamax
from tokamax_cpp import _capi, autotuning

R = np.random.default_rng(3)
X = R.standard_normal((64, 48)).astype(np.float32)
SPECS = [(_capi.F32, X.shape), None, None]
OPTIONS = _capi.options_json({"axis": -1, "epsilon": 1e-6, "residuals": False})


def result_for(call, implementation, config):
    return tokamax.AutotuningResult(json.dumps({
        "format": "tokamax-autotuning", "version": 1, "device": None,
        "entries": [{"args": json.loads(call.json()), "implementation": implementation, "config": config,
                     "candidates": []}]}))


def tuned_config(call, resolved):
    """A config of the resolved implementation other than its heuristic: the tile norm's
    rows per program."""
    config = dict(resolved["config"])
    key = "block_rows" if "block_rows" in config else next(iter(config))
    config[key] = 1 if config[key] != 1 else 2
    return config


def run_on_another_thread(options: str) -> np.ndarray:
    """layer_norm of X bound with `options` and run on a fresh thread (no scope there)."""
    out = {}

    def work():
        out["y"] = tokamax.call("layer_norm", X, None, None, **json.loads(options))[0]
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    return out["y"]


def test_no_scope_leaves_the_options_alone():
    call = _capi.get_call("layer_norm", SPECS, OPTIONS)
    assert not autotuning.scope_active()
    assert autotuning.scoped_options(call, "sm_90a") == OPTIONS


def test_resolve_without_a_scope_is_the_heuristic_choice():
    call = _capi.get_call("layer_norm", SPECS, OPTIONS)
    resolved = call.resolve("sm_90a")
    assert set(resolved) == {"implementation", "config"} and resolved["implementation"] != "reference"
    explicit = _capi.get_call("layer_norm", SPECS, _capi.options_json({"implementation": "reference"}))
    assert explicit.resolve("sm_90a")["implementation"] == "reference"


def test_a_scope_is_embedded_in_the_options_and_runs_elsewhere_as_here():
    call = _capi.get_call("layer_norm", SPECS, OPTIONS)
    heuristic = call.resolve("sm_90a")
    config = tuned_config(call, heuristic)
    result = result_for(call, heuristic["implementation"], config)
    with result:
        assert autotuning.scope_active()
        options = json.loads(autotuning.scoped_options(call, "sm_90a"))
        here = tokamax.call("layer_norm", X, None, None, axis=-1, epsilon=1e-6, residuals=False)[0]
        with result:  # nested: still open after the inner one closes
            pass
        assert autotuning.scope_active()
    assert not autotuning.scope_active()
    assert options == {**json.loads(OPTIONS), "implementation": heuristic["implementation"], "config": config}
    # Another thread sees no scope: bound with the embedded choice it runs the scope's config.
    assert np.array_equal(run_on_another_thread(json.dumps(options)), here)
    plain = run_on_another_thread(OPTIONS)
    assert np.allclose(plain, here, rtol=1e-5, atol=1e-6)


def test_scope_activity_is_per_thread():
    call = _capi.get_call("layer_norm", SPECS, OPTIONS)
    result = result_for(call, "reference", {})
    seen = {}
    with result:
        thread = threading.Thread(target=lambda: seen.setdefault("other", autotuning.scope_active()))
        thread.start()
        thread.join()
        assert autotuning.scope_active()
    assert seen["other"] is False


def test_no_jax_no_jit_context():
    import sys
    if "jax" not in sys.modules:
        assert autotuning.jit_context() is None


def test_arch_names_follow_the_library():
    assert [_capi.arch_name(*cc) for cc in ((9, 0), (10, 0), (8, 0), (8, 9), (12, 0))] == \
        ["sm_90a", "sm_100a", "sm_80", "sm_89", "sm_120"]
    call = _capi.get_call("layer_norm", SPECS, OPTIONS)
    for cc in ((9, 0), (8, 0)):
        call.resolve(_capi.arch_name(*cc))  # names the library parses
