"""Typed, frozen configs of the trainer; every default is defined once, here (or in rl.losses).
The recipes of recipe.md are in tmax_jax/recipes.py."""

import dataclasses
from typing import Any

from tmax_jax import rl
from tmax_jax.config_dict import from_config_dict

SCHEDULES = ("constant", "linear", "cosine")
ON_NONFINITE = ("raise", "skip")
REF_INPUT = "ref_logp"  # what kl_beta > 0 reads: the reference policy's logprob of each token
AUTO = "auto"  # LossConfig.advantage: the policy loss's own estimator


def _choice(field: str, value, allowed) -> None:
  if value not in allowed:
    raise ValueError(f"{field}={value!r}; expected one of {list(allowed)}")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """Optax AdamW + global-norm clipping; lr schedule with linear warmup (HF convention: lr 0 at
  step 0). `warmup_ratio` (fraction of total_steps) is used when `warmup_steps` is 0.

  `total_steps` is the schedule's horizon (decay end, warmup_ratio base). 0, the default, means the
  job's own step count, which the job fills in (`TrainConfig.for_run`): SFT epochs x
  ceil(N / global_batch) unless its `steps` is set (loop/sft.total_steps), RL its `steps`. A
  value > 0 is kept as given (a horizon other than the run's, e.g. a run to be extended later)."""

  learning_rate: float = 1e-6  # peak learning rate
  schedule: str = "constant"  # constant | linear | cosine (after the warmup)
  warmup_steps: int = 0  # linear warmup steps (0: warmup_ratio of total_steps)
  warmup_ratio: float = 0.0  # warmup as a fraction of total_steps
  total_steps: int = 0  # 0 = the job's step count
  end_lr_ratio: float = 0.0  # linear/cosine decay ends at learning_rate * end_lr_ratio
  weight_decay: float = 0.0  # AdamW decoupled weight decay
  decay_norms_and_biases: bool = False  # HF Trainer's default: no decay on biases / norm scales
  b1: float = 0.9  # Adam beta1
  b2: float = 0.999  # Adam beta2
  eps: float = 1e-8  # Adam epsilon
  max_grad_norm: float = 1.0  # <= 0 disables clipping

  def __post_init__(self):
    _choice("optimizer.schedule", self.schedule, SCHEDULES)
    if self.total_steps < 0:
      raise ValueError(f"optimizer.total_steps={self.total_steps}; expected > 0, or 0 = the job's")
    if not 0.0 <= self.warmup_ratio < 1.0:
      raise ValueError(f"optimizer.warmup_ratio={self.warmup_ratio}; expected in [0, 1)")

  @property
  def needs_horizon(self) -> bool:
    """Whether the schedule depends on total_steps (a decay, or a warmup given as a ratio)."""
    return self.schedule != "constant" or (not self.warmup_steps and self.warmup_ratio > 0)

  @property
  def warmup(self) -> int:
    if self.warmup_steps or not self.warmup_ratio:
      return self.warmup_steps
    return int(round(self.warmup_ratio * self.horizon))

  @property
  def horizon(self) -> int:
    """total_steps; raises when it is still 0 (the job's) and the schedule depends on it."""
    if self.total_steps == 0 and self.needs_horizon:
      raise ValueError(
        f"optimizer.total_steps=0 (the job's step count) was never filled in, and the "
        f"{self.schedule!r} schedule with warmup_ratio={self.warmup_ratio} depends on it: "
        "build the trainer from TrainConfig.for_run(<the job's steps>), or set "
        "optimizer.total_steps"
      )
    return self.total_steps


@dataclasses.dataclass(frozen=True)
class BatchInputs:
  """What a data path fills into the trainer's batch beyond tokens and loss mask: TrainBatch field
  names, and K, the number of top-K behaviour logprobs per generated token (0 = none). `source`
  names the path and its settings for error messages."""

  fields: tuple[str, ...] = ()
  top_k: int = 0
  source: str = "the data path"


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Policy loss by registry name, the hyperparameters of every registered loss, the optional k3
  KL penalty to a reference policy, the aggregation and the advantage estimator (registry names).

  `hypers` maps a loss name to its hyperparameter dataclass (rl.losses.DPPOHyper for "dppo", ...);
  every registered loss that takes hyperparameters gets an entry (its defaults when absent), so
  `--config.train.loss.policy_loss=grpo` switches losses with GRPO's own settings, overridable as
  `--config.train.loss.hypers.grpo.clip_high=0.3`. A dict value (from a ConfigDict) is converted.
  `hyper` is the selected loss's entry (None for a loss without hyperparameters).
  `advantage` "auto" takes the selected loss's own estimator (`estimator`: DPPO, the recipe,
  centred; GRPO std-normalised), so switching the loss switches it too; a registered name (e.g.
  "centered" for a centre-only GRPO ablation) overrides it.
  """

  policy_loss: str = "dppo"  # dppo | grpo | sft (rl.losses registry)
  # every registered loss's hyperparameters (see above)
  hypers: dict = dataclasses.field(default_factory=dict)
  kl_beta: float = 0.0  # > 0 adds kl_beta * k3 KL(pi || ref) per token: needs `ref_logp`
  aggregation: str = "token"  # token | sequence: how per-token losses are averaged
  # group advantage estimator (rl.advantages), "auto" = the policy loss's own (see above)
  advantage: str = AUTO

  def __post_init__(self):
    _choice("loss.policy_loss", self.policy_loss, rl.names("policy_loss"))
    _choice("loss.aggregation", self.aggregation, rl.names("aggregation"))
    _choice("loss.advantage", self.advantage, (AUTO, *rl.names("advantage")))
    if self.kl_beta < 0:
      raise ValueError(f"loss.kl_beta={self.kl_beta}; expected >= 0")
    with_hyper = {n: rl.entry("policy_loss", n).hyper for n in rl.names("policy_loss")}
    with_hyper = {n: cls for n, cls in with_hyper.items() if cls is not None}
    unknown = sorted(set(self.hypers) - set(with_hyper))
    if unknown:
      raise ValueError(
        f"loss.hypers: {unknown} are not losses with hyperparameters; expected keys among "
        f"{sorted(with_hyper)}"
      )
    hypers = {}
    for name, cls in sorted(with_hyper.items()):
      value = self.hypers.get(name)
      if value is None:
        value = cls()
      elif isinstance(value, dict):
        value = from_config_dict(cls, value, f"loss.hypers.{name}")
      elif not isinstance(value, cls):
        raise ValueError(f"loss.hypers.{name}={value!r}: expected a {cls.__name__}")
      hypers[name] = value
    object.__setattr__(self, "hypers", hypers)

  def __hash__(self) -> int:
    """Hashable like the other (frozen) configs, so a TrainConfig can key a cache or be a static
    argument: `hypers` (a dict of frozen hyper dataclasses) hashes by its sorted items."""
    hypers = tuple(sorted(self.hypers.items()))
    return hash((self.policy_loss, hypers, self.kl_beta, self.aggregation, self.advantage))

  @property
  def estimator(self) -> str:
    """The advantage estimator in force: `advantage`, or with "auto" the one the policy loss is
    registered with (centred for a loss that reads no advantages)."""
    if self.advantage != AUTO:
      return self.advantage
    return rl.entry("policy_loss", self.policy_loss).advantage or "centered"

  @property
  def hyper(self) -> Any:
    """The selected policy loss's hyperparameters (None when it takes none)."""
    return self.hypers.get(self.policy_loss)

  def batch_fields(self) -> tuple[str, ...]:
    """The TrainBatch fields the loss reads (as its registration declares) plus `ref_logp` when
    kl_beta > 0."""
    fields = rl.entry("policy_loss", self.policy_loss).inputs(self.hyper)
    return fields + ((REF_INPUT,) if self.kl_beta > 0 else ())

  @property
  def top_k(self) -> int:
    """Top-K behaviour logprobs per token the loss needs (0 when it reads no top-K fields)."""
    return self.hyper.top_k if "topk_ids" in self.batch_fields() else 0

  def check_inputs(self, produced: BatchInputs, path: str = "train.loss") -> None:
    """Raises ValueError naming the config field when the loss reads a batch field that
    `produced` does not fill (or fewer top-K logprobs than it needs)."""
    for field in self.batch_fields():
      if field in produced.fields:
        continue
      if field == REF_INPUT:
        raise ValueError(
          f"{path}.kl_beta={self.kl_beta} needs batch field {REF_INPUT!r} "
          f"(reference-policy logprobs), which {produced.source} does not produce; "
          f"set {path}.kl_beta=0"
        )
      raise ValueError(
        f"{path}.policy_loss={self.policy_loss!r} with {path}.hypers.{self.policy_loss}="
        f"{self.hyper} "
        f"needs batch field {field!r}, which {produced.source} does not produce"
      )
    if self.top_k > produced.top_k:
      raise ValueError(
        f"{path}.hypers.{self.policy_loss}.top_k={self.top_k}: the {self.hyper.divergence!r} "
        "divergence "
        f"needs {self.top_k} behaviour logprobs per token, but {produced.source} "
        f"returns {produced.top_k}"
      )


@dataclasses.dataclass(frozen=True)
class PackingConfig:
  """Packed micro-batches (train/batch.pack_micro_batches): an optimizer step's trajectories go,
  first-fit decreasing by length, several per row into micro-batches of `tokens_per_micro_batch`
  token slots each: [tokens // L, L] for a row length L of `row_lengths` (the buckets), so the step
  compiles once per bucket and the number of micro-batches follows the tokens that exist.

  tokens_per_micro_batch 0 = off: one [rows, seq_len] batch split into `micro_batches`.
  row_lengths () = one bucket, rows of the job's seq_len. Rows per micro-batch are rounded down to a
  multiple of the mesh's batch shards (data x fsdp).
  """

  tokens_per_micro_batch: int = 0  # token slots per packed micro-batch (0 = packing off)
  row_lengths: tuple[int, ...] = ()  # row-length buckets ((): one bucket of seq_len)

  def __post_init__(self):
    if self.tokens_per_micro_batch < 0:
      raise ValueError(
        f"packing.tokens_per_micro_batch={self.tokens_per_micro_batch}; expected >= 0 (0 = off)"
      )
    if any(n <= 0 for n in self.row_lengths) or list(self.row_lengths) != sorted(
      set(self.row_lengths)
    ):
      raise ValueError(f"packing.row_lengths={self.row_lengths}; expected increasing lengths > 0")
    if self.row_lengths and self.tokens_per_micro_batch < self.row_lengths[-1]:
      raise ValueError(
        f"packing.tokens_per_micro_batch={self.tokens_per_micro_batch} < the "
        f"longest row {self.row_lengths[-1]}; expected at least one row"
      )

  @property
  def enabled(self) -> bool:
    return self.tokens_per_micro_batch > 0

  def buckets(self, seq_len: int, shards: int = 1) -> list[tuple[int, int]]:
    """[(rows, row length)] per bucket, shortest rows first; rows a multiple of `shards`. Raises
    naming the field when a bucket cannot hold `shards` rows or no row fits `seq_len` tokens."""
    lengths = self.row_lengths or (seq_len,)
    if lengths[-1] < seq_len:
      raise ValueError(
        f"packing.row_lengths={self.row_lengths}: the longest row must hold "
        f"seq_len={seq_len} tokens (a trajectory may be that long)"
      )
    out = []
    for n in lengths:
      rows = self.tokens_per_micro_batch // n // shards * shards
      if rows == 0:
        raise ValueError(
          f"packing.tokens_per_micro_batch={self.tokens_per_micro_batch} holds "
          f"fewer than {shards} rows of {n} tokens (one per batch shard)"
        )
      out.append((rows, n))
    return out


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """Orbax CheckpointManager: save every `save_every` steps (async), keep the last `keep_last`,
  and also save, and keep for good, every step that is a multiple of `keep_every` (0 = none):
  the checkpoints a user goes back to, e.g. before the collapse runs often show after ~300 steps
  (recipe.md); `python3 -m tmax_jax.export --step S` writes the HF export of any kept step.
  `directory` "" = <the job's output_dir>/ckpt (loop/steps.checkpoint_config)."""

  directory: str = ""  # '' = <output_dir>/ckpt
  save_every: int = 50  # checkpoint every N steps
  keep_last: int = 3  # recent checkpoints kept
  keep_every: int = 100  # steps that are multiples of N are kept for good (0 = none)
  async_save: bool = True  # write checkpoints in the background

  def __post_init__(self):
    if self.save_every <= 0 or self.keep_last <= 0:
      raise ValueError(
        f"checkpoint.save_every={self.save_every}, keep_last={self.keep_last}; expected both > 0"
      )
    if self.keep_every < 0:
      raise ValueError(f"checkpoint.keep_every={self.keep_every}; expected >= 0 (0 = none)")

  def saves(self, step: int) -> bool:
    """Whether `step` is checkpointed: a multiple of save_every or of keep_every."""
    return step % self.save_every == 0 or bool(self.keep_every and step % self.keep_every == 0)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """One optimizer step per global batch, split into `micro_batches` for gradient accumulation."""

  optimizer: OptimizerConfig = OptimizerConfig()
  loss: LossConfig = LossConfig()
  checkpoint: CheckpointConfig = CheckpointConfig()
  packing: PackingConfig = PackingConfig()
  global_batch: int = 256  # sequences per optimizer step (RL: 8 prompts x 32 samples)
  epochs: int = 1  # passes over the data (SFT)
  micro_batches: int = 1  # fixed-shape batches only; packed ones get as many as their tokens need
  logprob_chunk_size: int = 512  # tokens per chunk of the head + logprob pass (memory)
  loss_tokens_per_row: int = 0  # > 0: head/loss only on each row's first K loss tokens (compact.py)
  temperature: float = 1.0  # the sampler's temperature: logprobs of the distribution it sampled
  on_nonfinite: str = "skip"  # raise | skip: what a step with NaN/inf loss or gradient does
  peak_flops_per_device: float = 790e12  # for the MFU estimate (machine.md's H200 figure)
  seed: int = 0  # the trainer's RNG and SFT shuffling seed

  def __post_init__(self):
    _choice("on_nonfinite", self.on_nonfinite, ON_NONFINITE)
    if self.micro_batches <= 0:
      raise ValueError(f"micro_batches={self.micro_batches}; expected > 0")

  def replace(self, **changes) -> "TrainConfig":
    return dataclasses.replace(self, **changes)

  def for_run(self, total_steps: int) -> "TrainConfig":
    """This config with the job's step count as the schedule's horizon, unless
    optimizer.total_steps was set explicitly (> 0)."""
    if self.optimizer.total_steps:
      return self
    return self.replace(optimizer=dataclasses.replace(self.optimizer, total_steps=total_steps))

  def check_data(self, produced: BatchInputs, seq_len: int, path: str = "train") -> None:
    """Config-time checks against a job's data path: every batch field the loss reads is produced,
    and the packing buckets hold a `seq_len`-token trajectory."""
    self.loss.check_inputs(produced, f"{path}.loss")
    if self.packing.enabled:
      self.packing.buckets(seq_len)
