"""Policy losses (DPPO, GRPO) and the k3 KL penalty, as pure per-token functions.

Every policy loss has the signature `fn(x: PolicyInputs, **hyper) -> PolicyTerms` and is registered
under kind "policy_loss". Per-token losses are NOT aggregated here: the trainer multiplies them by
the aggregation weights of the whole optimizer batch (see aggregation.py), which keeps gradient
accumulation exact. Formulas: ../shared/docs/recipe.md (DPPO section).
"""

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from tmax_jax.rl.registry import register

# Trust-region thresholds of the recipe, per divergence (used when the config leaves delta unset).
DEFAULT_DELTA = {"tv": 0.1, "kl": 0.05, "topk_tv": 0.1, "topk_kl": 0.05}
PROB_EPS = 1e-9  # recipe: clamp probabilities to [1e-9, 1 - 1e-9] in the binary KL
DEFAULT_DIVERGENCE = "tv"
GRPO_CLIP_LOW = 0.2  # recipe baseline: clip low 0.2, clip high 0.272
GRPO_CLIP_HIGH = 0.272


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PolicyInputs:
  """Per-token inputs of a policy loss; every array is [B, T] float32 unless noted.

  logp: current-policy logprob of the sampled token (differentiable).
  behaviour_logp: logprob the sampler returned for that token (mu), constant.
  advantages: A, the same value on every token of a response.
  mask: 1 on response tokens that carry loss, 0 elsewhere (prompt, observations, padding).
  topk_logp / behaviour_topk_logp: [B, T, K] current / behaviour logprobs at the behaviour's top-K
    token ids (only for the top-K DPPO variant).
  """

  logp: jax.Array
  behaviour_logp: jax.Array
  advantages: jax.Array
  mask: jax.Array
  topk_logp: Optional[jax.Array] = None
  behaviour_topk_logp: Optional[jax.Array] = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PolicyTerms:
  """loss: [B, T] per-token loss, exactly 0 where mask == 0 or the token is dropped.
  kept: [B, T] float32, 1 on response tokens that contribute gradient (mask AND not dropped).
  """

  loss: jax.Array
  kept: jax.Array


def log_ratio(x: PolicyInputs) -> jax.Array:
  """log r = logp - behaviour_logp, forced to 0 off the mask.

  Zeroing before exp keeps padding garbage (inf/NaN behaviour logprobs) out of both the value and the
  gradient: a NaN under jnp.where would still poison the backward pass.
  """
  on = x.mask > 0
  return jnp.where(on, x.logp - jnp.where(on, x.behaviour_logp, 0.0), 0.0)  # [B, T]


def binary_tv(logp: jax.Array, behaviour_logp: jax.Array) -> jax.Array:
  """|pi - mu| of the sampled token. [B, T] -> [B, T]."""
  return jnp.abs(jnp.exp(logp) - jnp.exp(behaviour_logp))


def binary_kl(logp: jax.Array, behaviour_logp: jax.Array) -> jax.Array:
  """KL(mu || pi) over {sampled token, rest}, probabilities clamped to [1e-9, 1-1e-9]."""
  pi = jnp.clip(jnp.exp(logp), PROB_EPS, 1.0 - PROB_EPS)
  mu = jnp.clip(jnp.exp(behaviour_logp), PROB_EPS, 1.0 - PROB_EPS)
  return mu * jnp.log(mu / pi) + (1.0 - mu) * jnp.log((1.0 - mu) / (1.0 - pi))


def _rest(p_topk: jax.Array) -> jax.Array:
  """Probability left outside the K listed tokens, clamped away from 0 for the logs. [B,T,K] -> [B,T]."""
  return jnp.clip(1.0 - jnp.sum(p_topk, axis=-1), PROB_EPS, 1.0)


def topk_tv(topk_logp: jax.Array, behaviour_topk_logp: jax.Array) -> jax.Array:
  """TV over the behaviour's top-K tokens plus one rest bucket. [B, T, K] -> [B, T]."""
  pi, mu = jnp.exp(topk_logp), jnp.exp(behaviour_topk_logp)
  return 0.5 * (jnp.sum(jnp.abs(pi - mu), axis=-1) + jnp.abs(_rest(pi) - _rest(mu)))


def topk_kl(topk_logp: jax.Array, behaviour_topk_logp: jax.Array) -> jax.Array:
  """KL(mu || pi) over the behaviour's top-K tokens plus one rest bucket. [B, T, K] -> [B, T]."""
  mu = jnp.exp(behaviour_topk_logp)
  rest_mu, rest_pi = _rest(mu), _rest(jnp.exp(topk_logp))
  head = jnp.sum(mu * (behaviour_topk_logp - topk_logp), axis=-1)
  return head + rest_mu * (jnp.log(rest_mu) - jnp.log(rest_pi))


def divergence(x: PolicyInputs, kind: str) -> jax.Array:
  """Per-token divergence between behaviour and current policy, on stop-gradient inputs. [B, T]."""
  logp = jax.lax.stop_gradient(x.logp)
  blp = jnp.where(x.mask > 0, x.behaviour_logp, logp)  # masked tokens: divergence 0
  if kind == "tv":
    return binary_tv(logp, blp)
  if kind == "kl":
    return binary_kl(logp, blp)
  if kind in ("topk_tv", "topk_kl"):
    if x.topk_logp is None or x.behaviour_topk_logp is None:
      raise ValueError(f"divergence {kind!r} needs topk_logp and behaviour_topk_logp [B, T, K]")
    fn = topk_tv if kind == "topk_tv" else topk_kl
    return fn(jax.lax.stop_gradient(x.topk_logp), x.behaviour_topk_logp)
  raise ValueError(f"unknown DPPO divergence {kind!r}; expected one of {sorted(DEFAULT_DELTA)}")


@register("policy_loss", "dppo")
def dppo(x: PolicyInputs, *, divergence_kind: str = DEFAULT_DIVERGENCE,
         delta: Optional[float] = None) -> PolicyTerms:
  """DPPO: loss -A * r per kept token (r = pi/mu, not detached, no clip).

  A token is dropped only if it is outside the trust region AND the update pushes it further away:
  drop = div > delta AND ((A > 0 AND r > 1) OR (A < 0 AND r < 1)). `delta` None -> DEFAULT_DELTA.
  """
  delta = DEFAULT_DELTA[divergence_kind] if delta is None else delta
  lr = log_ratio(x)  # [B, T]
  ratio = jnp.exp(lr)
  div = divergence(x, divergence_kind)
  a = x.advantages
  away = ((a > 0) & (lr > 0)) | ((a < 0) & (lr < 0))
  kept = (x.mask > 0) & ~((div > delta) & away)
  loss = jnp.where(kept, -a * ratio, 0.0)
  return PolicyTerms(loss=loss, kept=kept.astype(jnp.float32))


@register("policy_loss", "grpo")
def grpo(x: PolicyInputs, *, clip_low: float = GRPO_CLIP_LOW, clip_high: float = GRPO_CLIP_HIGH
         ) -> PolicyTerms:
  """PPO clip against the behaviour logprobs: -min(r A, clip(r, 1-clip_low, 1+clip_high) A).

  `kept` marks tokens whose gradient is not clipped away.
  """
  lr = log_ratio(x)
  ratio = jnp.exp(lr)
  a = x.advantages
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  per_token = -jnp.minimum(ratio * a, clipped * a)
  on = x.mask > 0
  cut = ((a > 0) & (ratio > 1.0 + clip_high)) | ((a < 0) & (ratio < 1.0 - clip_low))
  return PolicyTerms(loss=jnp.where(on, per_token, 0.0), kept=(on & ~cut).astype(jnp.float32))


def k3_kl(logp: jax.Array, ref_logp: jax.Array, mask: jax.Array) -> jax.Array:
  """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1; 0 off the mask."""
  on = mask > 0
  d = jnp.where(on, jnp.where(on, ref_logp, 0.0) - logp, 0.0)
  return jnp.where(on, jnp.exp(d) - d - 1.0, 0.0)


@register("policy_loss", "sft")
def cross_entropy(x: PolicyInputs) -> PolicyTerms:
  """SFT: -log pi(token) on the masked (assistant) tokens; behaviour/advantages unused."""
  on = x.mask > 0
  return PolicyTerms(loss=jnp.where(on, -x.logp, 0.0), kept=on.astype(jnp.float32))
