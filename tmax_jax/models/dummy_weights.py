"""Random weights whose replies end: to try the server, the evals and Harbor without a checkpoint.

A plainly random model never samples its end-of-turn token (1 in ~150k per step for Qwen3), so
every reply runs to max_tokens: an eval turn to its 16384-token cap, and Harbor's terminus-2, which
sends no max_tokens and asks again after a truncated reply, never gets a turn back. `end_replies`
reshapes a random init of any family so that a reply sampled at temperature 1 ends after about
`mean_tokens` random tokens, at the same compute cost per token:

  * every parameter under `model` but the embedding and the final norm is zeroed: each residual
    branch ends in a zero projection, so the final hidden state is the current token's embedding,
    normalised (the final norm's weight is 1, as at init);
  * dimension 0 of every embedding is a constant that dominates the row, so after the norm it is
    nearly the same for every token;
  * the head reads dimension 0 into the end-of-turn token only, with the weight that gives it
    probability 1 / mean_tokens against the other tokens' (random) logits, measured on a sample of
    tokens. Tied embeddings get the same through the embedding row of that token.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig

F32 = jnp.float32
KEPT = ("embed_tokens", "norm")  # the children of params["model"] that are not zeroed
DOMINANCE = 4.0  # dimension 0 of an embedding / the norm of the rest of its row
SAMPLE_TOKENS = 64  # tokens the end-of-turn logit is calibrated on


def end_replies(
  params: Any, cfg: ModelConfig, mean_tokens: int, shardings: Any = None, stop: int | None = None
) -> Any:
  """`params` (a random init of `cfg`, consumed) reshaped so that replies sampled at temperature 1
  end with token `stop` (default: the family's end-of-turn token) after about `mean_tokens` tokens
  (module docstring); created in `shardings` when given. ValueError for mean_tokens < 2 or a stop
  id outside the vocabulary; UnsupportedConfigError for a model type without a registered
  tokenizer (no end-of-turn token to end on) and no `stop`."""
  if mean_tokens < 2:
    raise ValueError(f"mean_tokens={mean_tokens}: a reply ends after >= 2 tokens on average")
  if stop is None:
    stop = registry.tokenizer_for(cfg.model_type).eos_token_id
  if not 0 <= stop < cfg.vocab_size:
    raise ValueError(
      f"the end-of-turn token {stop} is outside the model's vocab_size={cfg.vocab_size}"
    )
  fn = functools.partial(_end_replies, cfg=cfg, stop=stop, mean_tokens=mean_tokens)
  return jax.jit(fn, out_shardings=shardings, donate_argnums=0)(params)


def _end_replies(params, *, cfg: ModelConfig, stop: int, mean_tokens: int):
  model = dict(params["model"])
  for name in model:
    if name not in KEPT:
      model[name] = jax.tree.map(jnp.zeros_like, model[name])
  norm = model["norm"]["scale"]
  model["norm"] = {"scale": jnp.zeros_like(norm) if cfg.norm_zero_centered else jnp.ones_like(norm)}
  emb = model["embed_tokens"]["embedding"].astype(F32)  # [V, D]
  rest = jnp.mean(jnp.linalg.norm(emb[:, 1:], axis=-1))
  emb = emb.at[:, 0].set(DOMINANCE * rest)
  # [D, V]: tied, the head is the embedding, so the end-of-turn row carries its weight
  head = emb.T if cfg.tie_word_embeddings else params["lm_head"]["kernel"].astype(F32)
  if not cfg.tie_word_embeddings:
    head = head.at[0, :].set(0.0)
  head = head.at[:, stop].set(0.0)
  sample = emb[:: max(1, cfg.vocab_size // SAMPLE_TOKENS)]  # [S, D]
  x = sample * jax.lax.rsqrt(jnp.mean(sample * sample, -1, keepdims=True) + cfg.rms_norm_eps)
  logits = (x @ head).at[:, stop].set(-jnp.inf)  # [S, V]: the other tokens' logits
  # p(stop) = 1 / mean_tokens  <=>  x0 * w = logsumexp(others) - log(mean_tokens - 1)
  weight = jnp.mean((jax.nn.logsumexp(logits, axis=-1) - math.log(mean_tokens - 1)) / x[:, 0])
  head = head.at[0, stop].set(weight)
  if cfg.tie_word_embeddings:
    emb = head.T
  else:
    params = dict(params, lm_head={"kernel": head.astype(params["lm_head"]["kernel"].dtype)})
  dtype = params["model"]["embed_tokens"]["embedding"].dtype
  model["embed_tokens"] = {"embedding": emb.astype(dtype)}
  return dict(params, model=model)
