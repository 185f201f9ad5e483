"""Terminus-2 harness: JSON keystrokes into a tmux pane inside the sandbox, token in / token out.

The loop (Terminal-Bench's default agent, formats.md):
  - a tmux session is started in the sandbox; the first prompt (one user message) holds the task,
    the JSON reply format and the initial screen;
  - every reply is parsed with `formats.parse_terminus`; each command's keystrokes are sent verbatim
    with `tmux send-keys` (one argument, so tmux key names such as `C-c` or `Enter` are keys and
    anything else is typed literally, "\\n" included), then the harness waits its `duration`
    (default 1 s, at most 60 s);
  - the observation (a user turn) is the new pane output since the last capture, capped at 10 KB
    head + tail; when the screen was redrawn (clear, a full-screen program) it is the current
    screen instead;
  - `task_complete: true` must be sent twice in a row: the first one is answered with the screen
    and a request to confirm; anything else in between resets it;
  - a reply that does not parse gets the parser's feedback as the next observation.
Tokens follow formats/tokens.py: the generated ids are kept verbatim with their logprobs and policy
versions, and observation ids are the template's own user-turn continuation (no loss).

Also here: the canonical JSON replies that scripted policies (agents/scripted.py: the oracle, the
do-nothing policy) send through this harness.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shlex
import time
from collections.abc import Sequence

from tmax_jax import formats
from tmax_jax.agents.episode import (
  EpisodeConfig,
  EpisodeResult,
  GenerateFn,
  ScriptStep,
  add_generated,
  new_trajectory,
  next_budget,
  reply_text,
  template_kwargs,
)
from tmax_jax.sandbox import Sandbox, SandboxError

PROMPT = """\
You are an AI assistant solving command-line tasks in a Linux environment. You act through a \
terminal: each of your replies sends keystrokes to a tmux session and you then see what the \
terminal printed.

Reply with exactly one JSON object of this form:
{{
  "analysis": "what the current terminal output shows and what is still missing",
  "plan": "the next steps and why",
  "commands": [
    {{"keystrokes": "ls -la\\n", "duration": 0.1}},
    {{"keystrokes": "cd project\\n", "duration": 0.1}}
  ],
  "task_complete": false
}}

- "keystrokes" are sent exactly as written: end a shell command with "\\n" to run it; tmux key \
names such as "C-c" (interrupt) or "C-d" may be sent as a command of their own.
- "duration" is how many seconds to wait for the command to finish before the terminal is read \
(default 1.0, at most 60). Prefer short waits; you can always wait longer in a later reply.
- "commands" may be empty, for example to only wait or to finish.
- Set "task_complete" to true when the task is done; you will be asked to confirm once.

Task:
{instruction}

Current terminal state:
{screen}
"""

CONFIRM = """\
Current terminal state:
{screen}

Are you sure you want to mark the task as complete? The solution will be graded and you cannot \
make further changes. If so, reply again with "task_complete": true."""

SEND_CHUNK_CHARS = 4096  # tmux rejects commands over ~16 KB ("command too long")
NEW_OUTPUT = "New Terminal Output:\n{}"
SCREEN = "Current Terminal Screen:\n{}"
RESTARTED = (
  "The terminal session ended (for example after `exit`) and a new one was started.\n"
  "Current Terminal Screen:\n{}"
)


@dataclasses.dataclass(frozen=True)
class TerminusConfig:
  """The tmux pane settings. The episode limits are EpisodeConfig's, as for every harness
  (max_tool_calls counts keystroke commands sent to the pane; command_timeout_s is not used:
  keystrokes return at once and `duration` decides the wait)."""

  max_output_bytes: int = formats.observation.TERMINUS_MAX_BYTES
  session: str = "agent"
  socket: str = "/tmp/.tmax-tmux.sock"
  width: int = 160
  height: int = 40
  history_limit: int = 100_000
  startup_wait_s: float = 0.5
  tmux_timeout_s: float = 30.0


class PaneClosed(Exception):
  """The tmux session is gone (its shell exited)."""


class SandboxFailure(SandboxError):
  """A tmux control command hit an OOM or crashed the sandbox shell; `status` says which."""

  def __init__(self, status: str, message: str):
    super().__init__(message)
    self.status = status


class TmuxPane:
  """One tmux session in the sandbox, driven through the sandbox's persistent shell."""

  def __init__(self, sandbox: Sandbox, cfg: TerminusConfig):
    self.sandbox, self.cfg = sandbox, cfg
    self._last = ""
    self._tmux = f"tmux -S {shlex.quote(cfg.socket)}"
    self._target = shlex.quote(cfg.session)

  def _run(self, command: str, max_chars: int = 10_000):
    out = self.sandbox.run(command, timeout_s=self.cfg.tmux_timeout_s, max_output_chars=max_chars)
    if out.status in ("oom", "crashed"):
      raise SandboxFailure(
        "oom" if out.status == "oom" else "sandbox_crash",
        f"tmux control command {out.status}: {command[:200]}",
      )
    return out

  def start(self) -> str:
    """Starts the session (bash in the sandbox workdir); returns the initial screen."""
    check = self._run("command -v tmux")
    if check.exit_code != 0:
      raise SandboxError(
        "tmux is not installed in the sandbox image; the Terminus-2 harness "
        "needs it (add it to sandbox/packages.txt and rebuild the rootfs)"
      )
    c = self.cfg
    out = self._run(
      f"{self._tmux} -f /dev/null start-server \\; "
      f"set-option -g history-limit {c.history_limit} \\; "
      f"set-option -g default-shell /bin/bash \\; "
      f'new-session -d -s {self._target} -x {c.width} -y {c.height} -c "$PWD" '
      f"'bash --noprofile --norc -i' 2>&1"
    )
    if out.exit_code != 0:
      raise SandboxError(f"could not start the tmux session: {out.output.strip()[:500]}")
    self._run(f"{self._tmux} set-option -t {self._target} status off")
    time.sleep(c.startup_wait_s)
    self._last = self.capture()
    return self.screen()

  def _check(self, out, what: str) -> None:
    """PaneClosed when the session is gone; any other tmux failure is a SandboxError."""
    if out.exit_code == 0:
      return
    if self._run(f"{self._tmux} has-session -t {self._target}").exit_code != 0:
      raise PaneClosed(out.output.strip())
    raise SandboxError(f"tmux {what} failed: {out.output.strip()[:500]}")

  def send_keys(self, keystrokes: str) -> None:
    """Sends `keystrokes` as one send-keys argument: a key name is that key, else literal text.
    Text longer than tmux's command size limit goes in literal (-l) chunks: it cannot be a key
    name, so the result is the same."""
    if not keystrokes:
      return
    n = SEND_CHUNK_CHARS
    chunks = [keystrokes[i : i + n] for i in range(0, len(keystrokes), n)]
    flag = "-l " if len(chunks) > 1 else ""
    for chunk in chunks:
      out = self._run(f"{self._tmux} send-keys -t {self._target} {flag}-- {shlex.quote(chunk)}")
      self._check(out, "send-keys")

  def _capture(self, history: bool) -> str:
    """Pane text (with the whole history or only the screen), wrapped lines joined, trailing
    blanks stripped."""
    span = "-S - " if history else ""
    out = self._run(
      f"{self._tmux} capture-pane -p -J {span}-t {self._target}",
      max_chars=50_000_000 if history else 1_000_000,
    )
    self._check(out, "capture-pane")
    return "\n".join(line.rstrip() for line in out.output.splitlines()).rstrip()

  def capture(self) -> str:
    return self._capture(history=True)

  def screen(self) -> str:
    return self._capture(history=False)

  def new_output(self) -> str:
    """Output since the last call, from its last line on (so the typed command shows after its
    prompt); the current screen when the history was rewritten (clear, full-screen programs)."""
    now = self.capture()
    previous, self._last = self._last, now
    if now.startswith(previous):  # from the start of the last line seen (the prompt + command)
      return NEW_OUTPUT.format(now[previous.rfind("\n") + 1 :])
    return SCREEN.format(self.screen())

  def restart(self) -> str:
    self._run(f"{self._tmux} kill-server 2>/dev/null; true")
    return self.start()


# ----------------------------------------------------------------------------------------------
# the episode loop


def initial_prompt_ids(tokenizer, instruction: str, screen: str, cfg: EpisodeConfig) -> list[int]:
  """One user message: the harness instructions, the task and the initial screen."""
  text = PROMPT.format(instruction=instruction.strip(), screen=screen)
  return formats.prompt_ids(tokenizer, [{"role": "user", "content": text}], **template_kwargs(cfg))


def _prefilled_reasoning(tokenizer, tokens) -> str:
  """'<think>\n' when the generation prompt opened a reasoning block (Qwen3.5 thinking mode), so
  that a reply which never closes it is parsed as reasoning only (formats.strip_reasoning)."""
  tail = tokenizer.decode(list(tokens[-4:]), skip_special_tokens=False)
  return formats.common.THINK_OPEN + "\n" if tail.endswith(formats.common.THINK_OPEN + "\n") else ""


def _execute(
  pane: TmuxPane,
  action: formats.TerminusAction,
  res: EpisodeResult,
  cfg: EpisodeConfig,
  deadline: float,
) -> str:
  """Sends the action's commands (up to the tool-call and wall-time limits); -> observation."""
  for command in action.commands:
    if res.num_tool_calls >= cfg.max_tool_calls:
      res.status = "max_tool_calls"
      break
    res.num_tool_calls += 1
    try:
      pane.send_keys(command.keystrokes)
    except PaneClosed:
      return RESTARTED.format(pane.restart())
    time.sleep(max(0.0, min(command.duration, deadline - time.monotonic())))
  try:
    return formats.limit_output_bytes(pane.new_output(), pane.cfg.max_output_bytes)
  except PaneClosed:
    return RESTARTED.format(pane.restart())


# Frozen defaults of run_terminus_episode (built once, shared: the dataclasses are immutable).
_DEFAULT_EPISODE = EpisodeConfig(harness="terminus", family="qwen3")
_DEFAULT_PANE = TerminusConfig()


def run_terminus_episode(
  sandbox: Sandbox,
  instruction: str,
  generate: GenerateFn,
  tokenizer,
  cfg: EpisodeConfig = _DEFAULT_EPISODE,
  pane_cfg: TerminusConfig = _DEFAULT_PANE,
) -> EpisodeResult:
  """Runs the Terminus-2 loop until a confirmed task_complete or a limit.

  `generate(token_ids, max_tokens)` -> Completion. status: submitted (task_complete confirmed) |
  max_tool_calls | max_turns | max_response_tokens | wall_time | oom | sandbox_crash.
  """
  pane = TmuxPane(sandbox, pane_cfg)
  prompt = initial_prompt_ids(tokenizer, instruction, pane.start(), cfg)
  traj = new_trajectory(tokenizer, prompt, cfg)
  res, started, pending = EpisodeResult(traj), time.monotonic(), False
  kw = template_kwargs(cfg)
  try:
    while (budget := next_budget(res, cfg, started)) > 0:
      prefill = _prefilled_reasoning(tokenizer, traj.tokens)
      out = generate(traj.tokens, budget)
      add_generated(traj, out)
      res.num_turns += 1
      try:
        action = formats.parse_terminus(reply_text(tokenizer, out, prefill))
      except formats.FormatError as err:
        res.num_format_errors += 1
        pending = False
        traj.add_observation(formats.user_observation_ids(tokenizer, err.feedback, **kw))
        continue
      screen = _execute(pane, action, res, cfg, started + cfg.wall_time_s)
      if res.status != "running":
        break
      if action.task_complete and pending:
        res.status = "submitted"
        break
      pending = action.task_complete
      message = CONFIRM.format(screen=screen) if pending else action.warning_text() + screen
      traj.add_observation(formats.user_observation_ids(tokenizer, message, **kw))
  except SandboxError as err:  # the trajectory so far is kept; the reward will be 0
    res.status = err.status if isinstance(err, SandboxFailure) else "sandbox_crash"
    res.reward_reason = str(err)
  return res


# ----------------------------------------------------------------------------------------------
# canonical Terminus-2 replies (what scripted policies send) and the registered harness

DONE_MARK = "TMAX_STEP_DONE"


def action_text(
  commands: Sequence[tuple[str, float]],
  task_complete: bool = False,
  analysis: str = "Reading the terminal.",
  plan: str = "Run the next step.",
) -> str:
  """A canonical Terminus-2 reply (the JSON object alone)."""
  return json.dumps(
    {
      "analysis": analysis,
      "plan": plan,
      "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
      "task_complete": task_complete,
    },
    indent=2,
  )


def script_keystrokes(script: str) -> str:
  """Keystrokes that run a whole script in the pane's shell as one line: base64 keeps tabs (which
  would trigger completion), `!` (history expansion) and heredocs intact."""
  b64 = base64.b64encode(script.encode()).decode()
  return f"echo {b64} | base64 -d > /tmp/tmax_step.sh && bash /tmp/tmax_step.sh\n"


@dataclasses.dataclass(frozen=True)
class TerminusHarness:
  """Terminus-2 as a registered harness (harnesses.py): the loop and its canonical replies."""

  name: str = "terminus"
  pane: TerminusConfig = TerminusConfig()
  tools: tuple[dict, ...] = ()  # JSON replies in text: no native tools

  def run(
    self, sandbox: Sandbox, instruction: str, generate: GenerateFn, tokenizer, cfg: EpisodeConfig
  ) -> EpisodeResult:
    return run_terminus_episode(sandbox, instruction, generate, tokenizer, cfg, self.pane)

  def script_step(
    self, tokenizer, script: str, index: int, cfg: EpisodeConfig, wait_s: float
  ) -> ScriptStep:
    """The script typed as one line that prints a done mark; the policy waits for the mark."""
    del tokenizer, cfg
    mark = f"{DONE_MARK}_{index}"
    keys = (
      script_keystrokes(script).removesuffix("\n") + f"; printf '%s_%d\\n' {DONE_MARK} {index}\n"
    )
    wait = action_text([("", wait_s)], plan="Wait for the command to finish.")
    return ScriptStep(action_text([(keys, wait_s)]), mark, wait)

  def submit_text(self, tokenizer, cfg: EpisodeConfig) -> str:
    """task_complete (sent again to confirm: a scripted policy repeats its last reply)."""
    del tokenizer, cfg
    return action_text([], True, plan="The task is done.")


TERMINUS = TerminusHarness()
