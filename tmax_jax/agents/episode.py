"""One agent episode in a sandbox, token in / token out.

The loop of the recipe's harness (recipe.md): the model writes a reply, the harness parses exactly one
bash call from it, runs it in the sandbox's persistent shell and appends the observation tokens; the
episode ends when the model submits (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) or a limit is hit.
Every token the model produced is kept verbatim with its server logprob and policy version; the
observation tokens carry no loss. Nothing is re-tokenised between turns (see formats/tokens.py).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Protocol, Sequence

from tmax_jax.agents import formats
from tmax_jax.sandbox.api import Sandbox

HARNESSES = ("bash_tool", "mini_swe", "terminus")

SYSTEM_PROMPT = (
    "You are an expert terminal agent working in a Linux sandbox. Solve the task by running one "
    "shell command at a time with the `bash` tool; the shell keeps its working directory and "
    "environment between calls. When the task is done, run `{submit}` alone to submit.")

MINI_SWE_SYSTEM_PROMPT = (
    "You are an expert terminal agent working in a Linux sandbox. Every reply has a THOUGHT and "
    "exactly one ```bash code block with one command; the shell keeps its state between commands. "
    "When the task is done, reply with a block that runs `{submit}` alone.")


class Completion(Protocol):
  token_ids: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str


GenerateFn = Callable[[Sequence[int], int], Completion]


@dataclasses.dataclass(frozen=True)
class EpisodeConfig:
  """Per-episode limits and the harness (recipe defaults: 64 tool calls, 120 s per command,
  16384 tokens per turn, 65536 response tokens in all). The response is everything after the
  first prompt (generated and observation tokens), so prompt + response bounds the sequence."""

  harness: str = "bash_tool"
  family: str = "qwen3"  # tool-call syntax: qwen3 -> Hermes JSON, qwen3_5 -> XML
  max_tool_calls: int = 64
  max_turns: int = 128  # format errors count as turns but not as tool calls
  turn_max_tokens: int = 16384
  max_response_tokens: int = 65536
  command_timeout_s: float = 120.0
  wall_time_s: float = 3600.0
  enable_thinking: bool | None = None  # None: the template's default

  def __post_init__(self):
    if self.harness not in HARNESSES:
      raise ValueError(f"EpisodeConfig.harness={self.harness!r}; expected one of {HARNESSES}")
    if self.family not in formats.FAMILY_FORMAT:
      raise ValueError(f"EpisodeConfig.family={self.family!r}; expected one of "
                       f"{sorted(formats.FAMILY_FORMAT)}")


@dataclasses.dataclass
class EpisodeResult:
  """The trajectory and why it ended.

  status: submitted | max_tool_calls | max_turns | max_response_tokens | wall_time | oom |
  sandbox_crash. reward is filled in by the verifier afterwards.
  """

  trajectory: formats.TokenTrajectory
  status: str = "running"
  num_turns: int = 0
  num_tool_calls: int = 0
  num_format_errors: int = 0
  num_command_timeouts: int = 0
  reward: float = 0.0
  reward_reason: str = ""

  @property
  def prompt_length(self) -> int:
    first = self.trajectory.loss_mask.index(1) if 1 in self.trajectory.loss_mask else None
    return len(self.trajectory.tokens) if first is None else first


def _template_kwargs(cfg: EpisodeConfig) -> dict:
  return {} if cfg.enable_thinking is None else {"enable_thinking": cfg.enable_thinking}


def initial_prompt_ids(tokenizer, instruction: str, cfg: EpisodeConfig) -> list[int]:
  """The first prompt: system prompt (+ the bash tool schema for the native harness) and the task."""
  if cfg.harness == "bash_tool":
    system, tools = SYSTEM_PROMPT.format(submit=formats.SUBMIT_COMMAND), [formats.BASH_TOOL]
  else:
    system, tools = MINI_SWE_SYSTEM_PROMPT.format(submit=formats.SUBMIT_COMMAND), None
  messages = [{"role": "system", "content": system}, {"role": "user", "content": instruction}]
  return formats.prompt_ids(tokenizer, messages, tools=tools, **_template_kwargs(cfg))


def parse_command(text: str, cfg: EpisodeConfig) -> str:
  """The single bash command of a reply; raises formats.FormatError with the feedback to send."""
  if cfg.harness == "bash_tool":
    return formats.parse_bash_call(text, cfg.family)
  return formats.parse_fenced_bash(formats.strip_reasoning(text))


def _observation_ids(tokenizer, text: str, as_tool: bool, cfg: EpisodeConfig) -> list[int]:
  kw = _template_kwargs(cfg)
  if as_tool and cfg.harness == "bash_tool":
    return formats.tool_observation_ids(tokenizer, text, **kw)
  return formats.user_observation_ids(tokenizer, text, **kw)


def add_generated(traj: formats.TokenTrajectory, out: Completion) -> None:
  """Appends the completion in runs of equal policy version (a weight push can land mid-reply)."""
  ids, lps, vs = list(out.token_ids), list(out.logprobs), list(out.versions)
  if not (len(ids) == len(lps) == len(vs)):
    raise ValueError(f"completion has {len(ids)} ids, {len(lps)} logprobs, {len(vs)} versions")
  start = 0
  for i in range(1, len(ids) + 1):
    if i == len(ids) or vs[i] != vs[start]:
      traj.add_generated(ids[start:i], lps[start:i], vs[start])
      start = i


def _act(sandbox: Sandbox, command: str, res: EpisodeResult, cfg: EpisodeConfig) -> str | None:
  """Runs one command; returns the observation text, or None when the episode must end."""
  out = sandbox.run(command, timeout_s=cfg.command_timeout_s)
  if out.status == "oom":
    res.status = "oom"
    return None
  if out.status == "crashed":
    res.status = "sandbox_crash"
    return None
  if out.status == "timeout":
    res.num_command_timeouts += 1
    return formats.format_timeout(out.output, cfg.command_timeout_s)
  return formats.format_observation(out.output, -1 if out.exit_code is None else out.exit_code)


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


def run_episode(sandbox: Sandbox, instruction: str, generate: GenerateFn, tokenizer,
                cfg: EpisodeConfig = EpisodeConfig()) -> EpisodeResult:
  """Runs the harness loop until submit or a limit. `generate(token_ids, max_tokens)` returns a
  Completion (token ids incl. the stop token, logprobs, versions). The Terminus-2 harness (tmux
  keystrokes) has its own loop in terminus.py."""
  if cfg.harness == "terminus":
    from tmax_jax.agents import terminus  # pylint: disable=import-outside-toplevel (cycle)
    return terminus.run_terminus_episode(sandbox, instruction, generate, tokenizer,
                                         terminus.from_episode_config(cfg))
  traj = formats.TokenTrajectory(eos_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))
  traj.add_prompt(initial_prompt_ids(tokenizer, instruction, cfg))
  res, started = EpisodeResult(traj), time.monotonic()
  while (budget := next_budget(res, cfg, started)) > 0:
    out = generate(traj.tokens, budget)
    add_generated(traj, out)
    res.num_turns += 1
    text = tokenizer.decode(out.token_ids, skip_special_tokens=False)
    text = text.removesuffix(tokenizer.convert_ids_to_tokens(traj.eos_id))
    try:
      command = parse_command(text, cfg)
    except formats.FormatError as err:
      res.num_format_errors += 1
      observation, as_tool = err.feedback, False
    else:
      if formats.is_submit_command(command):
        res.status = "submitted"
        break
      res.num_tool_calls += 1
      observation, as_tool = _act(sandbox, command, res, cfg), True
      if observation is None:
        break
      if res.num_tool_calls >= cfg.max_tool_calls:
        res.status = "max_tool_calls"
        break
    if not append_observation(res, _observation_ids(tokenizer, observation, as_tool, cfg), cfg):
      break
  return res


def append_observation(res: EpisodeResult, ids: list[int], cfg: EpisodeConfig) -> bool:
  """Appends observation tokens unless the episode cannot continue after them (turn limit, or the
  response budget would be used up), so that prompt + response never exceeds its bound and no
  observation is paid for that no turn will read. Returns whether the episode goes on."""
  if res.num_turns >= cfg.max_turns:
    res.status = "max_turns"
    return False
  used = len(res.trajectory.tokens) - res.prompt_length
  if used + len(ids) + 1 >= cfg.max_response_tokens:  # +1: a closing <|im_end|> may be added
    res.status = "max_response_tokens"
    return False
  res.trajectory.add_observation(ids)
  return True
