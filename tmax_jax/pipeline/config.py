"""What a pipeline run does (the CLI in __main__.py builds these; each default is defined here or in
the component config it nests)."""

from __future__ import annotations

import dataclasses

from tmax_jax.tasks.generator.llm import ChatConfig
from tmax_jax.tasks.generator.pipeline import GenerationConfig

STAGES = ("write", "build", "validate", "calibrate", "decontaminate")
UNTIL = (*STAGES, "publish")


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
  """Difficulty calibration against a reference policy on any OpenAI-compatible endpoint.

  Each round plays `k` episodes per task (the harness renders the conversation with `family`'s
  chat template and sends it to the endpoint, as tasks/horizon/teacher.py does); a task whose
  pass@1 lies in `band` (inclusive) is kept at that knob setting, otherwise its verifier knob
  moves one step harder (above the band) or easier (below) and it plays again, at most
  `max_rounds` moves; a task still outside, or whose knob is at its limit, is dropped.

  The set as a whole is steered toward the recipe's target (`target_pass_at_1`,
  `target_pass_at_8`: the reference policy's mean pass@1 / pass@8 over the published set) by the
  selection at publish (pipeline/set_target.py), which may drop up to `set_max_drop` of the tasks
  that passed every stage; pass@8 is estimated (and targeted) only with k >= 8. The endpoint's
  token usage is recorded per episode, priced at `price_per_mtok_in` / `_out` USD when set."""

  enabled: bool = True
  base_url: str = ""  # "" = the writer's endpoint
  model: str = ""  # "" = the writer's model
  api_key: str | None = None
  k: int = 8
  band: tuple[float, float] = (0.1, 0.9)  # with k = 8: neither never nor always solved
  max_rounds: int = 3
  harness: str = "bash_tool"
  family: str = "qwen3"
  max_tool_calls: int = 64
  command_timeout_s: float = 120.0
  turn_max_tokens: int = 16384
  temperature: float = 1.0
  seed: int = 0
  target_pass_at_1: float = 0.42  # recipe.md: a strong model's pass@1 ~42% over the set
  target_pass_at_8: float = 0.53  # ... and pass@8 ~53%
  set_max_drop: float = 0.25  # fraction of the set the selection may drop; 0 = report only
  price_per_mtok_in: float = 0.0  # USD per million prompt tokens (0 = no cost recorded)
  price_per_mtok_out: float = 0.0  # USD per million completion tokens (0 = no cost recorded)

  def __post_init__(self):
    lo, hi = self.band
    if not 0.0 <= lo <= hi <= 1.0:
      raise ValueError(f"calibration.band={self.band}: expected 0 <= low <= high <= 1")
    if self.k < 1 or self.max_rounds < 0:
      raise ValueError(f"calibration k={self.k}, max_rounds={self.max_rounds}: expected >= 1, >= 0")
    if not 0.0 <= self.target_pass_at_1 <= self.target_pass_at_8 <= 1.0:
      raise ValueError(
        f"calibration target_pass_at_1={self.target_pass_at_1}, target_pass_at_8="
        f"{self.target_pass_at_8}: expected 0 <= pass@1 <= pass@8 <= 1"
      )
    if not 0.0 <= self.set_max_drop < 1.0:
      raise ValueError(f"calibration.set_max_drop={self.set_max_drop}: expected 0 <= it < 1")
    if self.price_per_mtok_in < 0 or self.price_per_mtok_out < 0:
      raise ValueError(
        f"calibration price_per_mtok_in={self.price_per_mtok_in}, price_per_mtok_out="
        f"{self.price_per_mtok_out}: expected >= 0"
      )


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """One pipeline run over samples start..start+n-1 of `seed` into `out`."""

  out: str
  writer: ChatConfig
  n: int = 100
  seed: int = 0
  start: int = 0
  workers: int = 8  # concurrent writer calls
  sandbox_workers: int = 0  # concurrent builds, validations and rollouts; 0 = the CPU count
  until: str = "publish"  # the last stage this run does
  noop_check: bool = True  # validate: the verifier must fail when the agent does nothing
  generation: GenerationConfig = GenerationConfig()
  calibration: CalibrationConfig = CalibrationConfig()
  benchmarks: tuple[str, ...] = ()  # benchmark task dirs (TB1/TB2) to decontaminate against
  max_endpoint_failures: int = 3  # consecutive tasks failing on the endpoint: stop the run
  taxonomy: str = ""  # a taxonomy.json other than the shipped one
  resume: bool = False
  progress: bool = True

  def __post_init__(self):
    if self.until not in UNTIL:
      raise ValueError(f"until={self.until!r}: expected one of {UNTIL}")
    if self.n < 0 or self.start < 0 or self.workers < 1 or self.sandbox_workers < 0:
      raise ValueError(
        f"n={self.n}, start={self.start}, workers={self.workers}, sandbox_workers="
        f"{self.sandbox_workers}: expected n, start >= 0, workers >= 1, sandbox_workers >= 0"
      )

  def stages(self) -> tuple[str, ...]:
    """The per-task stages this run does, in order."""
    last = STAGES.index(self.until) if self.until in STAGES else len(STAGES) - 1
    return tuple(s for s in STAGES[: last + 1] if s != "calibrate" or self.calibration.enabled)

  def policy_chat(self) -> ChatConfig:
    """The reference policy's endpoint (the writer's unless calibration names another)."""
    c = self.calibration
    return dataclasses.replace(
      self.writer,
      base_url=c.base_url or self.writer.base_url,
      model=c.model or self.writer.model,
      api_key=c.api_key if c.base_url else self.writer.api_key,
      temperature=c.temperature,
      max_tokens=c.turn_max_tokens,
    )
