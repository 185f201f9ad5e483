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

Also here: scripted Terminus policies (canonical JSON replies) used as the oracle / do-nothing
reference policies by the evaluation runner and the tests.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shlex
import time
from typing import Sequence

from tmax_jax.agents import formats
from tmax_jax.agents.episode import EpisodeResult, GenerateFn, add_generated, next_budget
from tmax_jax.agents.scripted import ScriptedCompletion, solution_commands
from tmax_jax.sandbox.api import Sandbox, SandboxError

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
RESTARTED = ("The terminal session ended (for example after `exit`) and a new one was started.\n"
             "Current Terminal Screen:\n{}")


@dataclasses.dataclass(frozen=True)
class TerminusConfig:
  """Episode limits (the recipe's defaults, as in EpisodeConfig) and the tmux pane settings.

  max_tool_calls counts keystroke commands sent to the pane.
  """

  max_tool_calls: int = 64
  max_turns: int = 128
  turn_max_tokens: int = 16384
  max_response_tokens: int = 65536
  wall_time_s: float = 3600.0
  enable_thinking: bool | None = None
  max_output_bytes: int = formats.observation.TERMINUS_MAX_BYTES
  session: str = "agent"
  socket: str = "/tmp/.tmax-tmux.sock"
  width: int = 160
  height: int = 40
  history_limit: int = 100_000
  startup_wait_s: float = 0.5
  tmux_timeout_s: float = 30.0


def from_episode_config(cfg, **overrides) -> TerminusConfig:
  """A TerminusConfig carrying an EpisodeConfig's shared limits."""
  shared = ("max_tool_calls", "max_turns", "turn_max_tokens", "max_response_tokens",
            "wall_time_s", "enable_thinking")
  return TerminusConfig(**{k: getattr(cfg, k) for k in shared}, **overrides)


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
      raise SandboxFailure("oom" if out.status == "oom" else "sandbox_crash",
                           f"tmux control command {out.status}: {command[:200]}")
    return out

  def start(self) -> str:
    """Starts the session (bash in the sandbox workdir); returns the initial screen."""
    check = self._run("command -v tmux")
    if check.exit_code != 0:
      raise SandboxError("tmux is not installed in the sandbox image; the Terminus-2 harness "
                         "needs it (add it to sandbox/packages.txt and rebuild the rootfs)")
    c = self.cfg
    out = self._run(f"{self._tmux} -f /dev/null start-server \\; "
                    f"set-option -g history-limit {c.history_limit} \\; "
                    f"set-option -g default-shell /bin/bash \\; "
                    f"new-session -d -s {self._target} -x {c.width} -y {c.height} -c \"$PWD\" "
                    f"'bash --noprofile --norc -i' 2>&1")
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
    chunks = [keystrokes[i:i + n] for i in range(0, len(keystrokes), n)]
    flag = "-l " if len(chunks) > 1 else ""
    for chunk in chunks:
      out = self._run(f"{self._tmux} send-keys -t {self._target} {flag}-- {shlex.quote(chunk)}")
      self._check(out, "send-keys")

  def _capture(self, history: bool) -> str:
    """Pane text (with the whole history or only the screen), wrapped lines joined, trailing
    blanks stripped."""
    span = "-S - " if history else ""
    out = self._run(f"{self._tmux} capture-pane -p -J {span}-t {self._target}",
                    max_chars=50_000_000 if history else 1_000_000)
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
      return NEW_OUTPUT.format(now[previous.rfind("\n") + 1:])
    return SCREEN.format(self.screen())

  def restart(self) -> str:
    self._run(f"{self._tmux} kill-server 2>/dev/null; true")
    return self.start()


# ----------------------------------------------------------------------------------------------
# the episode loop

def _template_kwargs(cfg: TerminusConfig) -> dict:
  return {} if cfg.enable_thinking is None else {"enable_thinking": cfg.enable_thinking}


def initial_prompt_ids(tokenizer, instruction: str, screen: str, cfg: TerminusConfig) -> list[int]:
  """One user message: the harness instructions, the task and the initial screen."""
  text = PROMPT.format(instruction=instruction.strip(), screen=screen)
  return formats.prompt_ids(tokenizer, [{"role": "user", "content": text}],
                            **_template_kwargs(cfg))


def _prefilled_reasoning(tokenizer, tokens) -> str:
  """'<think>\n' when the generation prompt opened a reasoning block (Qwen3.5 thinking mode), so
  that a reply which never closes it is parsed as reasoning only (formats.strip_reasoning)."""
  tail = tokenizer.decode(list(tokens[-4:]), skip_special_tokens=False)
  return formats.common.THINK_OPEN + "\n" if tail.endswith(formats.common.THINK_OPEN + "\n") else ""


def _execute(pane: TmuxPane, action: formats.TerminusAction, res: EpisodeResult,
             cfg: TerminusConfig, deadline: float) -> str:
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
    return formats.limit_output_bytes(pane.new_output(), cfg.max_output_bytes)
  except PaneClosed:
    return RESTARTED.format(pane.restart())


def run_terminus_episode(sandbox: Sandbox, instruction: str, generate: GenerateFn, tokenizer,
                         cfg: TerminusConfig = TerminusConfig()) -> EpisodeResult:
  """Runs the Terminus-2 loop until a confirmed task_complete or a limit.

  `generate(token_ids, max_tokens)` -> Completion, as for `episode.run_episode`. status:
  submitted (task_complete confirmed) | max_tool_calls | max_turns | max_response_tokens |
  wall_time | oom | sandbox_crash.
  """
  eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
  pane = TmuxPane(sandbox, cfg)
  traj = formats.TokenTrajectory(eos_id=eos)
  traj.add_prompt(initial_prompt_ids(tokenizer, instruction, pane.start(), cfg))
  res, started, pending = EpisodeResult(traj), time.monotonic(), False
  kw = _template_kwargs(cfg)
  try:
    while (budget := next_budget(res, cfg, started)) > 0:
      prefill = _prefilled_reasoning(tokenizer, traj.tokens)
      out = generate(traj.tokens, budget)
      add_generated(traj, out)
      res.num_turns += 1
      text = prefill + tokenizer.decode(out.token_ids, skip_special_tokens=False)
      text = text.removesuffix(tokenizer.eos_token)
      try:
        action = formats.parse_terminus(text)
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
# scripted Terminus policies (canonical JSON replies)

DONE_MARK = "TMAX_STEP_DONE"


def reply_text(commands: Sequence[tuple[str, float]], task_complete: bool = False,
               analysis: str = "Reading the terminal.", plan: str = "Run the next step.") -> str:
  """A canonical Terminus-2 reply (the JSON object alone)."""
  return json.dumps({"analysis": analysis, "plan": plan,
                     "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
                     "task_complete": task_complete}, indent=2)


def script_keystrokes(script: str) -> str:
  """Keystrokes that run a whole script in the pane's shell as one line: base64 keeps tabs (which
  would trigger completion), `!` (history expansion) and heredocs intact."""
  b64 = base64.b64encode(script.encode()).decode()
  return f"echo {b64} | base64 -d > /tmp/tmax_step.sh && bash /tmp/tmax_step.sh\n"


class TerminusReplies:
  """Replies with fixed texts in order (the last one repeats); `generate(ids, max_tokens)`."""

  def __init__(self, tokenizer, texts: Sequence[str]):
    self._eos = tokenizer.eos_token
    self._ids = [formats.tokens.encode(tokenizer, t + self._eos) for t in texts]
    self._turn = 0

  def _reply(self, ids: list[int], max_tokens: int) -> ScriptedCompletion:
    finish = "stop" if len(ids) <= max_tokens else "length"
    ids = ids[:max_tokens]
    return ScriptedCompletion(list(ids), [0.0] * len(ids), [-1] * len(ids), finish)

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    ids = self._ids[min(self._turn, len(self._ids) - 1)]
    self._turn += 1
    return self._reply(ids, max_tokens)


class TerminusScript(TerminusReplies):
  """Runs shell scripts one by one, waiting (short waits, reading the new output) until each one
  printed its done mark, then sends task_complete twice. Gives up waiting after max_waits."""

  def __init__(self, tokenizer, scripts: Sequence[str], wait_s: float = 0.5,
               max_waits: int = 240):
    super().__init__(tokenizer, [reply_text([], True)])
    self._tok, self._wait_s, self._max_waits = tokenizer, wait_s, max_waits
    self._steps = [script_keystrokes(s).removesuffix("\n") + f"; printf '%s_%d\\n' {DONE_MARK} {i}\n"
                   for i, s in enumerate(scripts)]
    self._step, self._waits, self._seen, self._done = 0, 0, None, False

  def _encode(self, text: str) -> list[int]:
    return formats.tokens.encode(self._tok, text + self._eos)

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    new = self._tok.decode(list(token_ids[self._seen:])) if self._seen is not None else ""
    if self._step > 0 and not self._done and f"{DONE_MARK}_{self._step - 1}" not in new \
        and self._waits < self._max_waits:
      self._waits += 1  # the previous step is still running: wait and read again
      text = reply_text([("", self._wait_s)], plan="Wait for the command to finish.")
    elif self._step < len(self._steps):
      text = reply_text([(self._steps[self._step], self._wait_s)])
      self._step, self._waits = self._step + 1, 0
    else:
      self._done = True
      text = reply_text([], True, plan="The task is done.")
    ids = self._encode(text)
    self._seen = len(token_ids) + len(ids)
    return self._reply(ids, max_tokens)


def terminus_oracle_policy(tokenizer, task, wait_s: float = 0.5) -> TerminusScript:
  """The task's solve.sh typed into the pane (as one script), then task_complete twice."""
  return TerminusScript(tokenizer, solution_commands(task), wait_s)


def terminus_noop_policy(tokenizer) -> TerminusReplies:
  """Declares the task complete twice without doing anything."""
  return TerminusReplies(tokenizer, [reply_text([], True)])
