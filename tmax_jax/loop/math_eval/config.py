"""What the math evaluation samples and how (launch/math_eval.py reads it from configs/*.py)."""

from __future__ import annotations

import dataclasses

from tmax_jax.inference.sampling import SamplingParams
from tmax_jax.loop.config import ModelSpec, ServingConfig, spec_model_type
from tmax_jax.loop.math_eval.problems import Fields
from tmax_jax.models import registry

# The usual instruction of boxed-answer math evaluations (Qwen's and DeepSeek's AIME prompts).
DEFAULT_PROMPT = (
  "{problem}\nPlease reason step by step, and put your final answer within \\boxed{}."
)


@dataclasses.dataclass(frozen=True)
class MathEvalConfig:
  """A non-agentic math evaluation through the project's inference server: every problem of the
  file is rendered with `prompt_template` as one user turn in the model family's chat template,
  sampled `samples_per_problem` times with `sampling`, and scored by exact match of the last
  boxed answer (math_eval/answers.py); pass@1 is estimated from the k samples of each problem and
  averaged over problems (mean +- stderr).

  The model: a running server (`address`, e.g. launch/serve.py's 127.0.0.1:9000; set `family` to
  its tokenizer family) or, with address "", `model` served here on `serving` for the run (its
  engine must hold max_prompt_tokens + max_tokens per sequence)."""

  problems: str = ""  # the problem file: JSONL (an object a line) or .parquet (problems.py)
  fields: Fields = Fields()  # the problem file's field names
  # records.jsonl and results.json go here; when it already holds an earlier run's, into the first
  # free <output_dir>-2, -3, ... instead (unless `overwrite`)
  output_dir: str = ""
  overwrite: bool = False  # replace the results an earlier run left in output_dir
  address: str = ""  # host:port of a running server ("" = serve `model` here for the run)
  # tokenizer family: chat template and stop tokens ("" = the served model's; needed with address)
  family: str = ""
  samples_per_problem: int = 1  # k: samples per problem (pass@1 is estimated from them)
  pass_ks: tuple[int, ...] = (1, 2, 4, 8, 16)  # the k of the unbiased pass@k reported
  prompt_template: str = DEFAULT_PROMPT  # the user turn; `{problem}` is replaced by the problem
  enable_thinking: bool | None = None  # the chat template's thinking switch (None: its default)
  integer_answers: bool = False  # every gold answer must be an integer 0-999 (AIME; load check)
  max_problems: int = 0  # the first N problems of the file (0 = all)
  # a prompt longer than this is not sent: its samples are errors, not scores (0 = no cap)
  max_prompt_tokens: int = 0
  max_tokens: int = 16384  # generated tokens per sample (the recipe's per-turn cap)
  # temperature / top_p / top_k; seed: the base of each sample's seed (recipe: T = 1, no top-p/k)
  sampling: SamplingParams = SamplingParams()
  max_parallel_requests: int = 64  # samples in flight at once (the server batches them)
  request_timeout_s: float = 3600.0  # per sample, all retries included
  # A sample that errored (a lost server, a rejected prompt) is never scored; launch/math_eval.py
  # exits with an error when none was scored or more than this share errored (1.0: only when none)
  max_error_share: float = 0.1
  model: ModelSpec = ModelSpec(checkpoint="", preset="")  # the model served here (address "")
  serving: ServingConfig = ServingConfig()  # where and how `model` is served here (address "")

  def __post_init__(self):
    if self.samples_per_problem < 1:
      raise ValueError(f"samples_per_problem={self.samples_per_problem}; expected >= 1")
    if self.max_tokens < 1 or self.max_prompt_tokens < 0 or self.max_parallel_requests < 1:
      raise ValueError(
        f"max_tokens={self.max_tokens}, max_prompt_tokens={self.max_prompt_tokens}, "
        f"max_parallel_requests={self.max_parallel_requests}; expected >= 1, >= 0, >= 1"
      )
    if "{problem}" not in self.prompt_template:
      raise ValueError(f"prompt_template={self.prompt_template!r} has no {{problem}} field")
    if not 0.0 <= self.max_error_share <= 1.0:
      raise ValueError(f"max_error_share={self.max_error_share}; expected in [0, 1]")
    if self.address:
      if not self.family:
        raise ValueError(
          f"address={self.address!r}: set family to the served model's tokenizer family "
          "(e.g. qwen3, qwen3_5)"
        )
      registry.tokenizer_spec(self.family)  # a registered family
      return
    if not (self.model.checkpoint or self.model.preset):
      raise ValueError(
        "set `address` (a running server) or `model.checkpoint` / `model.preset` to serve here"
      )
    self._derive_family()
    self._check_engine()

  def _derive_family(self) -> None:
    model_type = spec_model_type(self.model)
    if model_type is None:  # a checkpoint not readable here: derived when it is loaded
      return
    expected = registry.tokenizer_for(model_type).family
    if self.family and self.family != expected:
      raise ValueError(
        f"family={self.family!r}, but the model (model_type {model_type!r}) uses the "
        f"{expected!r} tokenizer family; set family={expected!r} (or leave it empty)"
      )
    object.__setattr__(self, "family", expected)

  def _check_engine(self) -> None:
    engine = self.serving.engine
    if engine.max_len < self.max_prompt_tokens + self.max_tokens:
      raise ValueError(
        f"serving.engine.max_len={engine.max_len} < max_prompt_tokens + max_tokens = "
        f"{self.max_prompt_tokens} + {self.max_tokens}: the served model cannot hold a sample"
      )
    if engine.max_prefill_length < self.max_prompt_tokens:
      raise ValueError(
        f"serving.engine.max_prefill_length={engine.max_prefill_length} < max_prompt_tokens="
        f"{self.max_prompt_tokens}: the served model cannot take the longest prompt"
      )
