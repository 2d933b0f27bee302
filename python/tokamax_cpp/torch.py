"""PyTorch adapter: every op of the library as `torch.ops.tokamax_cpp.<op>`, one
implementation for CPU and CUDA tensors:

- CUDA: the tensors' data pointers, torch's current stream of their device, outputs and
  the workspace from torch's caching allocator (so CUDA graphs capture it);
- CPU: the library's CPU interpreter on the same pointers (device -1);
- fake tensors (torch.compile, meta): output shapes from the call's output specs;
- autograd: the forward keeps its residuals (mean / rstd / lse) and backward calls the
  VJP op (`_opdefs` says how they meet).

Ops run on the calling thread, so config scopes (`with result:`) apply to them as they
are; but autograd runs CUDA backward on a device thread of its own, which sees no scope
of the caller's: a forward run inside a scope resolves its VJP call there and then, and
the backward binds it with that implementation and config.

Each op's schema is `(Tensor? <input>..., str options) -> (Tensor, ...)`: `options` is the
canonical JSON of the op's attributes (docs/c-api.md; a forward's may also hold options
only its VJP takes, `_opdefs`' vjp_only, which the op leaves to its backward); an output
the call does not produce is an empty float32 tensor.

Two registrations of the same kernels: torch >= 2.4 gets torch.library.custom_op
(register_fake, register_autograd: torch.compile, opcheck); older torch (1.13 to 2.3,
Debian 12 ships 1.13) a torch.library.Library("tokamax_cpp", "DEF") with CPU / CUDA /
Meta kernels and an Autograd kernel that is a torch.autograd.Function over the same
backward. $TOKAMAX_CPP_TORCH_LIBRARY=1 takes the older one on any torch (to test it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os

import torch

from . import _capi, _opdefs, autotuning

_NAMESPACE = "tokamax_cpp"


def _version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


if _version() < (1, 13):
    raise ImportError(f"tokamax_cpp.torch needs torch >= 1.13 (torch.library.Library with Python kernels); "
                      f"this is torch {torch.__version__}")

# torch.library.custom_op (2.4) or the Library registration of older torch.
CUSTOM_OP = (_version() >= (2, 4) and hasattr(torch.library, "custom_op")
             and os.environ.get("TOKAMAX_CPP_TORCH_LIBRARY", "0") != "1")

_TO_CODE = {torch.bfloat16: _capi.BF16, torch.float16: _capi.F16, torch.float32: _capi.F32,
            torch.float64: _capi.F64, torch.int8: _capi.I8, torch.int32: _capi.I32, torch.int64: _capi.I64,
            torch.bool: _capi.BOOL}
for _name, _code in (("float8_e4m3fn", _capi.F8E4M3), ("float8_e5m2", _capi.F8E5M2)):
    if hasattr(torch, _name):
        _TO_CODE[getattr(torch, _name)] = _code
_FROM_CODE = {code: dtype for dtype, code in _TO_CODE.items()}


def _code(dtype, name: str) -> int:
    code = _TO_CODE.get(dtype)
    if code is None:
        raise TypeError(f"{name}: dtype {dtype} is not one the library takes")
    return code


def _schema_name(arg: str) -> str:
    return arg + "_" if arg in ("out", "self") else arg  # names the schema parser treats specially


def _specs(names, tensors):
    return [None if t is None else (_code(t.dtype, n), tuple(int(d) for d in t.shape))
            for n, t in zip(names, tensors)]


def _device_of(tensors) -> torch.device:
    device = None
    for t in tensors:
        if t is not None:
            if device is None:
                device = t.device
            elif t.device != device:
                devices = {t.device for t in tensors if t is not None}
                raise ValueError(f"every tensor of a call must be on one device, got {sorted(map(str, devices))}")
    if device is None:
        raise ValueError("a call needs at least one tensor")
    return device


def _placeholder(device):
    return torch.empty(0, dtype=torch.float32, device=device)


_shared_placeholders: dict = {}  # device -> one empty tensor (see _outputs)


def _output_specs(call) -> list:
    """(shape, torch dtype) per output of the call, None where absent."""
    return [None if s is None else (s.shape, _FROM_CODE[s.dtype]) for s in call.outputs]


def _outputs(call, device, share: bool = False, specs=None):
    """Fresh outputs of the call; an output the call does not produce is an empty
    placeholder, one per device shared by every call where `share` (an eager run whose
    placeholders nobody sees: no allocation for them)."""
    outs = []
    for s in specs or _output_specs(call):
        if s is not None:
            outs.append(torch.empty(s[0], dtype=s[1], device=device))
        elif share:
            p = _shared_placeholders.get(device)
            if p is None:
                p = _shared_placeholders[device] = _placeholder(device)
            outs.append(p)
        else:
            outs.append(_placeholder(device))
    return outs


_calls: dict = {}  # (op, options, (dtype, shape) or None per input) -> (_capi.Call, its _output_specs)


def _call_of(op: str, names, tensors, options: str, key=None):
    """The bound call of these tensors and its output specs: one dict lookup on a key of
    torch's own dtype and shape objects (options JSON is parsed only when the call is
    first bound). `key`: that key, where the caller built it already."""
    if key is None:
        key = (op, options, *[None if t is None else (t.dtype, t.shape) for t in tensors])
    found = _calls.get(key)
    if found is None:
        call = _capi.get_call(op, _specs(names, tensors), _op_options(op, options))
        found = _calls[key] = (call, _output_specs(call))
    else:
        for hook in _capi.call_hooks:  # what get_call does on its hits (autotuning records)
            hook(found[0])
    return found


@functools.lru_cache(maxsize=256)
def _op_options(op: str, options: str) -> str:
    """The options the op itself takes: an API call's text may also hold options only its
    VJP takes (`_opdefs`' vjp_only, e.g. attention's "deterministic"), which the forward's
    autograd context keeps for the backward."""
    opdef = _opdefs.BY_NAME.get(op)
    if opdef is None or not any(f'"{key}"' in options for key in opdef.vjp_only):
        return options
    return _capi.options_json(opdef.forward_options(json.loads(options)))


def _run(op: str, names, tensors, options: str, share_placeholders: bool = False, given=None):
    """Runs `op` into fresh outputs, or into `given` (the caller's tensors, written in place;
    checked against the call's output specs by the caller)."""
    device = _device_of(tensors)
    # One pass over the inputs: contiguous copies where they are not, the call's key and
    # the data pointers.
    key, contiguous, inputs = [op, options], [], []
    for t in tensors:
        if t is not None:
            if not t.is_contiguous():
                t = t.contiguous()
            key.append((t.dtype, t.shape))
            inputs.append(t.data_ptr())
        else:
            key.append(None)
            inputs.append(None)
        contiguous.append(t)
    call, specs = _call_of(op, names, contiguous, options, tuple(key))
    outs = _outputs(call, device, share_placeholders, specs) if given is None else given(specs)
    outputs = [o.data_ptr() for o in outs]  # placeholders' are ignored: those slots are NULL
    kind = device.type
    if kind == "cpu":
        call.run_pointers(inputs, outputs)
    elif kind == "cuda":
        current = _current_device()
        index = device.index if device.index is not None else current
        if index == current:
            _run_cuda(call, inputs, outputs, device, index)
        else:
            with torch.cuda.device(index):  # its primary context current, as the ABI expects
                _run_cuda(call, inputs, outputs, device, index)
    else:
        raise NotImplementedError(f"tokamax_cpp runs CPU and CUDA tensors, not {device.type}")
    return outs


def _current_stream(index: int):
    """torch's current stream of device `index` as a CUstream address (None: the legacy
    default stream), without making a torch.cuda.Stream object where torch allows."""
    return (_raw_stream(index) if _raw_stream is not None else torch.cuda.current_stream(index).cuda_stream) or None


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
# torch.cuda.current_device() less its Python checks (CUDA is initialised: a CUDA tensor exists).
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def _run_cuda(call, inputs, outputs, device, index: int) -> None:
    """One tkx_call_run on torch's current stream with a workspace from torch's allocator
    (its size remembered per call; grown when a config scope asks for more)."""
    stream = _current_stream(index)
    nbytes = call.cached_workspace_bytes(index)
    while True:
        workspace = torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None
        status = call.run_pointers(inputs, outputs, index, stream,
                                   workspace.data_ptr() if workspace is not None else None, nbytes)
        if status == _capi.OK:
            return
        grown = call.refresh_workspace_bytes(index)  # a config scope changed the call's config
        if grown <= nbytes:
            _capi.check(status)
        nbytes = grown


def _fake(op: str, names, tensors, options: str):
    device = _device_of(tensors)  # shapes may be symbolic here: _specs makes them ints
    return _outputs(_capi.get_call(op, _specs(names, tensors), _op_options(op, options)), device)


_registered: dict = {}


def op(name: str):
    """torch.ops.tokamax_cpp.<name> (registered at import; other ops on first use)."""
    if name not in _registered:
        _registered[name] = _register(name)
    return _registered[name]


_arg_names: dict = {}  # op -> (input names, number of outputs)


def _signature(name: str):
    if name not in _arg_names:
        args, num_inputs = _capi.op_args(name)
        _arg_names[name] = (args[:num_inputs], len(args) - num_inputs)
    return _arg_names[name]


def _shaped(name: str, outs):
    return outs[0] if _signature(name)[1] == 1 else tuple(outs)


_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
try:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # older torch
    def _get_current_dispatch_mode():
        return None
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _eager(tensors) -> bool:
    """Whether a call may skip torch's op dispatch (its custom-op layer costs tens of us a
    call): plain tensors only (no meta, fake, functional, batched or subclass tensors), no
    dispatch mode, functorch transform or torch.compile / export trace active. Anything
    else goes through the registered op, which those machineries understand."""
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or t.is_meta):
            return False
    return not _is_compiling() and _get_current_dispatch_mode() is None and not _functorch_active()


def _direct(name: str, tensors, options: str, share_placeholders: bool = False):
    """Runs op `name` on `tensors` without torch's op layer: the op's output, or a tuple
    (`share_placeholders`: see _outputs)."""
    return _shaped(name, _run(name, _signature(name)[0], list(tensors), options, share_placeholders))


def _dispatch(name: str, tensors, options: str):
    """Runs op `name` on `tensors` (no autograd: a VJP op, or below autograd): directly
    when eager, else through torch.ops."""
    return _direct(name, tensors, options) if _eager(tensors) else op(name)(*tensors, options)


def _register(name: str):
    names, num_outputs = _signature(name)
    params = ", ".join(f"Tensor? {_schema_name(a)}" for a in names)
    returns = "Tensor" if num_outputs == 1 else "(" + ", ".join(["Tensor"] * num_outputs) + ")"
    schema = f"({params}, str options) -> {returns}"

    def impl(*args):
        return _direct(name, args[:-1], args[-1])

    def fake(*args):
        return _shaped(name, _fake(name, names, list(args[:-1]), args[-1]))

    impl.__name__ = fake.__name__ = name
    opdef = _opdefs.BY_NAME.get(name)
    autograd = _autograd_rules(opdef) if opdef is not None and opdef.vjp is not None else None
    register = _register_custom_op if CUSTOM_OP else _register_library_op
    return register(name, schema, impl, fake, autograd)


def _autograd_rules(opdef):
    """(setup_context, backward) of a forward op: the forward keeps its inputs and outputs
    (residuals included), backward calls the VJP op. Both registrations use these."""

    def setup_context(ctx, inputs, output):
        tensors, options = list(inputs[:-1]), inputs[-1]
        outs = [output] if isinstance(output, torch.Tensor) else list(output)
        ctx.options = options
        ctx.present = [t is not None for t in tensors]
        ctx.save_for_backward(*[t for t in tensors if t is not None], *outs)
        ctx.vjp_options = None
        device = _device_of(tensors)
        if device.type == "cuda" and autotuning.scope_active():  # see the module's comment
            ctx.vjp_options = _scoped_vjp_options(opdef, tensors, outs, options, device)

    def backward(ctx, *grads):
        saved = iter(ctx.saved_tensors)
        inputs = [next(saved) if present else None for present in ctx.present]
        outputs = list(saved)
        cotangents = [g if g is not None else torch.zeros_like(o) for g, o in zip(grads, outputs)]
        options = ctx.vjp_options or _capi.options_json(opdef.vjp_options_of(json.loads(ctx.options), inputs))
        result = _dispatch(opdef.vjp, opdef.vjp_input_values(cotangents, inputs, outputs), options)
        result = [result] if isinstance(result, torch.Tensor) else list(result)
        input_grads = [None] * len(inputs)
        for g, i in zip(result, opdef.vjp_grads):
            if inputs[i] is not None and ctx.needs_input_grad[i]:
                input_grads[i] = g if g.dtype == inputs[i].dtype else g.to(inputs[i].dtype)
        return (*input_grads, None)

    return setup_context, backward


def _register_custom_op(name, schema, impl, fake, autograd):
    custom = torch.library.custom_op(f"{_NAMESPACE}::{name}", impl, mutates_args=(), schema=schema)
    custom.register_fake(fake)
    if autograd is not None:
        setup_context, backward = autograd
        custom.register_autograd(backward, setup_context=setup_context)
    return custom


_library = None  # the torch.library.Library of older torch; its registrations live as long as it


def _register_library_op(name, schema, impl, fake, autograd):
    global _library
    if _library is None:
        _library = torch.library.Library(_NAMESPACE, "DEF")
    _library.define(name + schema)
    for key in ("CPU", "CUDA"):
        _library.impl(name, impl, key)
    _library.impl(name, fake, "Meta")  # shapes without data (meta tensors)
    packet = getattr(getattr(torch.ops, _NAMESPACE), name)

    def below(args):
        with _below_autograd():
            return packet(*args)
    if autograd is not None:
        _library.impl(name, _autograd_function(name, below, *autograd), "Autograd")
    else:  # no gradient (paged_attention, the VJP ops): straight below autograd, meta tensors too
        _library.impl(name, lambda *args: below(args), "Autograd")
    return packet


def _autograd_function(name, run, setup_context, backward):
    """A torch.autograd.Function whose forward is run(args) (older torch's Autograd kernel:
    the op below autograd; the eager path: the op's run itself) and whose backward is the
    VJP op's."""

    def forward(ctx, *args):
        output = run(args)
        setup_context(ctx, args, output)
        return output

    function = type(f"{name}_function", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})
    return function.apply


@contextlib.contextmanager
def _below_autograd():
    # A context manager in torch 2.x; a guard that holds while it lives in 1.13.
    guard = torch._C._AutoDispatchBelowAutograd()
    if hasattr(guard, "__enter__"):
        with guard:
            yield
    else:
        try:
            yield
        finally:
            del guard


_eager_functions: dict = {}


def _eager_function(opdef):
    """The eager path's autograd: the op's run with the registered op's autograd rules."""
    if opdef.name not in _eager_functions:
        _eager_functions[opdef.name] = _autograd_function(
            opdef.name + "_eager", lambda args: _direct(opdef.name, args[:-1], args[-1]), *_autograd_rules(opdef))
    return _eager_functions[opdef.name]


def _scoped_vjp_options(opdef, inputs, outs, options: str, device) -> str:
    """The VJP call's options with the implementation and config it resolves to on this
    thread (inside a scope) for the device's arch; the cotangents have the outputs' specs."""
    values = opdef.vjp_input_values(outs, inputs, outs)
    names = _capi.op_args(opdef.vjp)[0][: len(values)]
    vjp_options = _capi.options_json(opdef.vjp_options_of(json.loads(options), inputs))
    call = _capi.get_call(opdef.vjp, _specs(names, values), vjp_options)
    return autotuning.scoped_options(call, _capi.arch_name(*torch.cuda.get_device_capability(device)))


class _TorchBackend:
    name = "torch"

    @staticmethod
    def apply(opdef, inputs, options: dict) -> tuple:
        needs_grad = False
        if torch.is_grad_enabled():
            for t in inputs:
                if t is not None and t.requires_grad:
                    needs_grad = True
                    break
        items = tuple(options.items())
        if opdef.has_residuals:
            items += (("residuals", needs_grad),)
        text = _options_text(items)
        if not _eager(inputs):
            outs = _registered[opdef.name](*inputs, text)
        elif opdef.vjp is not None and needs_grad:
            outs = _eager_function(opdef)(*inputs, text)
        else:
            outs = _direct(opdef.name, inputs, text, share_placeholders=True)
        if isinstance(outs, torch.Tensor):
            return (outs,)  # a one-output op returns it
        returns = opdef.returns
        return (outs[returns[0]],) if len(returns) == 1 else tuple(outs[j] for j in returns)

    @staticmethod
    def stack(tensors, axis: int):
        return torch.stack(list(tensors), dim=axis)

    @staticmethod
    def apply_in_place(op: str, inputs, outputs, options: dict, input_names, output_names) -> None:
        """Runs `op` writing into the caller's `outputs` (contiguous tensors of the call's
        output specs on the inputs' device: an op that updates them in part, such as
        paged_kv_append), eagerly on the current stream; no autograd."""
        from ._host import check_output
        tensors = list(inputs) + list(outputs)
        for name, x in zip(list(input_names) + list(output_names), tensors):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name}: expected a torch tensor like the other arguments, got {type(x).__name__}")
        if not _eager(tensors):
            raise NotImplementedError(f"{op} writes its outputs in place and runs eagerly only (not under "
                                      "torch.compile, fake or meta tensors, or functorch transforms)")
        if torch.is_grad_enabled() and any(x.requires_grad for x in tensors):
            raise ValueError(f"{op} has no gradient: call it under torch.no_grad() or on tensors that do not "
                             "require grad")
        _device_of(tensors)  # one device for all, or a ValueError naming them

        def given(specs):
            for name, o, (shape, dtype) in zip(output_names, outputs, specs):
                check_output(name, o.dtype, o.dtype == dtype, tuple(o.shape), dtype, tuple(shape), o.is_contiguous(),
                             "a contiguous tensor")
            return list(outputs)

        _run(op, input_names, list(inputs), _options_text(tuple(options.items())), given=given)


BACKEND = _TorchBackend()


_texts: dict = {}  # option items, in a call site's order -> their canonical JSON


def _options_text(items) -> str:
    """The canonical JSON of option (key, value) pairs (a later pair of a key wins),
    remembered: a call site's options repeat, in the same order."""
    try:
        text = _texts.get(items)
    except TypeError:  # an unhashable value (a list): made every time
        return _capi.options_json(dict(items))
    if text is None:
        if len(_texts) >= 4096:
            _texts.clear()
        text = _texts[items] = _capi.options_json(dict(items))
    return text


# Under torch.compile the options are constants of the traced program: dynamo calls this
# once while tracing instead of tracing into json (which would break the graph).
if hasattr(torch, "_dynamo") and hasattr(torch._dynamo, "assume_constant_result"):
    _options_text = torch._dynamo.assume_constant_result(_options_text)


def register_all() -> list[str]:
    """Registers every op of the library now (torch.ops.tokamax_cpp.*) and names them."""
    names = [n for n in _capi.op_names() if n in _opdefs.BY_NAME or n.endswith("_vjp") and n[:-4] in _opdefs.BY_NAME]
    for n in names:
        op(n)
    return names


# Registered at import, before any torch.compile trace reaches them.
register_all()


# ---- benchmarking helpers (tokamax_cpp.benchmarking dispatches here) ----

def standardize_function(f, args, kwargs, mode: str, seed):
    """benchmarking.standardize_function for torch tensors: meta tensors are filled with
    random values (on CUDA where available); "vjp" / "forward_and_vjp" return the
    gradients of f's output against a random cotangent."""
    generator = torch.Generator().manual_seed(seed or 0)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def concrete(a):
        if isinstance(a, torch.Tensor) and a.device.type == "meta" and seed is not None:
            return torch.randn(a.shape, generator=generator, dtype=torch.float32).to(device=device, dtype=a.dtype)
        return a

    args = [concrete(a) for a in args]
    kwargs = {k: concrete(v) for k, v in kwargs.items()}
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def g(arrays):
        full = list(args)
        for i, a in zip(positions, arrays):
            full[i] = a
        if mode in ("forward", "forward_res"):
            return f(*full, **kwargs)
        leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in arrays]
        for i, a in zip(positions, leaves):
            full[i] = a
        out = f(*full, **kwargs)
        cotangent = torch.randn(out.shape, generator=generator, dtype=torch.float32).to(out.device, out.dtype)
        wrt = [a for a in leaves if a.requires_grad]
        grads = torch.autograd.grad(out, wrt, cotangent)
        return (out, grads) if mode == "forward_and_vjp" else grads

    return g, tuple(args[i] for i in positions)
