"""The headline chain's layer norm as a JAX user writes it (headline.py, seed_accuracy.py)."""


def layer_norm(t, s, eps):
    """Statistics in f32 over the last axis, scaled by s, the result cast back to t's dtype."""
    import jax
    import jax.numpy as jnp

    tf = t.astype(jnp.float32)
    mean = tf.mean(-1, keepdims=True)
    var = jnp.square(tf - mean).mean(-1, keepdims=True)
    return ((tf - mean) * jax.lax.rsqrt(var + eps) * s).astype(t.dtype)
