"""The harness registry: the one place a harness name is resolved.

A harness turns a policy (`generate(token_ids, max_tokens)`) into an episode in a sandbox, and
renders the canonical replies that scripted policies send through it. Built in: `bash_tool` and
`mini_swe` (shell.py), `terminus` (terminus.py). Every episode path (the RL worker, the evaluation
runner, the demo's held-out evaluation, oracle SFT data) looks its harness up here; a new harness is
one object with the `Harness` methods and one `register(...)` call.
"""

from __future__ import annotations

from typing import Protocol

from tmax_jax.agents import shell, terminus
from tmax_jax.agents.episode import EpisodeConfig, EpisodeResult, GenerateFn, ScriptStep
from tmax_jax.sandbox import Sandbox


class Harness(Protocol):
  """What a harness provides (structural: any object with these members)."""

  name: str
  # the function definitions (OpenAI format) its prompt renders with the chat template, whose
  # calls it reads in the family's tool-call syntax; () for a harness that acts through text
  tools: tuple[dict, ...]

  def run(
    self, sandbox: Sandbox, instruction: str, generate: GenerateFn, tokenizer, cfg: EpisodeConfig
  ) -> EpisodeResult:
    """Runs one episode until submit or a limit (reward not filled in)."""

  def script_step(
    self, tokenizer, script: str, index: int, cfg: EpisodeConfig, wait_s: float
  ) -> ScriptStep:
    """The canonical reply that runs shell script number `index`."""

  def submit_text(self, tokenizer, cfg: EpisodeConfig) -> str:
    """The canonical reply that submits (repeated if the harness asks to confirm)."""


_REGISTRY: dict[str, Harness] = {}


def register(harness: Harness) -> Harness:
  """Adds a harness under its `name`; a name can be registered once."""
  if harness.name in _REGISTRY:
    raise ValueError(f"harness {harness.name!r} is already registered")
  _REGISTRY[harness.name] = harness
  return harness


def names() -> tuple[str, ...]:
  return tuple(sorted(_REGISTRY))


def get(name: str) -> Harness:
  """The harness called `name` (EpisodeConfig.harness); a clear error lists the known ones."""
  try:
    return _REGISTRY[name]
  except KeyError:
    raise ValueError(f"EpisodeConfig.harness={name!r}; expected one of {names()}") from None


def run_episode(
  sandbox: Sandbox, instruction: str, generate: GenerateFn, tokenizer, cfg: EpisodeConfig
) -> EpisodeResult:
  """One episode in `cfg.harness` (the reward is filled in by agents/worker.py)."""
  return get(cfg.harness).run(sandbox, instruction, generate, tokenizer, cfg)


for _builtin in (shell.BASH_TOOL, shell.MINI_SWE, terminus.TERMINUS):
  register(_builtin)
