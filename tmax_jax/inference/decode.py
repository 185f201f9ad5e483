"""The jitted decode core behind TmaxEngine: prefill / insert / generate on a per-slot cache.

Kept free of JetStream imports so benchmarks (bench/gpu_decode.py) run where only JAX/Flax exist.
Family-agnostic: only the Model API is used (`init_cache`, `apply(..., cache=)`, `head_weight`),
and the only assumption about the cache pytree is that every leaf is `[L, B, ...]`.

Protocol (see engine.py): prefill writes tokens[0:n-1] into a batch-1 cache of the full length S
and keeps tokens[n-1] as the slot's next input; insert copies that whole row into slot b; generate
feeds every slot's pending token, samples with the fp32 head and returns data [B, 5] int32:
[token, valid, length, float32 bits of the behaviour logprob, policy version].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from tmax_jax.inference import sampling
from tmax_jax.models import logprobs as logprobs_lib
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig

TOKEN, VALID, LENGTH, LOGPROB, VERSION = range(5)  # columns of generate's data


def slot_arrays(p: sampling.SamplingParams) -> dict[str, jax.Array]:
  """Per-request sampling settings as the per-slot scalars of the decode state. The seed is taken
  modulo 2^31 (PRNGKey silently keeps only 32 bits without x64)."""
  return dict(temperature=jnp.float32(p.temperature), top_p=jnp.float32(p.top_p),
              top_k=jnp.int32(p.top_k), key=jax.random.PRNGKey(p.seed % (1 << 31)))


class DecodeCore:
  """Jitted prefill/insert/generate for `slots` concurrent sequences of up to `max_len` tokens."""

  def __init__(self, model_cfg: ModelConfig, slots: int, max_len: int):
    self.model_cfg, self.slots, self.max_len = model_cfg, slots, max_len
    self.model = registry.build_model(model_cfg)
    self.prepare = jax.jit(self._prepare_impl)
    self.prefill_cache = jax.jit(self._prefill_impl)
    self.insert = jax.jit(self._insert_impl, donate_argnums=(1,))
    self.generate = jax.jit(self._generate_impl, donate_argnums=(1,))

  def init_state(self) -> dict[str, jax.Array]:
    b = self.slots
    return dict(
        cache=self.model.init_cache(b, self.max_len),
        token=jnp.zeros((b,), jnp.int32), position=jnp.zeros((b,), jnp.int32),
        counter=jnp.zeros((b,), jnp.int32), active=jnp.zeros((b,), jnp.bool_),
        temperature=jnp.zeros((b,), jnp.float32), top_p=jnp.ones((b,), jnp.float32),
        top_k=jnp.zeros((b,), jnp.int32), key=jnp.zeros((b, 2), jnp.uint32))

  def prefill(self, params, tokens, true_length: int,
              sp: sampling.SamplingParams) -> dict[str, jax.Array]:
    """tokens [P] (right-padded) -> prefix: batch-1 cache + pending token + sampling settings."""
    if not 1 <= true_length <= self.max_len:
      raise ValueError(f"prompt length {true_length} must be in [1, max_len={self.max_len}]")
    tokens = jnp.asarray(tokens, jnp.int32)
    cache = self.prefill_cache(params, tokens, jnp.int32(true_length))
    return dict(cache=cache, token=tokens[true_length - 1], position=jnp.int32(true_length - 1),
                **slot_arrays(sp))

  def _prefill_impl(self, params, tokens, true_length):
    """tokens [P] int32, true_length [] -> batch-1 cache with tokens[0:n-1] written."""
    p = tokens.shape[0]
    positions = jnp.arange(p, dtype=jnp.int32)[None, :]  # [1,P]
    segments = (positions < true_length - 1).astype(jnp.int32)  # [1,P]; the last token waits
    cache = self.model.init_cache(1, self.max_len)
    _, cache = self.model.apply({"params": params}, tokens[None, :], positions, segments,
                                cache=cache)
    return cache

  def _insert_impl(self, prefix, state, slot):
    """Writes the batch-1 prefix into row `slot` of every [L,B,...] leaf and per-slot vector."""

    def put_row(dst, src):  # dst [L,B,...], src [L,1,...]
      start = (0, slot) + (0,) * (dst.ndim - 2)
      return jax.lax.dynamic_update_slice(dst, src.astype(dst.dtype), start)

    new = dict(state)
    new["cache"] = jax.tree.map(put_row, state["cache"], prefix["cache"])
    for name in ("token", "position", "temperature", "top_p", "top_k", "key"):
      new[name] = state[name].at[slot].set(prefix[name])
    new["counter"] = state["counter"].at[slot].set(0)
    new["active"] = state["active"].at[slot].set(True)
    return new

  def _prepare_impl(self, params):
    """-> what `generate` takes: {params, head [D,V] already in the head dtype}. Done once per
    weight version, so decode steps do not re-cast (and, when tied, re-transpose) the head."""
    cfg = self.model_cfg
    return {"params": params, "head": registry.head_weight(params, cfg).astype(cfg.dtypes.head)}

  def _generate_impl(self, served, state, version):
    """One decode step for every slot; `served` from `prepare` -> (state, data [B,5] int32)."""
    cfg = self.model_cfg
    params = served["params"]
    live = state["active"] & (state["position"] < self.max_len)  # [B]
    hidden, cache = self.model.apply(
        {"params": params}, state["token"][:, None], state["position"][:, None],
        live.astype(jnp.int32)[:, None], cache=state["cache"])  # hidden [B,1,D]
    logits = logprobs_lib.full_logits(hidden, served["head"], cfg.dtypes.head)[:, 0]  # [B,V] fp32
    tokens, logp = sampling.sample(logits, state["key"], state["counter"], state["temperature"],
                                   state["top_p"], state["top_k"])
    counter = state["counter"] + 1
    data = jnp.stack([
        tokens, live.astype(jnp.int32), counter,
        jax.lax.bitcast_convert_type(logp, jnp.int32),
        jnp.broadcast_to(jnp.asarray(version, jnp.int32), tokens.shape)], axis=1)  # [B,5]
    new = dict(state, cache=cache, token=tokens, position=state["position"] + 1, counter=counter)
    return new, data


def decode_row(data: np.ndarray, slot: int) -> tuple[int, bool, int, float, int]:
  """Host side: (token, valid, length, logprob, version) of one slot from generate's data."""
  row = np.asarray(data[slot])
  logp = float(row[LOGPROB:LOGPROB + 1].view(np.float32)[0])
  return int(row[TOKEN]), bool(row[VALID]), int(row[LENGTH]), logp, int(row[VERSION])
