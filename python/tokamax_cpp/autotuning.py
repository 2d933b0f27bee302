"""Tokamax's autotuning API over the library's: `autotune(f, *args)` runs f once while
recording every op call it binds, times each call's candidate configs on the GPU
(tkx_autotune), and returns an AutotuningResult; `with result:` makes the calls on this
thread use its configs (a config scope of the library).

A scope is the thread's own. Where a call runs on a thread of someone else's (JAX's FFI
handler on XLA's execution threads), the adapter binds it with what it resolves to on the
scope's thread when it is traced (`scoped_options`), as Tokamax applies results at trace
time; with jax >= 0.7.2 the open scopes are part of jit's cache key (`jit_context`), so a
jitted function traces again when it is called inside a scope, and outside one again."""

from __future__ import annotations

import hashlib
import json
import sys
import threading

from . import _capi


class _OpenScopes(threading.local):
    def __init__(self):
        self.keys: list[str] = []  # the results open on this thread (their digests), innermost last


_open = _OpenScopes()


def scope_active() -> bool:
    """Whether an AutotuningResult's scope is open on this thread."""
    return bool(_open.keys)


_jit_context = None
_jit_context_lock = threading.Lock()


def jit_context():
    """jax's user context (jax.make_user_context, jax >= 0.7.2) whose value is the open
    scopes' digests: it is part of jit's cache key, so entering or leaving a scope makes
    jitted functions trace again (with the scope's configs, or without). Made once jax is
    imported, before a trace needs it (the package's import, the jax adapter's); never
    imports jax. None without jax or with an older one."""
    global _jit_context
    if _jit_context is None:
        make = getattr(sys.modules.get("jax"), "make_user_context", None)
        if make is None:
            return None
        with _jit_context_lock:
            if _jit_context is None:
                _jit_context = make(())
    return _jit_context


def scoped_options(call: "_capi.Call", arch: str | None, always: bool = False) -> str:
    """The options JSON to bind `call` with on a thread that sees no scope of this one:
    while a scope is open here (or `always`), the call's options plus the "implementation"
    and "config" a run here would resolve for a GPU of `arch` ("sm_90a"; None: CUDA device
    0's); else the call's own options (the runner resolves them: explicit choice, the
    autotuning cache, the heuristic)."""
    if not scope_active() and not always:
        return call.options_json
    options = json.loads(call.options_json)
    options.update(call.resolve(arch))
    return _capi.options_json(options)


class AutotuningResult:
    """The best implementation and config per op call, as the library's JSON
    ("format": "tokamax-autotuning"). Immutable; a context manager that may be entered
    more than once (scopes nest, innermost first)."""

    def __init__(self, text: str):
        self._text = text
        self._data = json.loads(text)
        self._digest = hashlib.sha256(text.encode()).hexdigest()[:16]  # equal results, equal jit keys
        self._scopes = threading.local()

    # -- Tokamax's API --
    def dumps(self) -> str:
        return self._text

    def dump(self, fp) -> None:
        fp.write(self._text)

    @classmethod
    def loads(cls, text: str) -> "AutotuningResult":
        data = json.loads(text)  # a clear error for text that is not JSON
        if not isinstance(data, dict) or data.get("format") != "tokamax-autotuning":
            raise ValueError('not an autotuning result: "format" must be "tokamax-autotuning"')
        return cls(text)

    @classmethod
    def load(cls, fp) -> "AutotuningResult":
        return cls.loads(fp.read())

    def __enter__(self) -> "AutotuningResult":
        stack = getattr(self._scopes, "ids", None)
        if stack is None:
            stack = self._scopes.ids = []
        scope = _capi.config_scope_push(self._text)  # validates the JSON fully
        context = jit_context()
        keyed = None
        if context is not None:
            keyed = context(context.value + (self._digest,))
            keyed.__enter__()
        stack.append((scope, keyed))
        _open.keys.append(self._digest)
        return self

    def __exit__(self, *exc) -> None:
        scope, keyed = self._scopes.ids.pop()
        _open.keys.pop()
        if keyed is not None:
            keyed.__exit__(*exc)
        _capi.config_scope_pop(scope)

    def __or__(self, other: "AutotuningResult") -> "AutotuningResult":
        """Both results' entries (other's win for the same call)."""
        mine = {json.dumps(e["args"], sort_keys=True): e for e in self.entries}
        mine.update({json.dumps(e["args"], sort_keys=True): e for e in other.entries})
        merged = dict(self._data, entries=list(mine.values()))
        return AutotuningResult(json.dumps(merged, indent=2) + "\n")

    # -- reading it --
    @property
    def entries(self) -> list[dict]:
        """Per call: "args" (the bound call), "implementation", "config", "candidates"."""
        return list(self._data.get("entries", []))

    @property
    def device(self):
        return self._data.get("device")

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"AutotuningResult({len(self)} calls)"


class _Recorder(threading.local):
    def __init__(self):
        self.stacks: list[dict] = []


_recorder = _Recorder()


def record(call: "_capi.Call") -> None:
    """Notes a call bound on this thread (the backends call this when recording)."""
    for calls in _recorder.stacks:
        calls.setdefault((call.op, call.json()), call)


def _hook(call) -> None:
    if _recorder.stacks:
        record(call)


_capi.call_hooks.append(_hook)


def autotune(f, *args, ignore_cache: bool = False, all_implementations: bool = False,
             progress_bar: bool = False, timeout=None, max_workers=None) -> AutotuningResult:
    """Runs f(*args) once (eagerly, or tracing it for jax.jit / torch.compile functions),
    records every op call it binds, tunes each on GPU 0 and returns the result.
    `f` may also be a sequence of already bound calls (tokamax_cpp._capi.Call).
    The other arguments are Tokamax's, accepted for its code; the library's search
    decides what it times."""
    del ignore_cache, all_implementations, progress_bar, timeout, max_workers
    if callable(f):
        calls: dict = {}
        _recorder.stacks.append(calls)
        try:
            _trace_or_run(f, args)
        finally:
            _recorder.stacks.pop()
        found = list(calls.values())
    else:
        found = list(f)
    if not found:
        raise ValueError("autotune: the function called no op of the library")
    return AutotuningResult(_capi.autotune(found))


def _trace_or_run(f, args) -> None:
    """jax functions are traced to a jaxpr whose custom calls of ours name the calls (a
    jit's trace cache would hide them from a recorder); anything else runs once."""
    if any(type(a).__module__.startswith(("jax", "jaxlib")) for a in args) or \
            type(f).__module__.startswith(("jax", "jaxlib")):
        from . import jax as jax_adapter
        jax_adapter.trace(f, *args)  # binding records through the hook
    else:
        f(*args)
