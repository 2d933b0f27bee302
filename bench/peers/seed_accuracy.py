#!/usr/bin/env python3
"""Accuracy of the headline gradient against float64, beside JAX's bf16 version of it.

Reads what tools/tokamax-headline-grad wrote to DIR (x, scale, and loss, dx, dscale of
tokamax's headline and of its variants on reference implementations; meta.json) and
compares each with the same chain in float64 (torch autograd, on the GPU if there is one):

    l1 = layer_norm(x, scale)  a1 = attention(l1, l1, l1)  l2 = layer_norm(a1, scale)
    out = attention(l2, l2, l2)  loss = sum(out);  d loss / d x, d loss / d scale

layer_norm over the last axis with scale and no offset, attention not causal, layout
[B, T, N, H]; the epsilons and attention scales are the ones the tool traced (meta.json).
Every figure is a relative L2 norm of the difference, ||got - f64|| / ||f64||.

Also measured: JAX's chain in bf16 (jitted jax.value_and_grad; attention by
jax.nn.dot_product_attention with implementation "cudnn", then "xla"), run in a child
process so that its CUDA libraries never meet torch's; and two floors, the float64 chain
with tensors rounded to bf16 where tokamax and JAX store bf16: the forward's l1, a1, l2,
out, then also the cotangents between the ops and dx.

    python3 bench/peers/seed_accuracy.py DIR [--json FILE] [--dry]

--dry (or no torch / no jax) skips what is missing and still prints tokamax's variants
against its all-reference run; numpy is needed in every case.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("seed_accuracy.py needs numpy (pip install numpy)")

OURS = [("tokamax headline", ""), ("tokamax all reference", "_reference"),
        ("tokamax attention on reference", "_attention_reference"),
        ("tokamax norms on reference", "_norms_reference")]
JAX_IMPLEMENTATIONS = ("cudnn", "xla")


def load(directory):
    """meta.json and every .npy it names, as float64 arrays."""
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    names = [entry["file"] for entry in meta["inputs"].values()]
    names += [name for v in meta["variants"].values() for name in v["files"].values()]
    arrays = {name: np.load(os.path.join(directory, name)).astype(np.float64) for name in names}
    return meta, arrays


def rel_l2(got, ref):
    got, ref = np.asarray(got, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-300))


def errors(got, ref):
    """{loss, dx, dscale} relative errors of `got` against `ref` (both (loss, dx, dscale))."""
    return {key: rel_l2(g, r) for key, g, r in zip(("loss", "dx", "dscale"), got, ref)}


def ours(arrays, suffix):
    return tuple(arrays[f"{what}{suffix}.npy"] for what in ("loss", "dx", "dscale"))


# ---- float64 (torch) ----

def float64_runs(x, scale, meta):
    """(loss, dx, dscale) of the exact chain and of the two floors, and the attention peaks
    (mean over rows of the largest softmax weight: near 1, each query attends to itself)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"float64 chain on {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'} (torch {torch.__version__})")
    eps1, eps2 = meta["epsilons"]
    s1, s2 = meta["attention_scales"]

    class StoreBf16(torch.autograd.Function):
        """A tensor stored in bf16: rounded in the forward; its cotangent passes through,
        rounded to bf16 too when `cotangents` is set."""

        @staticmethod
        def forward(ctx, t, cotangents):
            ctx.cotangents = cotangents
            return t.to(torch.bfloat16).to(t.dtype)

        @staticmethod
        def backward(ctx, g):
            return (g.to(torch.bfloat16).to(g.dtype) if ctx.cotangents else g), None

    def layer_norm(t, s, eps):
        mean = t.mean(-1, keepdim=True)
        var = ((t - mean) ** 2).mean(-1, keepdim=True)
        return (t - mean) * torch.rsqrt(var + eps) * s

    peaks = []

    def attention(q, k, v, scale_):
        p = torch.softmax(torch.einsum("btnh,bsnh->bnts", q, k) * scale_, dim=-1)
        peaks.append(float(p.detach().amax(-1).mean()))
        return torch.einsum("bnts,bsnh->btnh", p, v)

    def run(store):
        xt = torch.tensor(x, dtype=torch.float64, device=device, requires_grad=True)
        st = torch.tensor(scale, dtype=torch.float64, device=device, requires_grad=True)
        l1 = store(layer_norm(store(xt), st, eps1))  # store(x): rounds dx where it is bf16
        a1 = store(attention(l1, l1, l1, s1))
        l2 = store(layer_norm(a1, st, eps2))
        loss = store(attention(l2, l2, l2, s2)).sum()
        loss.backward()
        result = (np.array([loss.item()]), xt.grad.cpu().numpy(), st.grad.cpu().numpy())
        del xt, st, l1, a1, l2, loss
        if device == "cuda":
            torch.cuda.empty_cache()
        return result

    runs = {"float64": run(lambda t: t)}
    attention_peaks = peaks[:2]
    runs["floor: f64, forward stored in bf16"] = run(lambda t: StoreBf16.apply(t, False))
    runs["floor: f64, forward and cotangents in bf16"] = run(lambda t: StoreBf16.apply(t, True))
    return runs, attention_peaks


# ---- JAX (bf16), in a child process ----

def jax_worker(directory, out_path):
    """Runs JAX's chain on the tool's inputs; writes {impl}_{loss,dx,dscale} and a status
    line per implementation to out_path (npz)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    meta, arrays = load(directory)
    eps1, eps2 = meta["epsilons"]
    s1, s2 = meta["attention_scales"]
    x = jnp.asarray(arrays["x.npy"], dtype=jnp.bfloat16)  # bf16 values: exact
    scale = jnp.asarray(arrays["scale.npy"], dtype=jnp.float32)
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind} ({jax.default_backend()})")

    from jax_chain import layer_norm  # as a user writes it: f32 statistics, bf16 result

    def loss(xx, ss, implementation):
        l1 = layer_norm(xx, ss, eps1)
        a1 = jax.nn.dot_product_attention(l1, l1, l1, scale=s1, implementation=implementation)
        l2 = layer_norm(a1, ss, eps2)
        out = jax.nn.dot_product_attention(l2, l2, l2, scale=s2, implementation=implementation)
        return jnp.sum(out.astype(jnp.float32))

    results = {}
    for implementation in JAX_IMPLEMENTATIONS:
        try:
            step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)), static_argnums=2)
            value, (dx, dscale) = step(x, scale, implementation)
            results[f"{implementation}_loss"] = np.array([float(value)])
            results[f"{implementation}_dx"] = np.asarray(dx.astype(jnp.float32))
            results[f"{implementation}_dscale"] = np.asarray(dscale)
            results[f"{implementation}_status"] = np.array("ok")
        except Exception as e:  # cuDNN missing or refusing the call, out of memory, ...
            why = str(e).strip().splitlines()[0] if str(e).strip() else ""
            results[f"{implementation}_status"] = np.array(f"skipped: {type(e).__name__}: {why[:200]}")
    results["backend"] = np.array(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    np.savez(out_path, **results)


def jax_runs(directory):
    """{implementation: (loss, dx, dscale) or 'skipped: why'} from a child process."""
    out_path = os.path.join(directory, "jax-results.npz")
    try:
        child = subprocess.run([sys.executable, os.path.abspath(__file__), directory, "--jax-worker", out_path],
                               timeout=480)
    except subprocess.TimeoutExpired:
        return {impl: "skipped: JAX took over 480 s" for impl in JAX_IMPLEMENTATIONS}, ""
    if child.returncode != 0 or not os.path.exists(out_path):
        return {impl: f"skipped: the JAX process failed (exit {child.returncode})" for impl in JAX_IMPLEMENTATIONS}, ""
    saved = np.load(out_path)
    runs = {}
    for impl in JAX_IMPLEMENTATIONS:
        status = str(saved[f"{impl}_status"])
        runs[impl] = tuple(saved[f"{impl}_{w}"] for w in ("loss", "dx", "dscale")) if status == "ok" else status
    return runs, str(saved["backend"])


def have(module):
    """Whether `module` is installed (found, not imported: JAX must not start here)."""
    return importlib.util.find_spec(module) is not None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="what tokamax-headline-grad wrote")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--dry", action="store_true", help="no float64 or JAX runs: check the files only")
    parser.add_argument("--jax-worker", metavar="NPZ", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jax_worker:
        return jax_worker(args.dir, args.jax_worker)

    meta, arrays = load(args.dir)
    print(f"{args.dir}: shape {meta['shape']}, seed {meta['seed']}, {meta['device']}; "
          f"epsilons {meta['epsilons']}, attention scales {meta['attention_scales']}")
    for name, v in meta["variants"].items():
        print(f"  {name:20} {', '.join(c for c in v['forward'] if not c.startswith(('cast', 'sum')))}")
    result = {"dir": args.dir, "tool": {k: meta[k] for k in ("shape", "seed", "device", "arch", "inputs")}}

    # Against tokamax's all-reference run: needs nothing but the files.
    reference = ours(arrays, "_reference")
    result["vs_tokamax_reference"] = {name: errors(ours(arrays, s), reference) for name, s in OURS if s != "_reference"}

    rows = {}
    if args.dry or not have("torch"):
        float64 = None
        why = "skipped: --dry" if args.dry else "skipped: torch not installed"
        rows.update({name: why for name, _ in OURS})
    else:
        runs, peaks = float64_runs(arrays["x.npy"], arrays["scale.npy"], meta)
        float64 = runs.pop("float64")
        result["attention_peaks"] = peaks
        rows.update({name: errors(ours(arrays, s), float64) for name, s in OURS})
    if float64 is None or args.dry or not have("jax"):
        why = "skipped: --dry" if args.dry else ("skipped: no float64 reference" if float64 is None
                                                 else "skipped: jax not installed")
        rows.update({f"jax {impl}": why for impl in JAX_IMPLEMENTATIONS})
    else:
        jax, backend = jax_runs(args.dir)
        result["jax"] = backend
        rows.update({f"jax {impl}": (errors(r, float64) if isinstance(r, tuple) else r) for impl, r in jax.items()})
    if float64 is not None:
        rows.update({name: errors(r, float64) for name, r in runs.items()})

    print(f"\nrelative L2 error against float64 (attention peaks {result.get('attention_peaks', 'n/a')})")
    print(f"  {'':44} {'loss':>10} {'dx':>10} {'dscale':>10}")
    for name, row in rows.items():
        line = row if isinstance(row, str) else " ".join(f"{row[k]:10.3e}" for k in ("loss", "dx", "dscale"))
        print(f"  {name:44} {line}")
    print("\nagainst tokamax's all-reference run")
    for name, row in result["vs_tokamax_reference"].items():
        print(f"  {name:44} " + " ".join(f"{row[k]:10.3e}" for k in ("loss", "dx", "dscale")))
    result["vs_float64"] = rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
