"""Typed, frozen configs of the trainer; every default is defined once, here (or in rl.losses).

Presets at the bottom express the recipe's RL run and both SFT recipes of recipe.md.
"""

import dataclasses
from typing import Optional

from tmax_jax.rl import losses as rl_losses

SCHEDULES = ("constant", "linear", "cosine")
POLICY_LOSSES = ("dppo", "grpo", "sft")
AGGREGATIONS = ("token", "sequence")
ON_NONFINITE = ("raise", "skip")


def _choice(field: str, value, allowed) -> None:
  if value not in allowed:
    raise ValueError(f"{field}={value!r}; expected one of {list(allowed)}")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """Optax AdamW + global-norm clipping; lr schedule with linear warmup (HF convention: lr 0 at
  step 0). `warmup_ratio` (fraction of total_steps) is used when `warmup_steps` is 0."""

  learning_rate: float = 1e-6
  schedule: str = "constant"
  warmup_steps: int = 0
  warmup_ratio: float = 0.0
  total_steps: int = 500
  end_lr_ratio: float = 0.0  # linear/cosine decay ends at learning_rate * end_lr_ratio
  weight_decay: float = 0.0
  decay_norms_and_biases: bool = False  # HF Trainer's default: no decay on biases / norm scales
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  max_grad_norm: float = 1.0  # <= 0 disables clipping

  def __post_init__(self):
    _choice("optimizer.schedule", self.schedule, SCHEDULES)
    if self.total_steps <= 0:
      raise ValueError(f"optimizer.total_steps={self.total_steps}; expected > 0")
    if not 0.0 <= self.warmup_ratio < 1.0:
      raise ValueError(f"optimizer.warmup_ratio={self.warmup_ratio}; expected in [0, 1)")

  @property
  def warmup(self) -> int:
    return self.warmup_steps or int(round(self.warmup_ratio * self.total_steps))


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Policy loss by registry name (rl.get("policy_loss", ...)), its hyperparameters, the optional
  k3 KL penalty to a reference policy (kl_beta > 0 needs `ref_logp` in the batch) and aggregation."""

  policy_loss: str = "dppo"
  divergence: str = rl_losses.DEFAULT_DIVERGENCE  # dppo: tv | kl | topk_tv | topk_kl
  delta: Optional[float] = None  # None -> rl.losses.DEFAULT_DELTA[divergence]
  top_k: int = 20  # K of the top-K variant (TRL's default)
  clip_low: float = rl_losses.GRPO_CLIP_LOW
  clip_high: float = rl_losses.GRPO_CLIP_HIGH
  kl_beta: float = 0.0
  aggregation: str = "token"

  def __post_init__(self):
    _choice("loss.policy_loss", self.policy_loss, POLICY_LOSSES)
    _choice("loss.divergence", self.divergence, tuple(rl_losses.DEFAULT_DELTA))
    _choice("loss.aggregation", self.aggregation, AGGREGATIONS)

  def hyper(self) -> dict:
    """Keyword arguments of the registered policy-loss function."""
    if self.policy_loss == "dppo":
      return {"divergence_kind": self.divergence, "delta": self.delta}
    if self.policy_loss == "grpo":
      return {"clip_low": self.clip_low, "clip_high": self.clip_high}
    return {}


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """Orbax CheckpointManager: save every `save_every` steps (async), keep the last `keep_last`."""

  directory: str = ""
  save_every: int = 50
  keep_last: int = 3
  async_save: bool = True

  def __post_init__(self):
    if self.save_every <= 0 or self.keep_last <= 0:
      raise ValueError(f"checkpoint.save_every={self.save_every}, keep_last={self.keep_last}; "
                       "expected both > 0")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """One optimizer step per global batch, split into `micro_batches` for gradient accumulation."""

  optimizer: OptimizerConfig = OptimizerConfig()
  loss: LossConfig = LossConfig()
  checkpoint: CheckpointConfig = CheckpointConfig()
  global_batch: int = 256  # sequences per optimizer step (RL: 8 prompts x 32 samples)
  epochs: int = 1
  micro_batches: int = 1
  logprob_chunk_size: int = 512
  loss_tokens_per_row: int = 0  # > 0: head/loss only on each row's first K loss tokens (compact.py)
  temperature: float = 1.0  # the sampler's temperature: logprobs of the distribution it sampled
  on_nonfinite: str = "skip"  # raise | skip: what a step with NaN/inf loss or gradient does
  peak_flops_per_device: float = 790e12  # for the MFU estimate (machine.md's H200 figure)
  seed: int = 0

  def __post_init__(self):
    _choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
    if self.micro_batches <= 0:
      raise ValueError(f"micro_batches={self.micro_batches}; expected > 0")

  def replace(self, **changes) -> "TrainConfig":
    return dataclasses.replace(self, **changes)


def rl_recipe(**overrides) -> TrainConfig:
  """Paper Table 13: DPPO binary TV (delta 0.1), AdamW lr 1e-6 constant, grad norm 1.0, 500 steps,
  8 prompts x 32 samples per step, token-level aggregation, KL beta 0."""
  return TrainConfig(**overrides)


def sft_tmax_qwen3_8b(**overrides) -> TrainConfig:
  """TMAX SFT (Qwen3-8B): lr 2e-5 linear, warmup 3%, wd 0, 2 epochs, global batch 128."""
  opt = OptimizerConfig(learning_rate=2e-5, schedule="linear", warmup_ratio=0.03, weight_decay=0.0)
  return TrainConfig(optimizer=opt, loss=LossConfig(policy_loss="sft"), global_batch=128, epochs=2,
                     **overrides)


def sft_terminal_horizon(**overrides) -> TrainConfig:
  """TerminalHorizon SFT (Qwen3.5-27B): AdamW lr 1e-5, wd 0.1, cosine, 5% warmup."""
  opt = OptimizerConfig(learning_rate=1e-5, schedule="cosine", warmup_ratio=0.05, weight_decay=0.1)
  return TrainConfig(optimizer=opt, loss=LossConfig(policy_loss="sft"), **overrides)
