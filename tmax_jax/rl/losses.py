"""Policy losses (DPPO, GRPO, SFT) and the k3 KL penalty, as pure per-token functions.

Every policy loss has the signature `fn(x: PolicyInputs, hyper) -> PolicyTerms` and is registered
under kind "policy_loss" with its hyperparameter dataclass (`hyper` is an instance of it, None for a
loss without hyperparameters), the batch fields it reads and the advantage estimator its objective
is defined with (DPPO, the recipe: centred; GRPO: std-normalised). Per-token losses are NOT
aggregated here: the trainer multiplies them by the aggregation weights of the whole optimizer
batch (see aggregation.py), which keeps gradient accumulation exact. Formulas:
../shared/docs/recipe.md (DPPO).
"""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from tmax_jax.rl.registry import register

PROB_EPS = 1e-9  # recipe: clamp probabilities to [1e-9, 1 - 1e-9] in the binary KL
RL_INPUTS = ("behaviour_logp", "advantages")  # what every importance-ratio loss reads
TOPK_INPUTS = ("topk_ids", "behaviour_topk_logp")  # the behaviour's top-K ids and logprobs


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

  logp: Float[Array, "B T"]
  behaviour_logp: Float[Array, "B T"]
  advantages: Float[Array, "B T"]
  mask: Float[Array, "B T"]
  topk_logp: Float[Array, "B T K"] | None = None
  behaviour_topk_logp: Float[Array, "B T K"] | None = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PolicyTerms:
  """loss: [B, T] per-token loss, exactly 0 where mask == 0 or the token is dropped.
  kept: [B, T] float32, 1 on response tokens that contribute gradient (mask AND not dropped).
  """

  loss: Float[Array, "B T"]
  kept: Float[Array, "B T"]


def log_ratio(x: PolicyInputs) -> Float[Array, "B T"]:
  """log r = logp - behaviour_logp, forced to 0 off the mask.

  Zeroing before exp keeps padding garbage (inf/NaN behaviour logprobs) out of both the value and
  the gradient: a NaN under jnp.where would still poison the backward pass.
  """
  on = x.mask > 0
  return jnp.where(on, x.logp - jnp.where(on, x.behaviour_logp, 0.0), 0.0)  # [B, T]


def binary_tv(
  logp: Float[Array, "B T"], behaviour_logp: Float[Array, "B T"]
) -> Float[Array, "B T"]:
  """|pi - mu| of the sampled token. [B, T] -> [B, T]."""
  return jnp.abs(jnp.exp(logp) - jnp.exp(behaviour_logp))


def binary_kl(
  logp: Float[Array, "B T"], behaviour_logp: Float[Array, "B T"]
) -> Float[Array, "B T"]:
  """KL(mu || pi) over {sampled token, rest}, probabilities clamped to [1e-9, 1-1e-9]."""
  pi = jnp.clip(jnp.exp(logp), PROB_EPS, 1.0 - PROB_EPS)
  mu = jnp.clip(jnp.exp(behaviour_logp), PROB_EPS, 1.0 - PROB_EPS)
  return mu * jnp.log(mu / pi) + (1.0 - mu) * jnp.log((1.0 - mu) / (1.0 - pi))


def _rest(p_topk: Float[Array, "B T K"]) -> Float[Array, "B T"]:
  """Probability left outside the K listed tokens, clamped away from 0 (logs). [B,T,K] -> [B,T]."""
  return jnp.clip(1.0 - jnp.sum(p_topk, axis=-1), PROB_EPS, 1.0)


def topk_tv(
  topk_logp: Float[Array, "B T K"], behaviour_topk_logp: Float[Array, "B T K"]
) -> Float[Array, "B T"]:
  """TV over the behaviour's top-K tokens plus one rest bucket. [B, T, K] -> [B, T]."""
  pi, mu = jnp.exp(topk_logp), jnp.exp(behaviour_topk_logp)
  return 0.5 * (jnp.sum(jnp.abs(pi - mu), axis=-1) + jnp.abs(_rest(pi) - _rest(mu)))


def topk_kl(
  topk_logp: Float[Array, "B T K"], behaviour_topk_logp: Float[Array, "B T K"]
) -> Float[Array, "B T"]:
  """KL(mu || pi) over the behaviour's top-K tokens plus one rest bucket. [B, T, K] -> [B, T]."""
  mu = jnp.exp(behaviour_topk_logp)
  rest_mu, rest_pi = _rest(mu), _rest(jnp.exp(topk_logp))
  head = jnp.sum(mu * (behaviour_topk_logp - topk_logp), axis=-1)
  return head + rest_mu * (jnp.log(rest_mu) - jnp.log(rest_pi))


@dataclasses.dataclass(frozen=True)
class Divergence:
  """A DPPO trust-region divergence: fn(current, behaviour logprobs) -> [B, T]; binary ones take
  the sampled token's [B, T] logprobs, top-K ones the [B, T, K] logprobs at the behaviour's top-K
  ids (plus one rest bucket). delta: the recipe's threshold for it."""

  fn: Callable[[jax.Array, jax.Array], jax.Array]
  delta: float
  topk: bool


DIVERGENCES = {
  "tv": Divergence(binary_tv, 0.1, topk=False),
  "kl": Divergence(binary_kl, 0.05, topk=False),
  "topk_tv": Divergence(topk_tv, 0.1, topk=True),
  "topk_kl": Divergence(topk_kl, 0.05, topk=True),
}


def divergence(x: PolicyInputs, kind: str) -> Float[Array, "B T"]:
  """Per-token divergence between behaviour and current policy, on stop-gradient inputs. [B, T]."""
  if kind not in DIVERGENCES:
    raise ValueError(f"unknown DPPO divergence {kind!r}; expected one of {sorted(DIVERGENCES)}")
  div = DIVERGENCES[kind]
  if not div.topk:
    logp = jax.lax.stop_gradient(x.logp)
    return div.fn(logp, jnp.where(x.mask > 0, x.behaviour_logp, logp))  # masked tokens: 0
  if x.topk_logp is None or x.behaviour_topk_logp is None:
    raise ValueError(f"divergence {kind!r} needs topk_logp and behaviour_topk_logp [B, T, K]")
  return div.fn(jax.lax.stop_gradient(x.topk_logp), x.behaviour_topk_logp)


@dataclasses.dataclass(frozen=True)
class DPPOHyper:
  """divergence: tv | kl | topk_tv | topk_kl (DIVERGENCES); delta: trust-region threshold (None ->
  the divergence's recipe value); top_k: K of the top-K divergences (TRL's default 20), i.e. how
  many behaviour logprobs per token the rollouts must return."""

  divergence: str = "tv"  # tv | kl | topk_tv | topk_kl
  delta: float | None = None  # trust-region threshold (None = the divergence's recipe value)
  top_k: int = 20  # K of the top-K divergences

  def __post_init__(self):
    if self.divergence not in DIVERGENCES:
      raise ValueError(f"divergence={self.divergence!r}; expected one of {sorted(DIVERGENCES)}")
    if self.delta is not None and not self.delta > 0:
      raise ValueError(f"delta={self.delta}; expected > 0 (or None for the recipe value)")
    if self.top_k < 1:
      raise ValueError(f"top_k={self.top_k}; expected >= 1")

  @property
  def threshold(self) -> float:
    return DIVERGENCES[self.divergence].delta if self.delta is None else self.delta


def dppo_inputs(hyper: DPPOHyper) -> tuple[str, ...]:
  return RL_INPUTS + (TOPK_INPUTS if DIVERGENCES[hyper.divergence].topk else ())


@register("policy_loss", "dppo", hyper=DPPOHyper, inputs=dppo_inputs, advantage="centered")
def dppo(x: PolicyInputs, hyper: DPPOHyper = DPPOHyper()) -> PolicyTerms:
  """DPPO: loss -A * r per kept token (r = pi/mu, not detached, no clip).

  A token is dropped only if it is outside the trust region AND the update pushes it further away:
  drop = div > delta AND ((A > 0 AND r > 1) OR (A < 0 AND r < 1)).
  """
  delta = hyper.threshold
  lr = log_ratio(x)  # [B, T]
  ratio = jnp.exp(lr)
  div = divergence(x, hyper.divergence)
  a = x.advantages
  away = ((a > 0) & (lr > 0)) | ((a < 0) & (lr < 0))
  kept = (x.mask > 0) & ~((div > delta) & away)
  loss = jnp.where(kept, -a * ratio, 0.0)
  return PolicyTerms(loss=loss, kept=kept.astype(jnp.float32))


@dataclasses.dataclass(frozen=True)
class GRPOHyper:
  """PPO-clip range of the recipe's GRPO baseline: ratio clipped to [1 - low, 1 + high]."""

  clip_low: float = 0.2  # ratio clipped below at 1 - clip_low
  clip_high: float = 0.272  # ratio clipped above at 1 + clip_high

  def __post_init__(self):
    if not (0.0 <= self.clip_low < 1.0 and self.clip_high >= 0.0):
      raise ValueError(
        f"clip_low={self.clip_low}, clip_high={self.clip_high}; expected "
        "0 <= clip_low < 1 and clip_high >= 0"
      )


@register("policy_loss", "grpo", hyper=GRPOHyper, inputs=RL_INPUTS, advantage="standard")
def grpo(x: PolicyInputs, hyper: GRPOHyper = GRPOHyper()) -> PolicyTerms:
  """PPO clip against the behaviour logprobs: -min(r A, clip(r, 1-clip_low, 1+clip_high) A).

  GRPO's A is std-normalised, (R - mean) / (std + 1e-8) per group, as its registration says (the
  estimator a config with advantage="auto" takes); LossConfig.advantage="centered"
  keeps DPPO's centred A instead.

  `kept` marks tokens whose gradient is not clipped away.
  """
  clip_low, clip_high = hyper.clip_low, hyper.clip_high
  lr = log_ratio(x)
  ratio = jnp.exp(lr)
  a = x.advantages
  clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
  per_token = -jnp.minimum(ratio * a, clipped * a)
  on = x.mask > 0
  cut = ((a > 0) & (ratio > 1.0 + clip_high)) | ((a < 0) & (ratio < 1.0 - clip_low))
  return PolicyTerms(loss=jnp.where(on, per_token, 0.0), kept=(on & ~cut).astype(jnp.float32))


def k3_kl(
  logp: Float[Array, "B T"], ref_logp: Float[Array, "B T"], mask: Float[Array, "B T"]
) -> Float[Array, "B T"]:
  """k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1; 0 off the mask."""
  on = mask > 0
  d = jnp.where(on, jnp.where(on, ref_logp, 0.0) - logp, 0.0)
  return jnp.where(on, jnp.exp(d) - d - 1.0, 0.0)


@register("policy_loss", "sft")
def cross_entropy(x: PolicyInputs, hyper: None = None) -> PolicyTerms:
  """SFT: -log pi(token) on the masked (assistant) tokens; behaviour/advantages unused."""
  del hyper
  on = x.mask > 0
  return PolicyTerms(loss=jnp.where(on, -x.logp, 0.0), kept=on.astype(jnp.float32))
