"""The gated delta rule: chunked and recurrent forms against transformers' torch reference and each
other (fp32, lengths not a multiple of the chunk), plus segment resets and no-op padding tokens."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.models import gated_delta as gd

torch = pytest.importorskip("torch")
hf_qwen3_5 = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")

# Jitted, as the model runs them: eagerly, every op of the forms compiled on its own at each new
# shape (the file took 64 s of a test worker)
chunk_rule = jax.jit(gd.chunk_gated_delta_rule, static_argnames=("chunk_size", "use_qk_l2norm"))
recurrent_rule = jax.jit(gd.recurrent_gated_delta_rule, static_argnames=("use_qk_l2norm",))


def _inputs(seed=0, b=2, t=37, k=2, n=4, hk=8, hv=6, state=True):
  """Random q, k [B,T,K,Hk], v [B,T,N,Hv], g (<= 0), beta [B,T,N], state [B,N,Hk,Hv]."""
  rng = np.random.default_rng(seed)

  def f(*s):
    return rng.normal(size=s).astype(np.float32)

  g = (-0.3 * np.exp(f(b, t, n))).astype(np.float32)
  beta = (1.0 / (1.0 + np.exp(-f(b, t, n)))).astype(np.float32)
  s0 = f(b, n, hk, hv) if state else None
  return f(b, t, k, hk), f(b, t, k, hk), f(b, t, n, hv), g, beta, s0


def _rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return np.abs(a - b).max() / np.abs(b).max()


def _torch(fn, q, k, v, g, beta, s0, **kw):
  def t(x):
    return None if x is None else torch.from_numpy(x)

  out, state = fn(
    t(q),
    t(k),
    t(v),
    t(g),
    t(beta),
    initial_state=t(s0),
    output_final_state=True,
    use_qk_l2norm_in_kernel=True,
    **kw,
  )
  return out.numpy(), state.numpy()


@pytest.mark.parametrize("chunk_size", [8, 16, 64])
def test_chunked_matches_transformers(chunk_size):
  args = _inputs()
  ref_out, ref_state = _torch(hf_qwen3_5.torch_chunk_gated_delta_rule, *args, chunk_size=chunk_size)
  q, k, v, g, beta, s0 = args
  out, state = chunk_rule(q, k, v, g, beta, chunk_size=chunk_size, initial_state=s0)
  assert out.shape == ref_out.shape and state.shape == ref_state.shape
  assert _rel(out, ref_out) <= 1e-5
  assert _rel(state, ref_state) <= 1e-5


def test_recurrent_matches_transformers():
  args = _inputs(seed=1, t=19)
  ref_out, ref_state = _torch(hf_qwen3_5.torch_recurrent_gated_delta_rule, *args)
  q, k, v, g, beta, s0 = args
  out, state = recurrent_rule(q, k, v, g, beta, initial_state=s0)
  assert _rel(out, ref_out) <= 1e-5
  assert _rel(state, ref_state) <= 1e-5


@pytest.mark.parametrize("t,chunk_size,state", [(37, 16, True), (45, 64, False), (1, 8, True)])
def test_chunked_equals_recurrent(t, chunk_size, state):
  q, k, v, g, beta, s0 = _inputs(seed=2, t=t, k=1, n=3, state=state)
  out_c, st_c = chunk_rule(q, k, v, g, beta, chunk_size=chunk_size, initial_state=s0)
  out_r, st_r = recurrent_rule(q, k, v, g, beta, initial_state=s0)
  assert _rel(out_c, out_r) <= 1e-5
  assert _rel(st_c, st_r) <= 1e-5


def _split(x, cut):
  return x[:, :cut], x[:, cut:]


@pytest.mark.parametrize("form", ["chunk", "recurrent"])
def test_reset_isolates_packed_segments(form):
  """Row = [segment A (13 tokens) | segment B (24)]; a reset at B's first token makes B's outputs
  and the final state equal to B run alone from a zero state, and A's equal to A alone."""
  q, k, v, g, beta, s0 = _inputs(seed=3, t=37)
  cut = 13
  fn = (
    (lambda *a, **kw: chunk_rule(*a, chunk_size=8, **kw)) if form == "chunk" else (recurrent_rule)
  )
  reset = np.zeros(q.shape[:2], bool)
  reset[:, cut] = True
  out, state = fn(q, k, v, g, beta, initial_state=s0, reset=jnp.asarray(reset))
  parts = [_split(x, cut) for x in (q, k, v, g, beta)]
  out_a, _ = fn(*(p[0] for p in parts), initial_state=s0)
  out_b, state_b = fn(*(p[1] for p in parts))
  assert _rel(out[:, :cut], out_a) <= 1e-5
  assert _rel(out[:, cut:], out_b) <= 1e-5
  assert _rel(state, state_b) <= 1e-5


def test_reset_at_chunk_boundary_and_first_token():
  q, k, v, g, beta, s0 = _inputs(seed=4, t=32)
  reset = np.zeros(q.shape[:2], bool)
  reset[:, 0] = True
  reset[:, 16] = True
  out_c, st_c = chunk_rule(
    q, k, v, g, beta, chunk_size=16, initial_state=s0, reset=jnp.asarray(reset)
  )
  out_r, st_r = recurrent_rule(q, k, v, g, beta, reset=jnp.asarray(reset))
  assert _rel(out_c, out_r) <= 1e-5  # reset at t=0 discards the initial state
  assert _rel(st_c, st_r) <= 1e-5


def test_noop_tokens_leave_state_and_outputs_unchanged():
  """Tokens with g = beta = 0 (how the layer encodes padding) change nothing for the others."""
  q, k, v, g, beta, s0 = _inputs(seed=5, t=20)
  ins = [3, 4, 11]  # pad positions in the longer row
  keep = [i for i in range(23) if i not in ins]

  def widen(x, fill):
    out = np.full((x.shape[0], 23) + x.shape[2:], fill, np.float32)
    out[:, keep] = x
    rng = np.random.default_rng(9)
    if fill is None:
      out[:, ins] = rng.normal(size=out[:, ins].shape)
    return out

  qw, kw, vw = (widen(x, None) for x in (q, k, v))
  gw, bw = widen(g, 0.0), widen(beta, 0.0)
  ref_out, ref_state = recurrent_rule(q, k, v, g, beta, initial_state=s0)
  for fn in (
    lambda *a, **kw: chunk_rule(*a, chunk_size=8, **kw),
    recurrent_rule,
  ):
    out, state = fn(qw, kw, vw, gw, bw, initial_state=s0)
    assert _rel(np.asarray(out)[:, keep], ref_out) <= 1e-5
    assert _rel(state, ref_state) <= 1e-5


def test_chunked_gradients_match_recurrent():
  q, k, v, g, beta, s0 = _inputs(seed=6, t=21, k=1, n=2)
  reset = np.zeros(q.shape[:2], bool)
  reset[:, 9] = True

  def loss(fn, *xs):
    out, state = fn(*xs, initial_state=s0, reset=jnp.asarray(reset))
    return jnp.sum(out * jnp.cos(out)) + jnp.sum(state**2)

  def chunk(*a, **kw):
    return chunk_rule(*a, chunk_size=8, **kw)

  def grads(fn):
    return jax.jit(jax.grad(lambda *xs: loss(fn, *xs), argnums=(0, 1, 2, 3, 4)))(q, k, v, g, beta)

  grads_c, grads_r = grads(chunk), grads(recurrent_rule)
  for gc, gr in zip(grads_c, grads_r, strict=True):
    assert np.isfinite(np.asarray(gc)).all()
    assert _rel(gc, gr) <= 1e-4


def test_bad_head_grouping_is_rejected():
  q, k, v, g, beta, _ = _inputs(k=3, n=4)
  with pytest.raises(ValueError, match="multiple of key heads"):
    chunk_rule(q, k, v, g, beta)


@pytest.mark.parametrize("c", [1, 2, 5, 8, 37, 64])
def test_unit_lower_inverse_solves_like_trsm(c):
  """The explicit inverse of I + strictly_lower(a) solves what LAPACK's unit-lower trsm solves;
  a's diagonal and upper triangle are ignored, as with unit_diagonal=True."""
  rng = np.random.default_rng(c)
  a = jnp.asarray(rng.normal(size=(3, 2, c, c)) * 0.3, jnp.float32)
  b = jnp.asarray(rng.normal(size=(3, 2, c, 7)), jnp.float32)
  want = jax.lax.linalg.triangular_solve(a, b, left_side=True, lower=True, unit_diagonal=True)
  assert _rel(jax.jit(gd.unit_lower_inverse)(a) @ b, want) <= 1e-6


def test_chunked_rule_calls_no_lapack_kernel():
  """The chunked rule and its gradient compile without jaxlib's LAPACK custom calls: on XLA:CPU
  the batched trsm kernel deadlocks the intra-op pool when every worker runs one at once (a
  Qwen3.5 train step with a `sequence` axis spanning every device hung;
  docs/design/long-context.md)."""
  q, k, v, g, beta, s0 = _inputs(seed=7, t=64, n=4)

  def loss(*xs):
    out, state = chunk_rule(*xs, chunk_size=64, initial_state=s0)
    return jnp.sum(out) + jnp.sum(state)

  hlo = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4))).lower(q, k, v, g, beta).as_text()
  assert "lapack" not in hlo and "trsm" not in hlo
