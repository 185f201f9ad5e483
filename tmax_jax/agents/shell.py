"""The recipe's shell harnesses: one bash command per reply in a persistent shell.

`bash_tool` (the RL harness, recipe.md): one native tool `bash` with one argument `command`, called
in the model family's tool-call syntax (Hermes JSON for Qwen3, XML for Qwen3.5); observations are
tool turns. `mini_swe` (mini-SWE-agent text mode): a THOUGHT and one ```bash block per reply;
observations are user turns. Both submit with `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`; a reply
that does not parse is answered with the parser's feedback as a user turn. Observations are the
command's output, head + tail truncated, then `(exit_code=N)`.
"""

from __future__ import annotations

import dataclasses
import time

from tmax_jax import formats
from tmax_jax.agents.episode import (
  EpisodeConfig,
  EpisodeResult,
  GenerateFn,
  ScriptStep,
  add_generated,
  append_observation,
  new_trajectory,
  next_budget,
  reply_text,
  template_kwargs,
)
from tmax_jax.sandbox import Sandbox

SYSTEM_PROMPT = (
  "You are an expert terminal agent working in a Linux sandbox. Solve the task by running one "
  "shell command at a time with the `bash` tool; the shell keeps its working directory and "
  "environment between calls. When the task is done, run `{submit}` alone to submit."
)

MINI_SWE_SYSTEM_PROMPT = (
  "You are an expert terminal agent working in a Linux sandbox. Every reply has a THOUGHT and "
  "exactly one ```bash code block with one command; the shell keeps its state between commands. "
  "When the task is done, reply with a block that runs `{submit}` alone."
)


@dataclasses.dataclass(frozen=True)
class ShellHarness:
  """One command per reply; `native_tool` picks the bash tool call (else a fenced block)."""

  name: str
  native_tool: bool

  @property
  def tools(self) -> tuple[dict, ...]:
    return (formats.BASH_TOOL,) if self.native_tool else ()

  def initial_prompt_ids(self, tokenizer, instruction: str, cfg: EpisodeConfig) -> list[int]:
    """System prompt (+ the bash tool schema for the native harness) and the task."""
    prompt = SYSTEM_PROMPT if self.native_tool else MINI_SWE_SYSTEM_PROMPT
    messages = [
      {"role": "system", "content": prompt.format(submit=formats.SUBMIT_COMMAND)},
      {"role": "user", "content": instruction},
    ]
    return formats.prompt_ids(
      tokenizer,
      messages,
      tools=list(self.tools) or None,
      **template_kwargs(cfg),
    )

  def parse_command(self, text: str, cfg: EpisodeConfig) -> str:
    """The single bash command of a reply; raises formats.FormatError with the feedback."""
    if self.native_tool:
      return formats.parse_bash_call(text, cfg.family)
    return formats.parse_fenced_bash(formats.strip_reasoning(text))

  def observation_ids(self, tokenizer, text: str, as_tool: bool, cfg: EpisodeConfig) -> list[int]:
    if as_tool and self.native_tool:
      return formats.tool_observation_ids(tokenizer, text, **template_kwargs(cfg))
    return formats.user_observation_ids(tokenizer, text, **template_kwargs(cfg))

  def run(
    self, sandbox: Sandbox, instruction: str, generate: GenerateFn, tokenizer, cfg: EpisodeConfig
  ) -> EpisodeResult:
    """Runs the loop until submit or a limit. `generate(token_ids, max_tokens)` returns a
    Completion (token ids incl. the stop token, logprobs, versions)."""
    traj = new_trajectory(tokenizer, self.initial_prompt_ids(tokenizer, instruction, cfg), cfg)
    res, started = EpisodeResult(traj), time.monotonic()
    while (budget := next_budget(res, cfg, started)) > 0:
      out = generate(traj.tokens, budget)
      add_generated(traj, out)
      res.num_turns += 1
      try:
        command = self.parse_command(reply_text(tokenizer, out), cfg)
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
      ids = self.observation_ids(tokenizer, observation, as_tool, cfg)
      if not append_observation(res, ids, cfg):
        break
    return res

  # canonical replies for scripted policies

  def command_text(self, tokenizer, command: str, cfg: EpisodeConfig) -> str:
    """The assistant turn (without its end-of-turn token) that runs `command`."""
    if not self.native_tool:
      return f"THOUGHT: I run the next step.\n\n```bash\n{command}\n```"
    return formats.assistant_text(
      tokenizer, formats.bash_call_message(command), [formats.BASH_TOOL], **template_kwargs(cfg)
    )

  def script_step(
    self, tokenizer, script: str, index: int, cfg: EpisodeConfig, wait_s: float
  ) -> ScriptStep:
    del index, wait_s  # a shell call returns when the command is done
    return ScriptStep(self.command_text(tokenizer, script, cfg))

  def submit_text(self, tokenizer, cfg: EpisodeConfig) -> str:
    return self.command_text(tokenizer, formats.SUBMIT_COMMAND, cfg)


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


BASH_TOOL = ShellHarness("bash_tool", native_tool=True)
MINI_SWE = ShellHarness("mini_swe", native_tool=False)
