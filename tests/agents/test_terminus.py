"""Terminus-2 harness: scripted JSON policies drive a real tmux pane in a real sandbox.

Live tests need a sandbox backend, the base rootfs and tmux in it (sandbox/packages.txt); they
skip with the reason otherwise. The reply-format tests run anywhere.
"""

import base64
import json
import re

import pytest

from tmax_jax import formats
from tmax_jax.agents import scripted
from tmax_jax.agents import terminus as T
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.tokenizers import load_tokenizer


@pytest.fixture(scope="module")
def tok():
  return load_tokenizer("qwen3")


def _require_tmux_sandbox():
  try:
    from tmax_jax.sandbox import open_sandbox  # noqa: F401
    from tmax_jax.sandbox.images.base_rootfs import is_built, rootfs_path
  except ImportError as err:
    pytest.skip(f"sandbox backends not available: {err}")
  root = rootfs_path()
  if not is_built(root):
    pytest.skip("base rootfs not built (python3 -m tmax_jax.sandbox)")
  if not (root / "usr" / "bin" / "tmux").exists():
    pytest.skip(f"tmux is not in the base rootfs {root} (sandbox/packages.txt)")
  return root


@pytest.fixture()
def sandbox():
  root = _require_tmux_sandbox()
  from tmax_jax.sandbox import open_sandbox
  from tmax_jax.sandbox.api import EnvironmentSpec, Limits

  with open_sandbox(EnvironmentSpec(image=str(root), limits=Limits(memory_mb=2048))) as sb:
    yield sb


def _segments(traj, tok, mask: int) -> list[str]:
  """Decoded runs of tokens with loss_mask == mask, after the first generated token."""
  out, seg, started = [], [], False
  for t, m in zip(traj.tokens, traj.loss_mask, strict=True):
    started = started or m == 1
    if started and m == mask:
      seg.append(t)
    elif seg:
      out.append(tok.decode(seg))
      seg = []
  if seg:
    out.append(tok.decode(seg))
  return out


def _observations(traj, tok) -> list[str]:
  """The decoded observations (no-loss segments after the first reply)."""
  return _segments(traj, tok, 0)


def _between(text: str, start: str, end: str) -> str:
  return text[text.index(start) + len(start) : text.rindex(end)]


TERMINUS = EpisodeConfig(harness="terminus", family="qwen3")


def _complete(commands=()):
  return T.action_text(list(commands), True, plan="Done.")


# --- replies and prompt (no sandbox) -----------------------------------------------------------


def test_scripted_replies_are_canonical_terminus_json(tok):
  script = "cd /workspace\nprintf 'a\\tb\\n' > x.txt\ncat <<'EOF' > y\n!$ $HOME\nEOF\n"
  policy = scripted.ScriptedPolicy(tok, [script], TERMINUS)
  out = policy([1, 2, 3], 10_000)
  assert out.token_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
  assert out.finish_reason == "stop" and len(out.logprobs) == len(out.token_ids)
  action = formats.parse_terminus(tok.decode(out.token_ids[:-1]))
  assert not action.task_complete and not action.warnings and len(action.commands) == 1
  keys = action.commands[0].keystrokes
  assert keys.endswith("\n") and "\t" not in keys and "!" not in keys
  b64 = re.search(r"echo (\S+) \| base64 -d", keys).group(1)
  assert base64.b64decode(b64).decode() == script  # the script survives typing verbatim
  # The done mark is printed by printf, so the typed line itself never contains it.
  assert f"{T.DONE_MARK}_0" not in keys
  # Not done yet -> it waits (an empty keystroke) instead of moving on or completing.
  wait = formats.parse_terminus(tok.decode(policy([1, 2, 3] * 40, 10_000).token_ids[:-1]))
  assert wait.commands[0].keystrokes == "" and not wait.task_complete


def test_length_cut_reply(tok):
  out = scripted.Replies(tok, [_complete()])([1], 5)
  assert len(out.token_ids) == 5 and out.finish_reason == "length"


def test_prompt_is_one_user_turn(tok):
  ids = T.initial_prompt_ids(tok, "Do the thing.", "bash-5.2#", TERMINUS)
  text = tok.decode(ids)
  assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
  assert "Do the thing." in text and "bash-5.2#" in text and '"task_complete"' in text
  assert text.count("<|im_start|>") == 2


def test_limits_come_from_the_episode_config():
  # The pane settings hold no episode limit of their own: EpisodeConfig's are the only ones.
  import dataclasses

  pane = {f.name for f in dataclasses.fields(T.TerminusConfig)}
  limits = {f.name for f in dataclasses.fields(EpisodeConfig)}
  assert not pane & limits and "width" in pane and "max_tool_calls" in limits
  from tmax_jax.agents import harnesses

  harness = harnesses.get("terminus")
  assert isinstance(harness, T.TerminusHarness) and harness.pane.width == 160


# --- live: tmux pane in a real sandbox ----------------------------------------------------------


def test_oracle_solves_procedural_task(tok):
  _require_tmux_sandbox()
  from tmax_jax.tasks.procedural import registry
  from tmax_jax.tasks.runner import RunnerConfig, run_trial

  task = registry.build_task("csv_aggregate", 0, 0)
  policy, box = scripted.oracle_policy(tok, task, TERMINUS, wait_s=0.3), {}

  def agent(sb):
    box["ep"] = T.run_terminus_episode(sb, task.instruction, policy, tok, TERMINUS)

  result = run_trial(task, agent, RunnerConfig(memory_mb=2048))
  ep = box["ep"]
  assert result.reason == "ok" and result.reward == 1.0
  assert ep.status == "submitted" and ep.num_format_errors == 0 and ep.num_tool_calls >= 1
  # Generated tokens (loss 1) are exactly the policy's replies, each ending in <|im_end|>.
  traj = ep.trajectory
  eos = tok.convert_tokens_to_ids("<|im_end|>")
  gen = [t for t, m in zip(traj.tokens, traj.loss_mask, strict=True) if m]
  assert gen.count(eos) == ep.num_turns and gen[-1] == eos
  obs = _observations(traj, tok)
  assert f"{T.DONE_MARK}_0" in "".join(obs)  # the pane output reached the model
  assert "Are you sure" in obs[-1]  # the first task_complete was answered with a confirmation
  # No drift: up to the last observation, the appended ids equal tokenising the chat template's
  # rendering of the whole conversation.
  prompt = tok.decode(traj.tokens[: traj.loss_mask.index(1)])
  messages = [{"role": "user", "content": _between(prompt, "<|im_start|>user\n", "<|im_end|>")}]
  replies = _segments(traj, tok, 1)
  for reply, ob in zip(replies, obs, strict=False):  # the last reply has no observation after it
    messages.append({"role": "assistant", "content": reply.removesuffix("<|im_end|>")})
    messages.append({"role": "user", "content": _between(ob, "<|im_start|>user\n", "<|im_end|>")})
  rendered = formats.prompt_ids(tok, messages)
  end = len(traj.tokens) - len(tok.encode(replies[-1]))
  assert rendered == traj.tokens[:end]


def test_task_complete_must_be_sent_twice_in_a_row(tok, sandbox):
  replies = [
    _complete([("echo one > /workspace/a.txt\n", 0.3)]),
    T.action_text([("echo two >> /workspace/a.txt\n", 0.3)]),
    _complete(),
    _complete([("echo three >> /workspace/a.txt\n", 0.3)]),
    T.action_text([("echo never >> /workspace/a.txt\n", 0.3)]),
  ]
  ep = T.run_terminus_episode(sandbox, "Write a.txt.", scripted.Replies(tok, replies), tok)
  assert ep.status == "submitted" and ep.num_turns == 4 and ep.num_tool_calls == 3
  obs = _observations(ep.trajectory, tok)
  assert len(obs) == 3
  assert "Are you sure" in obs[0] and "Are you sure" not in obs[1] and "Are you sure" in obs[2]
  # The confirming reply's commands still run, as in Terminus-2; nothing after it does.
  assert sandbox.run("cat /workspace/a.txt").output.split() == ["one", "two", "three"]


def test_parse_errors_are_fed_back(tok, sandbox):
  replies = [
    "I will just list the files.",
    '{"analysis": "x", "plan": "y"}',
    T.action_text([("echo hi > /workspace/h.txt\n", 0.3)]) + "\ntrailing words",
    _complete(),
    _complete(),
  ]
  ep = T.run_terminus_episode(sandbox, "Say hi.", scripted.Replies(tok, replies), tok)
  assert ep.status == "submitted" and ep.num_format_errors == 2 and ep.num_turns == 5
  obs = _observations(ep.trajectory, tok)
  assert "no JSON object found" in obs[0] and "Previous response had parsing errors" in obs[0]
  assert "missing required fields: commands" in obs[1]
  assert "extra text after the JSON object" in obs[2] and "echo hi" in obs[2]
  assert sandbox.run("cat /workspace/h.txt").output.strip() == "hi"


def test_parse_error_resets_pending_completion(tok, sandbox):
  replies = [_complete(), "oops", _complete(), _complete()]
  ep = T.run_terminus_episode(sandbox, "Nothing.", scripted.Replies(tok, replies), tok)
  assert ep.status == "submitted" and ep.num_turns == 4 and ep.num_format_errors == 1


def test_named_keys_new_output_and_byte_cap(tok, sandbox):
  replies = [
    T.action_text([("sleep 30\n", 0.3), ("C-c", 0.3), ("echo after-$((6*7))\n", 0.3)]),
    T.action_text([("seq 1 30000\n", 2.0)]),
    T.action_text([("clear\n", 0.3)]),
    T.action_text([("exit\n", 0.3)]),
    T.action_text([("echo alive\n", 0.3)]),
    T.action_text([("echo " + "ab" * 15_000 + " | wc -c\n", 1.0)]),
    _complete(),
    _complete(),
  ]
  ep = T.run_terminus_episode(sandbox, "Play.", scripted.Replies(tok, replies), tok)
  assert ep.status == "submitted", ep.status
  obs = _observations(ep.trajectory, tok)
  # C-c is a key: the sleep is interrupted and the next command runs at once.
  assert "New Terminal Output:" in obs[0] and "^C" in obs[0] and "after-42" in obs[0]
  assert "command 2 should end with a newline" in obs[0]  # the parser's warning is passed on
  # 30000 lines of seq (~169 KB) -> head + tail within the 10 KB cap.
  assert "output limited to 10000 bytes" in obs[1]
  assert "\n1\n" in obs[1] and "30000" in obs[1] and len(obs[1].encode()) < 10_500
  assert "after-42" not in obs[1]  # only the new output is shown
  assert "Current Terminal Screen:" in obs[2]  # history rewritten -> the screen
  assert "terminal session ended" in obs[3]  # `exit` closed the pane; a new one is started
  assert "alive" in obs[4]
  assert "\n30001\n" in obs[5]  # 30 KB of keystrokes arrive whole (sent in literal chunks)


def test_unclosed_reasoning_is_not_an_action(sandbox):
  tok35 = load_tokenizer("qwen3_5")  # thinking on: the generation prompt pre-fills "<think>\n"
  replies = [
    "I could reply " + _complete() + " but I keep thinking",
    "Done thinking.\n</think>\n\n" + _complete(),
    "Sure.\n</think>\n\n" + _complete(),
  ]
  ep = T.run_terminus_episode(sandbox, "Nothing.", scripted.Replies(tok35, replies), tok35)
  assert ep.status == "submitted" and ep.num_turns == 3 and ep.num_format_errors == 1
  assert "no JSON object found" in _observations(ep.trajectory, tok35)[0]


def test_tool_call_limit(tok, sandbox):
  cfg = EpisodeConfig(harness="terminus", family="qwen3", max_tool_calls=2)
  reply = T.action_text([("echo x >> /workspace/n.txt\n", 0.2)] * 3)
  ep = T.run_terminus_episode(sandbox, "Loop.", scripted.Replies(tok, [reply]), tok, cfg)
  assert ep.status == "max_tool_calls" and ep.num_tool_calls == 2 and ep.num_turns == 1
  assert sandbox.run("wc -l < /workspace/n.txt").output.strip() == "2"


def test_reply_json_is_what_the_model_sees(tok):
  # The canonical reply round-trips through the tokenizer unchanged.
  text = T.action_text([("ls -la\n", 0.1), ("C-c", 1.0)])
  ids = formats.tokens.encode(tok, text)
  assert tok.decode(ids) == text
  assert json.loads(text)["commands"][1] == {"keystrokes": "C-c", "duration": 1.0}
