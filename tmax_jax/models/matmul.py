"""The projection matmul every layer uses, with a hand-written VJP that picks the weight-gradient
operand order, and the SwiGLU MLP built on it (fewer saved residuals).

Autodiff of `x @ w` computes the weight gradient as (dy^T x)^T. XLA's CPU dot (YNNPACK) wants its
contraction on the minor axis of both operands, so one operand of the weight-gradient dot is
materialised transposed, and with autodiff's order that is dy, often the wider one (the MLP's
[B*T, F] gradient, F = 3 D), with the producing elementwise fusion (the SwiGLU backward) fused into
the transposed write: on the bench's fwd+bwd that one fusion was 1/5 of the whole step (see
docs/design/compiled-flops.md). Here the transposed operand is always the narrower of x and
dy, and the result is transposed back when that is dy (a weight-sized transpose, 1/T the size).
On GPU/TPU the dot takes any operand layout and the transposes fold away; the FLOPs are identical.

Shapes: x [..., I1..Ik] (k = n_in contracted trailing axes), w [I1..Ik, O1..Om], y [..., O1..Om].
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp


def _contract(a, b, a_axes, b_axes):
  return jax.lax.dot_general(a, b, ((tuple(a_axes), tuple(b_axes)), ((), ())))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def linear(x: jax.Array, w: jax.Array, n_in: int = 1) -> jax.Array:
  """y = x contracted with w over x's last `n_in` axes and w's first `n_in` axes."""
  return _contract(x, w, range(x.ndim - n_in, x.ndim), range(n_in))


def _linear_fwd(x, w, n_in):
  return linear(x, w, n_in), (x, w)


def weight_grad(x: jax.Array, dy: jax.Array, batch: int) -> jax.Array:
  """x [..., I...], dy [..., O...] with `batch` leading axes -> dW [I..., O...] (contracting the
  batch axes), with the narrower of x and dy as the operand the dot transposes."""
  n_in, n_out = x.ndim - batch, dy.ndim - batch
  if math.prod(x.shape[batch:]) <= math.prod(dy.shape[batch:]):  # transposed operand: x
    return _contract(x, dy, range(batch), range(batch))  # [I..., O...]
  dw_t = _contract(dy, x, range(batch), range(batch))  # [O..., I...]: then back (weight-sized)
  return jnp.transpose(dw_t, tuple(range(n_out, n_out + n_in)) + tuple(range(n_out)))


def _linear_bwd(n_in, res, dy):
  x, w = res
  batch = x.ndim - n_in
  dx = _contract(dy, w, range(batch, dy.ndim), range(n_in, w.ndim))  # [..., I]
  return dx.astype(x.dtype), weight_grad(x, dy, batch).astype(w.dtype)


linear.defvjp(_linear_fwd, _linear_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def swiglu(x: jax.Array, wg: jax.Array, wu: jax.Array, wd: jax.Array, constrain=None) -> jax.Array:
  """down(silu(x wg) * (x wu)): x [..., D], wg/wu [D, F], wd [F, D] -> [..., D].

  The backward keeps only x and the two [..., F] projections and recomputes silu and the product
  (elementwise) instead of the four F-wide residuals autodiff keeps; under scanned layers each
  residual is a stacked [L, ..., F] buffer written, copied and read once per step. `constrain`
  (optional) is applied to the [..., F] activations (their sharding).
  """
  return _swiglu_fwd(x, wg, wu, wd, constrain)[0]


def _swiglu_fwd(x, wg, wu, wd, constrain):
  keep = constrain or (lambda a: a)
  g, u = keep(_contract(x, wg, (x.ndim - 1,), (0,))), keep(_contract(x, wu, (x.ndim - 1,), (0,)))
  h = keep(jax.nn.silu(g) * u)
  return _contract(h, wd, (h.ndim - 1,), (0,)), (x, g, u, wg, wu, wd)


def _swiglu_bwd(constrain, res, dy):
  keep = constrain or (lambda a: a)
  x, g, u, wg, wu, wd = res
  batch = x.ndim - 1
  sig = jax.nn.sigmoid(g)
  act = g * sig  # silu(g)
  dh = keep(_contract(dy, wd, (batch,), (1,)))  # [..., F]
  du = keep(dh * act)
  dg = keep(dh * u * sig * (1 + g * (1 - sig)))  # silu'(g) = sig (1 + g (1 - sig))
  dx = _contract(du, wu, (batch,), (1,)) + _contract(dg, wg, (batch,), (1,))
  dwd = weight_grad(act * u, dy, batch)
  return (
    dx.astype(x.dtype),
    weight_grad(x, dg, batch).astype(wg.dtype),
    weight_grad(x, du, batch).astype(wu.dtype),
    dwd.astype(wd.dtype),
  )


swiglu.defvjp(_swiglu_fwd, _swiglu_bwd)


_OURS = ("linear", "swiglu")


def _is_ours(params: dict) -> bool:
  """Whether a custom_vjp_call is `linear` or `swiglu` of this module (by its traced source)."""
  jaxpr = getattr(params.get("call_jaxpr"), "jaxpr", None)
  src = getattr(getattr(jaxpr, "debug_info", None), "func_src_info", None) or ""
  name, _, where = src.partition(" at ")
  return name in _OURS and where.startswith(__file__)


def saving_projections(policy):
  """`policy` (a dot-saving remat policy) that also saves the outputs of `linear` and `swiglu`.

  A custom_vjp_call is opaque to jax.checkpoint_policies.checkpoint_dots and its kin (they look
  for dot_general), so under "dots" every projection output was recomputed in the backward (q, k,
  v feed the norms and rotary there): +0.06 compiled/model FLOPs on the Qwen3-1.7B step. Our
  projections are batch-free dots, so this matches what the policy saves without custom VJPs."""

  def save(prim, *args, **params):
    if prim.name == "custom_vjp_call" and _is_ours(params):
      return True
    return policy(prim, *args, **params)

  return save
