"""Per-token log-probabilities and entropies through the LM head.

The backward pass is written by hand (custom VJPs): per chunk of C tokens,
d logits = g_logp (onehot - p) - g_ent p (log p + H), then d hidden = d logits W^T and
d W += hidden^T d logits: one fused elementwise pass and two matmuls (autodiff of the same code
made five passes over the [B, C, V] logits, incl. a scatter-add for the target gather).

Where the backward gets the logits from is the memory/compute trade `save_logits` chooses:
  False: a `lax.scan` over time chunks in both passes; the backward recomputes each chunk's logits
         (one more head matmul: 2 D V FLOPs per token). Peak memory O(B x chunk x V) rather than
         O(B x T x V). The default, and what the trainer uses under any remat policy but "none".
  True:  one head matmul over all tokens whose fp32 logits are kept for the backward (B x T x V x
         4 bytes, e.g. 10 GB for B x T = 16k tokens at V = 152k; the backward still works in
         chunks, so its d logits is one chunk at a time) and no head matmul runs twice: the
         trainer's choice with remat_policy "none", which keeps every activation anyway.
The trainer and the inference server both use `token_logprobs`; `full_logits` is for parity tests
and sampling.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
from jaxtyping import Array, Float, Int

from tmax_jax.models import context_parallel as cp

F32 = jnp.float32


SAVE_LOGITS_MAX_BYTES = 16 << 30  # fp32 logits of one (micro-)batch that "none" may keep


def saves_logits(remat_policy: str, n_tokens: int, vocab: int) -> bool:
  """The trainer's `save_logits`: only remat_policy "none" keeps the logits, and only while the
  [n_tokens, vocab] fp32 logits of a (micro-)batch fit SAVE_LOGITS_MAX_BYTES (global shape: 10 GB
  for Qwen3 at B4 x S4096; beyond that the head recomputes, as under remat)."""
  return remat_policy == "none" and n_tokens * vocab * 4 <= SAVE_LOGITS_MAX_BYTES


def _precision(head_dtype):
  """An fp32 head asks for HIGHEST precision so GPUs do not silently use TF32 for it."""
  return jax.lax.Precision.HIGHEST if jnp.dtype(head_dtype) == F32 else jax.lax.Precision.DEFAULT


def full_logits(
  hidden: Float[Array, "B T D"], head_w: Float[Array, "D V"], head_dtype=F32
) -> Float[Array, "B T V"]:
  """hidden [B,T,D], head_w [D,V] -> logits [B,T,V] float32; both operands cast to head_dtype."""
  return jnp.einsum(
    "btd,dv->btv",
    hidden.astype(head_dtype),
    head_w.astype(head_dtype),
    preferred_element_type=F32,
    precision=_precision(head_dtype),
  ).astype(F32)


def _chunk_logits(h, w, head_dtype, temperature):
  """h [B,C,D], w [D,V] -> logits / temperature [B,C,V] float32."""
  logits = full_logits(h, w, head_dtype)
  return logits / temperature if temperature != 1.0 else logits


def _chunk_stats(
  logits: Float[Array, "B C V"], targets: Int[Array, "B C"]
) -> tuple[Float[Array, "B C"], Float[Array, "B C"], Float[Array, "B C"]]:
  """logits [B,C,V] f32, targets [B,C] -> (logp, entropy, lse) [B,C] float32 each.

  The entropy is lse - E_p[z] with E_p[z] = sum(e^(z-m) z) / sum(e^(z-m)). The two sums are
  two plain reductions, which XLA fuses into one pass; written as one variadic lax.reduce they
  were 2.6x slower on XLA:CPU (not vectorised; docs/design/compiled-flops.md). Forward only
  (the custom VJPs differentiate it)."""
  m = jnp.max(logits, axis=-1, keepdims=True)  # [B,C,1]
  e = jnp.exp(logits - m)
  total, weighted = jnp.sum(e, axis=-1), jnp.sum(e * logits, axis=-1)  # [B,C] each
  lse = m[..., 0] + jnp.log(total)
  target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  entropy = lse - weighted / total
  return target_logit - lse, entropy, lse


def _chunk_grads(h, w, logits, tgt, ent, lse, g_lp, g_en, head_dtype, temperature):
  """One chunk's backward: h [B,C,D], logits [B,C,V] f32 (tempered), tgt/ent/lse/g_* [B,C]
  -> (d h [B,C,D] in h's dtype, d w [D,V] f32)."""
  precision = _precision(head_dtype)
  logp = logits - lse[..., None]  # [B,C,V]
  p = jnp.exp(logp)
  onehot = jnp.arange(logits.shape[-1]) == tgt[..., None]
  # d logp_t / dz = onehot - p;  d H / dz = -p (log p + H)
  dz = jnp.where(onehot, g_lp[..., None], 0.0) - p * (
    g_lp[..., None] + g_en[..., None] * (logp + ent[..., None])
  )
  dz = (dz / temperature if temperature != 1.0 else dz).astype(head_dtype)
  dh = jnp.einsum("bcv,dv->bcd", dz, w, preferred_element_type=F32, precision=precision)
  dw = jnp.einsum(
    "bcd,bcv->dv", h.astype(head_dtype), dz, preferred_element_type=F32, precision=precision
  )
  return dh.astype(h.dtype), dw


# --- recompute: a scan over chunks in both passes, the logits rebuilt chunk by chunk


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _scanned(hs, w, ts, head_dtype, temperature):
  """hs [n,B,C,D], w [D,V], ts [n,B,C] -> (logp, entropy) [n,B,C] float32."""
  return _scanned_fwd(hs, w, ts, head_dtype, temperature)[0]


def _scanned_fwd(hs, w, ts, head_dtype, temperature):
  def step(carry, xs):
    h, tgt = xs
    return carry, _chunk_stats(_chunk_logits(h, w, head_dtype, temperature), tgt)

  _, (logp, ent, lse) = jax.lax.scan(step, None, (hs, ts))
  return (logp, ent), (hs, w, ts, ent, lse)


def _scanned_bwd(head_dtype, temperature, res, cotangents):
  hs, w, ts, ent, lse = res

  def step(dw, xs):
    h, tgt, ent_c, lse_c, g_lp, g_en = xs
    logits = _chunk_logits(h, w, head_dtype, temperature)
    dh, dw_c = _chunk_grads(h, w, logits, tgt, ent_c, lse_c, g_lp, g_en, head_dtype, temperature)
    return dw + dw_c, dh

  dw, dhs = jax.lax.scan(step, jnp.zeros(w.shape, F32), (hs, ts, ent, lse, *cotangents))
  return dhs, dw.astype(w.dtype), None


_scanned.defvjp(_scanned_fwd, _scanned_bwd)


# --- save_logits: one head matmul over all tokens, kept for a chunked backward


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _saved(hidden, w, targets, head_dtype, temperature, chunk):
  """hidden [B,T,D], w [D,V], targets [B,T] -> (logp, entropy) [B,T] float32."""
  return _saved_fwd(hidden, w, targets, head_dtype, temperature, chunk)[0]


def _saved_fwd(hidden, w, targets, head_dtype, temperature, chunk):
  del chunk  # the backward's
  logits = _chunk_logits(hidden, w, head_dtype, temperature)  # [B,T,V]
  logp, ent, lse = _chunk_stats(logits, targets)
  return (logp, ent), (hidden, w, targets, ent, lse, logits)


def _saved_bwd(head_dtype, temperature, chunk, res, cotangents):
  hidden, w, targets, ent, lse, logits = res
  g_logp, g_ent = cotangents
  t = hidden.shape[1]
  dw, dhs = jnp.zeros(w.shape, F32), []
  for i in range(0, t, chunk):  # static slices of the saved logits: one [B,C,V] dz at a time
    c = slice(i, min(i + chunk, t))
    dh, dw_c = _chunk_grads(
      hidden[:, c],
      w,
      logits[:, c],
      targets[:, c],
      ent[:, c],
      lse[:, c],
      g_logp[:, c],
      g_ent[:, c],
      head_dtype,
      temperature,
    )
    dw, dhs = dw + dw_c, dhs + [dh]
  return jnp.concatenate(dhs, axis=1), dw.astype(w.dtype), None


_saved.defvjp(_saved_fwd, _saved_bwd)


def token_logprobs(
  hidden: Float[Array, "B T D"],
  head_w: Float[Array, "D V"],
  targets: Int[Array, "B T"],
  *,
  chunk_size: int = 512,
  head_dtype=F32,
  temperature: float = 1.0,
  save_logits: bool = False,
) -> tuple[Float[Array, "B T"], Float[Array, "B T"]]:
  """log p(targets) and the entropy of the predictive distribution at each position.

  hidden [B,T,D] (final-normed), head_w [D,V], targets [B,T] int -> (logp [B,T], entropy [B,T]),
  both float32. T need not divide chunk_size (the tail is padded and dropped). `temperature` divides
  the logits (sampling temperature), matching the sampler's distribution. save_logits: keep the
  logits for the backward pass instead of recomputing them (see the module docstring); the
  forward pass then is one matmul over all T tokens. Under context parallelism each sequence
  shard does its own tokens (the row is never gathered).
  """
  if cp.splits(hidden.shape[1]):
    local = functools.partial(
      _token_logprobs,
      chunk_size=chunk_size,
      head_dtype=head_dtype,
      temperature=temperature,
      save_logits=save_logits,
    )
    return cp.shard_tokens(
      local, in_specs=(cp.TOKENS, P(), cp.TOKENS), out_specs=(cp.TOKENS, cp.TOKENS)
    )(hidden, head_w, targets)
  return _token_logprobs(
    hidden,
    head_w,
    targets,
    chunk_size=chunk_size,
    head_dtype=head_dtype,
    temperature=temperature,
    save_logits=save_logits,
  )


def _token_logprobs(hidden, head_w, targets, *, chunk_size, head_dtype, temperature, save_logits):
  b, t, d = hidden.shape
  chunk = min(chunk_size, t)
  w = head_w.astype(head_dtype)
  targets = targets.astype(jnp.int32)
  args = (jnp.dtype(head_dtype), float(temperature))
  if save_logits:
    with jax.named_scope("lm_head"):
      return _saved(hidden, w, targets, *args, chunk)
  n_chunks = -(-t // chunk)
  pad = n_chunks * chunk - t
  if pad:
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
  hs = hidden.reshape(b, n_chunks, chunk, d).swapaxes(0, 1)  # [n,B,C,D]
  ts = targets.reshape(b, n_chunks, chunk).swapaxes(0, 1)  # [n,B,C]
  with jax.named_scope("lm_head"):
    logp, ent = _scanned(hs, w, ts, *args)
  logp = logp.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
  ent = ent.swapaxes(0, 1).reshape(b, n_chunks * chunk)[:, :t]
  return logp, ent
