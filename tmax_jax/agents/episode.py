"""What every harness shares: the episode config and result, the model-call protocol, budgets.

An episode is token in / token out: the harness renders the first prompt, the policy (`generate`)
replies with token ids, their server logprobs and policy versions, and the harness appends the
observation tokens (no loss) until the model submits or a limit is hit. Nothing is re-tokenised
between turns (see formats/tokens.py). The harness loops themselves live in shell.py (bash tool,
mini-SWE text) and terminus.py (Terminus-2); harnesses.py is their registry.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from tmax_jax import formats
from tmax_jax.models import registry


class Completion(Protocol):
  token_ids: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str


GenerateFn = Callable[[Sequence[int], int], Completion]  # (token ids, max new tokens)


@dataclasses.dataclass(frozen=True)
class EpisodeConfig:
  """Per-episode limits, the harness (a name in harnesses.py) and the model family.

  Recipe defaults: 64 tool calls, 120 s per command, 16384 tokens per turn, 65536 response tokens
  in all. The response is everything after the first prompt (generated and observation tokens),
  so prompt + response bounds the sequence. The harness name is checked by the registry when an
  episode runner is built (harnesses.get), which sits above this module.
  """

  # the agent loop: bash_tool | mini_swe | terminus (agents/harnesses.py)
  harness: str = "bash_tool"
  # Tokenizer family: tool-call syntax and stop tokens (qwen3 -> Hermes JSON, qwen3_5 -> XML).
  # "" = the policy's (a job derives it from its model: loop/config.with_family).
  family: str = ""
  # The recipe's prompt cap (2048): a task whose first prompt is longer is skipped and reported
  # (PromptTooLongError), never truncated. 0 = no cap.
  max_prompt_tokens: int = 0
  max_tool_calls: int = 64  # tool calls before the episode ends (recipe: 64)
  max_turns: int = 128  # format errors count as turns but not as tool calls
  turn_max_tokens: int = 16384  # generated tokens per turn (recipe: 16384)
  # generated + observation tokens after the first prompt (recipe: 65536)
  max_response_tokens: int = 65536
  command_timeout_s: float = 120.0  # per command (recipe: 120 s)
  # The episode's wall-clock budget; 0 = each task's own [agent] timeout_sec (Terminal-Bench 2.0's
  # protocol). Either is scaled by runner.timeout_multiplier per trial (worker.trial_episode).
  wall_time_s: float = 3600.0
  enable_thinking: bool | None = None  # None: the template's default

  def __post_init__(self):
    if self.wall_time_s < 0:
      raise ValueError(f"EpisodeConfig.wall_time_s={self.wall_time_s}; expected >= 0")
    if not self.family:
      return
    try:
      formats.tool_call_format(self.family)  # a registered tokenizer with a known syntax
    except ValueError as e:
      raise ValueError(f"EpisodeConfig.family={self.family!r}: {e}") from e


@dataclasses.dataclass
class EpisodeResult:
  """The trajectory and why it ended.

  status: submitted | max_tool_calls | max_turns | max_response_tokens | wall_time | oom |
  sandbox_crash. reward is filled in by the verifier afterwards (agents/worker.py; a sandbox_crash
  episode is never scored: an infrastructure failure).
  """

  trajectory: formats.TokenTrajectory
  status: str = "running"
  num_turns: int = 0
  num_tool_calls: int = 0
  num_format_errors: int = 0
  num_command_timeouts: int = 0
  reward: float = 0.0
  reward_reason: str = ""
  sandbox: str = ""  # the sandbox that ran it (runner.RunResult.sandbox)
  verified_at: float = 0.0  # wall time (time.time) its reward was read; 0 while unscored

  @property
  def prompt_length(self) -> int:
    first = self.trajectory.loss_mask.index(1) if 1 in self.trajectory.loss_mask else None
    return len(self.trajectory.tokens) if first is None else first


def template_kwargs(cfg: EpisodeConfig) -> dict:
  """Chat-template options of the episode (thinking on/off, or the template's default)."""
  return {} if cfg.enable_thinking is None else {"enable_thinking": cfg.enable_thinking}


def stop_token_ids(cfg: EpisodeConfig) -> tuple[int, ...]:
  """The ids that end a reply (end of turn, end of text) for the episode's model family: the one
  definition that every episode path and the servers they start use."""
  if not cfg.family:
    raise ValueError(
      "episode.family is empty: it follows the model when a job loads one; set it (qwen3, "
      "qwen3_5) where no model is named"
    )
  return registry.tokenizer_spec(cfg.family).stop_token_ids()


class PromptTooLongError(ValueError):
  """A task's first prompt exceeds EpisodeConfig.max_prompt_tokens. The episode does not run and
  its group is dropped and counted (`groups_dropped_prompt_too_long`), never scored."""

  kind = "prompt_too_long"
  retryable = False  # the same task gives the same prompt: a rerun cannot succeed


def new_trajectory(
  tokenizer, prompt_ids: Sequence[int], cfg: EpisodeConfig | None = None
) -> formats.TokenTrajectory:
  """A trajectory holding the first prompt; a turn cut by its token limit is closed with the
  tokenizer's end-of-turn token (formats/tokens.py relies on the same token). Raises
  PromptTooLongError when the prompt exceeds `cfg.max_prompt_tokens`."""
  if cfg is not None and 0 < cfg.max_prompt_tokens < len(prompt_ids):
    raise PromptTooLongError(
      f"the task's first prompt has {len(prompt_ids)} tokens, more than "
      f"episode.max_prompt_tokens={cfg.max_prompt_tokens}: skipped (not truncated)"
    )
  traj = formats.TokenTrajectory(eos_id=tokenizer.convert_tokens_to_ids(tokenizer.eos_token))
  traj.add_prompt(prompt_ids)
  return traj


def reply_text(tokenizer, out: Completion, prefix: str = "") -> str:
  """The decoded reply without its end-of-turn token; `prefix` is text the generation prompt
  pre-filled (Qwen3.5's `<think>\\n`), so an unclosed reasoning block parses as one."""
  text = prefix + tokenizer.decode(list(out.token_ids), skip_special_tokens=False)
  return text.removesuffix(tokenizer.eos_token)


def add_generated(traj: formats.TokenTrajectory, out: Completion) -> None:
  """Appends the completion in runs of equal policy version (a weight push can land mid-reply),
  with the server's top-K ids/logprobs per token when it returned them."""
  ids, lps, vs = list(out.token_ids), list(out.logprobs), list(out.versions)
  if not (len(ids) == len(lps) == len(vs)):
    raise ValueError(f"completion has {len(ids)} ids, {len(lps)} logprobs, {len(vs)} versions")
  top_ids, top_lps = getattr(out, "topk_ids", None), getattr(out, "topk_logprobs", None)
  start = 0
  for i in range(1, len(ids) + 1):
    if i == len(ids) or vs[i] != vs[start]:
      traj.add_generated(
        ids[start:i],
        lps[start:i],
        vs[start],
        top_ids[start:i] if top_ids else None,
        top_lps[start:i] if top_lps else None,
      )
      start = i


def next_budget(res: EpisodeResult, cfg: EpisodeConfig, started: float) -> int:
  """Tokens the next turn may generate; 0 (with res.status set) when a limit ends the episode."""
  if res.num_turns >= cfg.max_turns:
    res.status = "max_turns"
  elif time.monotonic() - started > cfg.wall_time_s:
    res.status = "wall_time"
  else:
    left = cfg.max_response_tokens - (len(res.trajectory.tokens) - res.prompt_length)
    if left <= 0:
      res.status = "max_response_tokens"
    return max(0, min(cfg.turn_max_tokens, left)) if res.status == "running" else 0
  return 0


def append_observation(res: EpisodeResult, ids: list[int], cfg: EpisodeConfig) -> bool:
  """Appends observation tokens unless the episode cannot continue after them (turn limit, or the
  response budget would be used up), so that prompt + response never exceeds its bound and no
  observation is paid for that no turn will read. Returns whether the episode goes on."""
  if res.num_turns >= cfg.max_turns:
    res.status = "max_turns"
    return False
  used = len(res.trajectory.tokens) - res.prompt_length
  if used + len(ids) + 1 >= cfg.max_response_tokens:  # +1: a closing end-of-turn may be added
    res.status = "max_response_tokens"
    return False
  res.trajectory.add_observation(ids)
  return True


@dataclasses.dataclass(frozen=True)
class ScriptStep:
  """A harness's canonical reply that runs one script (for scripted policies, agents/scripted.py).

  text: the assistant turn without its end-of-turn token. done_mark: None when the script has
  finished once the observation arrives (a shell call); else a string the script prints when
  done, and `wait_text` is the reply that waits and reads the terminal again (tmux keystrokes
  return before the command finishes).
  """

  text: str
  done_mark: str | None = None
  wait_text: str = ""


_MOVED = {
  "run_episode": "tmax_jax.agents.harnesses.run_episode",
  "HARNESSES": "tmax_jax.agents.harnesses.names()",
  "initial_prompt_ids": "tmax_jax.agents.shell.ShellHarness.initial_prompt_ids",
  "parse_command": "tmax_jax.agents.shell.ShellHarness.parse_command",
  "SYSTEM_PROMPT": "tmax_jax.agents.shell.SYSTEM_PROMPT",
  "MINI_SWE_SYSTEM_PROMPT": "tmax_jax.agents.shell.MINI_SWE_SYSTEM_PROMPT",
}


def __getattr__(name: str):
  """Names that moved when the harnesses got their registry: say where, do not alias them."""
  if name in _MOVED:
    raise ImportError(
      f"tmax_jax.agents.episode.{name} moved to {_MOVED[name]} (harness loops "
      "live in shell.py / terminus.py, looked up in harnesses.py)"
    )
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
