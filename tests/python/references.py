"""float64 numpy references of the ops, written from their definitions (independent of
the library), and the tolerance helper the tests share."""

import math

import numpy as np


def f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def assert_close(actual, expected, rtol, atol, what=""):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=what)


def rng(seed=0):
    return np.random.default_rng(seed)


# ---- norms ----

def layer_norm(x, scale, offset, axis=-1, epsilon=1e-6):
    x = f64(x)
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    y = (x - mean) / np.sqrt(var + epsilon)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    if scale is not None:
        y = y * f64(scale).reshape(shape)
    if offset is not None:
        y = y + f64(offset).reshape(shape)
    return y


def rms_norm(x, scale, axis=-1, epsilon=1e-6):
    x = f64(x)
    y = x / np.sqrt((x * x).mean(axis=axis, keepdims=True) + epsilon)
    if scale is not None:
        shape = [1] * x.ndim
        shape[axis] = x.shape[axis]
        y = y * f64(scale).reshape(shape)
    return y


def layer_norm_vjp(dy, x, scale, axis=-1, epsilon=1e-6):
    """dx, dscale, doffset of sum(dy * layer_norm(x)) (last axis)."""
    x, dy = f64(x), f64(dy)
    assert axis in (-1, x.ndim - 1)
    n = x.shape[-1]
    mean = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon)
    xhat = (x - mean) * rstd
    g = dy * (f64(scale) if scale is not None else 1.0)
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    flat = lambda a: a.reshape(-1, n)
    return dx, (flat(dy) * flat(xhat)).sum(0), flat(dy).sum(0)


# ---- attention ----

def attention(q, k, v, bias=None, mask=None, scale=None, is_causal=False, window=None, soft_cap=None,
              q_lengths=None, kv_lengths=None, sinks=None):
    """q [B, T, N, H], k [B, S, K, H], v [B, S, K, Hv] -> [B, T, N, Hv]; rows attending no
    key give 0. sinks [N]: one more logit of each row's softmax, whose value row is 0."""
    q, k, v = f64(q), f64(k), f64(v)
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    k = np.repeat(k, n // kh, axis=2)
    v = np.repeat(v, n // kh, axis=2)
    scale = 1 / math.sqrt(h) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + f64(bias)
    if soft_cap is not None:
        logits = soft_cap * np.tanh(logits / soft_cap)
    keep = np.ones((b, n, t, s), dtype=bool)
    if mask is not None:
        keep &= np.broadcast_to(np.asarray(mask, dtype=bool), keep.shape)
    i = np.arange(t)[:, None]
    j = np.arange(s)[None, :]
    if is_causal:
        keep &= j <= i
    if window is not None:
        left, right = window
        if left is not None:
            keep &= j >= i - left
        if right is not None:
            keep &= j <= i + right
    if q_lengths is not None:
        keep &= (np.arange(t)[None, :] < np.asarray(q_lengths)[:, None])[:, None, :, None]
    if kv_lengths is not None:
        keep &= (np.arange(s)[None, :] < np.asarray(kv_lengths)[:, None])[:, None, None, :]
    logits = np.where(keep, logits, -np.inf)
    peak = logits.max(-1, keepdims=True)
    sink = None if sinks is None else np.broadcast_to(f64(sinks)[None, :, None, None], peak.shape)
    if sink is not None:
        peak = np.maximum(peak, sink)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    p = np.where(keep, np.exp(logits - peak), 0.0)
    total = p.sum(-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink - peak)
    p = np.divide(p, total, out=np.zeros_like(p), where=total > 0)
    return np.einsum("bnts,bsnh->btnh", p, v)


# ---- gated linear unit, ragged dot, cross-entropy ----

ACTIVATIONS = {
    "swish": lambda a: a / (1 + np.exp(-a)),
    "gelu": lambda a: 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2))),
    "gelu_tanh": lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))),
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
    "relu": lambda a: np.maximum(a, 0),
    "none": lambda a: a,
}


def gated_linear_unit(x, w, activation="swish"):
    x, w = f64(x), f64(w)
    return ACTIVATIONS[activation](x @ w[:, 0, :]) * (x @ w[:, 1, :])


def ragged_dot(lhs, rhs, group_sizes):
    lhs, rhs = f64(lhs), f64(rhs)
    m = lhs.shape[0]
    out = np.zeros((m, rhs.shape[2]))
    start = 0
    for g, size in enumerate(np.asarray(group_sizes)):
        end = min(start + max(int(size), 0), m)
        out[start:end] = lhs[start:end] @ rhs[g]
        start = end
    return out


def cross_entropy(x, labels, w, reduction="sum", ignore_index=-100):
    logits = f64(x) @ f64(w)
    peak = logits.max(-1, keepdims=True)
    lse = (peak + np.log(np.exp(logits - peak).sum(-1, keepdims=True)))[:, 0]
    labels = np.asarray(labels)
    keep = labels != ignore_index
    picked = logits[np.arange(len(labels)), np.where(keep, labels, 0)]
    loss = np.where(keep, lse - picked, 0.0)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / keep.sum()
