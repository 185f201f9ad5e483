"""Harness formats: reply parsing, format errors, observations, drift-free token continuation."""

import json

import numpy as np
import pytest

from tmax_jax import formats as F
from tmax_jax.tokenizers import load_tokenizer

HERMES = '<tool_call>\n{{"name": "bash", "arguments": {args}}}\n</tool_call>'
XML = (
  "<tool_call>\n<function=bash>\n<parameter=command>\n{cmd}\n</parameter>\n</function>\n"
  "</tool_call>"
)


def hermes(cmd):
  return HERMES.format(args=json.dumps({"command": cmd}))


# --- native bash tool: Hermes JSON (Qwen3) ---------------------------------------------------


@pytest.mark.parametrize("cmd", ["ls -la", 'echo "a\\tb" | tr -d x', "cat <<'EOF' > f\nx\nEOF"])
def test_hermes_round_trip(cmd):
  text = "<think>\nplan it\n</think>\n\nTHOUGHT: go.\n" + hermes(cmd) + "<|im_end|>"
  assert F.parse_hermes_call(text) == cmd
  assert F.parse_bash_call(text, "qwen3") == cmd


def test_hermes_accepts_string_arguments():
  text = '<tool_call>\n{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}\n</tool_call>'
  assert F.parse_hermes_call(text) == "pwd"


@pytest.mark.parametrize(
  "text,reason",
  [
    ("I think I am done.", "no tool call found"),
    (hermes("ls") + "\n" + hermes("pwd"), "found 2 tool calls"),
    (hermes("ls") + "\n<tool_call>\n{", "found 2 tool calls"),
    ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}', "not closed"),
    ("<tool_call>\n{name: bash}\n</tool_call>", "not valid JSON"),
    (
      '<tool_call>\n{"name": "python", "arguments": {"command": "1"}}\n</tool_call>',
      "unknown tool 'python'",
    ),
    (
      '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>',
      "exactly one argument `command`",
    ),
    (
      '<tool_call>\n{"name": "bash", "arguments": {"command": 3}}\n</tool_call>',
      "must be a string",
    ),
    ('<tool_call>\n{"name": "bash", "arguments": {"command": "  "}}\n</tool_call>', "empty"),
    # A call written inside the reasoning is not a call.
    ("<think>\n" + hermes("ls") + "\n</think>\n\nnothing", "no tool call found"),
    ("<think>\nstill thinking " + hermes("ls"), "no tool call found"),
  ],
)
def test_hermes_format_errors(text, reason):
  with pytest.raises(F.FormatError, match=reason) as err:
    F.parse_hermes_call(text)
  assert err.value.feedback.startswith("Format error: ")
  assert '{"name": "bash", "arguments": {"command": "ls -la"}}' in err.value.feedback
  assert F.SUBMIT_COMMAND in err.value.feedback


# --- native bash tool: XML (Qwen3.5) ------------------------------------------------------------


@pytest.mark.parametrize("cmd", ["ls -la", "printf '%s\\n' a b", "cat <<'EOF'\n  indented\n\nEOF"])
def test_xml_round_trip(cmd):
  text = "reasoning\n</think>\n\nLet me look.\n\n" + XML.format(cmd=cmd) + "<|im_end|>"
  assert F.parse_xml_call(text) == cmd
  assert F.parse_bash_call(text, "qwen3_5") == cmd


@pytest.mark.parametrize(
  "text,reason",
  [
    ("done", "no tool call found"),
    (XML.format(cmd="ls") + "\n" + XML.format(cmd="pwd"), "found 2 tool calls"),
    (
      "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>",
      "one <function=NAME>",
    ),
    (XML.format(cmd="ls").replace("function=bash", "function=shell"), "unknown tool 'shell'"),
    (
      XML.format(cmd="ls").replace("parameter=command", "parameter=cmd"),
      "exactly one argument `command`",
    ),
    ("<tool_call>\n<function=bash>\nls\n</function>\n</tool_call>", "text outside"),
    (
      "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n<parameter=command>\n"
      "pwd\n</parameter>\n</function>\n</tool_call>",
      "given twice",
    ),
    # Qwen3.5 pre-fills "<think>\n": a completion that never closes it has no action yet.
    ("<think>\n" + "still thinking " + XML.format(cmd="ls"), "no tool call found"),
  ],
)
def test_xml_format_errors(text, reason):
  with pytest.raises(F.FormatError, match=reason) as err:
    F.parse_xml_call(text)
  assert "<function=bash>\n<parameter=command>\nls -la\n</parameter>" in err.value.feedback


def test_unknown_family_for_tool_calls():
  with pytest.raises(ValueError, match="no tool-call format for family 'llama'"):
    F.parse_bash_call(hermes("ls"), "llama")


def test_bash_tool_schema():
  fn = F.BASH_TOOL["function"]
  assert fn["name"] == "bash" and fn["parameters"]["required"] == ["command"]
  assert list(fn["parameters"]["properties"]) == ["command"]


# --- mini-SWE-agent text mode ------------------------------------------------------------------


def test_fenced_bash():
  assert F.parse_fenced_bash("THOUGHT: look\n\n```bash\nls -la\ncd /x\n```\n") == "ls -la\ncd /x"
  for bad, reason in [
    ("THOUGHT: nothing", "found 0 bash blocks"),
    ("```bash\nls\n```\n```bash\npwd\n```", "found 2 bash blocks"),
    ("```python\nprint(1)\n```", "not a closed ```bash block"),
    ("```bash\n\n```", "empty bash block"),
  ]:
    with pytest.raises(F.FormatError, match=reason) as err:
      F.parse_fenced_bash(bad)
    assert "```bash" in err.value.feedback


# --- Endless Terminals -------------------------------------------------------------------------


def test_endless():
  assert F.parse_endless("<think>hm</think>\n<command>ls /</command>") == F.EndlessAction(
    "ls /", False
  )
  assert F.parse_endless("<think>ok</think><action>done</action>") == F.EndlessAction(None, True)
  for bad, reason in [
    ("<command>a</command><command>b</command>", "found 2 <command>"),
    ("<command>a</command><action>done</action>", "exactly one"),
    ("<action>quit</action>", "unknown action 'quit'"),
    ("<think><command>ls</command></think>", "found 0 <command>"),
    ("<command> </command>", "empty"),
  ]:
    with pytest.raises(F.FormatError, match=reason):
      F.parse_endless(bad)


# --- Terminus-2 JSON ---------------------------------------------------------------------------


def test_terminus_defaults_cap_and_warnings():
  reply = (
    'Sure! {"analysis": "empty dir", "plan": "make files", "commands": ['
    '{"keystrokes": "touch a", "duration": 0.5}, {"keystrokes": "sleep 100\\n", '
    '"duration": 500}, {"keystrokes": "C-c"}]}'
  )
  act = F.parse_terminus(reply)
  assert act.analysis == "empty dir" and act.task_complete is False
  assert [c.keystrokes for c in act.commands] == ["touch a", "sleep 100\n", "C-c"]
  assert [c.duration for c in act.commands] == [0.5, 60.0, 1.0]
  text = act.warning_text()
  assert "extra text before" in text and "capped at 60" in text
  assert "command 1 should end with a newline" in text and "command 3: missing" in text


def test_terminus_braces_inside_strings_and_completion():
  reply = (
    '<think>{not json}</think>{"analysis": "a } b", "plan": "p {", "commands": [], '
    '"task_complete": "true"}'
  )
  act = F.parse_terminus(reply)
  assert act.analysis == "a } b" and act.plan == "p {" and act.task_complete is True
  assert act.commands == () and act.warning_text() == ""


@pytest.mark.parametrize(
  "reply,reason",
  [
    ("no json here", "no JSON object found"),
    ('{"analysis": "a", "plan": "b"}', "missing required fields: commands"),
    ('{"analysis": "a", "plan": "b", "commands": "ls"}', "must be an array"),
    ('{"analysis": "a", "plan": "b", "commands": [{"duration": 1}]}', "'keystrokes'"),
    ('{"analysis": "a", "plan": "b", "commands": [], }', "invalid JSON"),
  ],
)
def test_terminus_errors(reply, reason):
  with pytest.raises(F.FormatError, match=reason) as err:
    F.parse_terminus(reply)
  assert err.value.feedback.startswith("Previous response had parsing errors:\nERROR: ")


def test_terminus_bad_command_only_warns_when_complete():
  act = F.parse_terminus('{"analysis": "", "plan": "", "commands": [3], "task_complete": true}')
  assert act.task_complete and act.commands == () and "must be an object" in act.warning_text()


# --- observations and submission ---------------------------------------------------------------


def test_observation_truncation_and_exit_code():
  assert F.format_observation("hello\n", 0) == "hello\n(exit_code=0)"
  assert F.format_observation("", 2) == "(exit_code=2)"
  long = "".join(chr(97 + i % 26) for i in range(23456))
  obs = F.format_observation(long, 1)
  assert obs.startswith(long[:5000] + "\n\n[... output truncated: 13456 characters elided")
  assert obs.endswith(long[-5000:] + "\n(exit_code=1)")
  assert F.truncate_head_tail("x" * 10000) == "x" * 10000  # exactly at the limit: untouched
  assert "timed out after 120 s" in F.format_timeout("partial", 120)
  assert F.format_endless_observation("ok", 0) == (
    "Command executed successfully. Output: ok\n\n(exit_code=0)"
  )


def test_terminus_byte_cap():
  text = "é" * 8000  # 16,000 bytes
  out = F.limit_output_bytes(text)
  assert out.startswith("é" * 2500) and out.endswith("é" * 2500)
  assert "6000 interior bytes omitted" in out
  assert F.limit_output_bytes("short") == "short"


def test_submit_sentinel():
  assert F.is_submit_command("  echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n")
  assert not F.is_submit_command("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && rm -rf /x")
  assert F.is_submit_output("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n")
  assert not F.is_submit_output("done\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")


# --- token-in/token-out ------------------------------------------------------------------------

SYSTEM = "You are a terminal agent."
USER = "Create hello.txt containing hi."
TURNS = [  # (reasoning, thought, command, output, exit code)
  ("The directory may not exist.", "Check first.", "ls -la /work", "total 0\n", 0),
  ("Write it with a heredoc.", "Writing.", "cat <<'EOF' > /work/hello.txt\nhi \"x\"\nEOF", "", 0),
]


def _qwen3_completion(reasoning, thought, cmd):
  return f"<think>\n{reasoning}\n</think>\n\n{thought}\n{hermes(cmd)}<|im_end|>"


def _qwen3_5_completion(reasoning, thought, cmd):
  # The Qwen3.5 generation prompt already holds "<think>\n".
  return f"{reasoning}\n</think>\n\n{thought}\n\n{XML.format(cmd=cmd)}<|im_end|>"


COMPLETIONS = {"qwen3": _qwen3_completion, "qwen3_5": _qwen3_5_completion}


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_token_continuation_has_no_drift(family):
  tok = load_tokenizer(family)
  messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
  traj = F.TokenTrajectory(eos_id=tok.eos_token_id)
  traj.add_prompt(F.prompt_ids(tok, messages, tools=[F.BASH_TOOL]))
  for version, (reasoning, thought, cmd, out, code) in enumerate(TURNS):
    completion = COMPLETIONS[family](reasoning, thought, cmd)
    gen = tok.encode(completion, add_special_tokens=False)
    assert F.parse_bash_call(completion, family) == cmd
    traj.add_generated(gen, logprobs=[-0.5] * len(gen), version=version)
    obs = F.format_observation(out, code)
    traj.add_observation(F.tool_observation_ids(tok, obs))
    messages += [F.bash_call_message(cmd, thought, reasoning), {"role": "tool", "content": obs}]
  full = tok.apply_chat_template(
    messages, tools=[F.BASH_TOOL], tokenize=False, add_generation_prompt=True
  )
  assert traj.tokens == tok.encode(full, add_special_tokens=False)
  assert tok.decode(traj.tokens) == full

  arr = traj.as_arrays()
  gen_positions = np.flatnonzero(arr["loss_mask"])
  # Only the two completions carry loss; each ends with <|im_end|> and the next token is "\n".
  assert traj.num_generated == sum(len(tok.encode(COMPLETIONS[family](*t[:3]))) for t in TURNS)
  ends = [i for i in gen_positions if i + 1 not in set(gen_positions)]
  assert [arr["tokens"][i] for i in ends] == [tok.eos_token_id] * 2
  assert all(tok.decode(arr["tokens"][i + 1 : i + 2]) == "\n" for i in ends)
  assert set(arr["versions"][arr["loss_mask"] == 1]) == {0, 1}
  assert np.all(arr["versions"][arr["loss_mask"] == 0] == -1)
  assert np.all(arr["logprobs"][arr["loss_mask"] == 0] == 0.0)
  observation_text = tok.decode(arr["tokens"][arr["loss_mask"] == 0])
  assert "<tool_response>\ntotal 0\n(exit_code=0)\n</tool_response>" in observation_text


def test_user_observations_and_truncated_turns():
  tok = load_tokenizer("qwen3_5")
  text = F.continuation_text(tok, [{"role": "user", "content": "  out\n(exit_code=0)  "}])
  # Qwen3.5 trims message content; the next assistant turn opens with the think pre-fill.
  assert (
    text == "\n<|im_start|>user\nout\n(exit_code=0)<|im_end|>\n<|im_start|>assistant\n<think>\n"
  )
  text = F.continuation_text(
    load_tokenizer("qwen3"), [{"role": "tool", "content": "x"}], enable_thinking=False
  )
  assert text == (
    "\n<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
  )
  traj = F.TokenTrajectory(eos_id=tok.eos_token_id)
  traj.add_prompt([1, 2])
  traj.add_generated([5, 6], [-1.0, -2.0], version=3)  # hit the token limit: no <|im_end|>
  traj.add_observation([198, 7])
  assert traj.tokens == [1, 2, 5, 6, tok.eos_token_id, 198, 7]
  assert traj.loss_mask == [0, 0, 1, 1, 0, 0, 0]
  with pytest.raises(ValueError, match="2 generated ids but 1 logprobs"):
    traj.add_generated([1, 2], [0.0], version=0)


def test_token_trajectory_topk_fields_stay_aligned():
  traj = F.TokenTrajectory(eos_id=9)
  traj.add_prompt([1, 2])
  traj.add_generated(
    [3, 9],
    [-0.1, -0.2],
    version=0,
    topk_ids=[[3, 4], [9, 5]],
    topk_logprobs=[[-0.1, -2.5], [-0.2, -3.0]],
  )
  traj.add_observation([6])
  traj.add_generated([7], [-0.3], version=1)  # a server that returned no top-K
  assert traj.topk_ids == [[], [], [3, 4], [9, 5], [], []]
  assert traj.topk_logprobs == [[], [], [-0.1, -2.5], [-0.2, -3.0], [], []]
  with pytest.raises(ValueError, match="topk_ids and topk_logprobs rows of equal K"):
    traj.add_generated([1, 2], [-0.1, -0.1], version=0, topk_ids=[[1], [2]], topk_logprobs=[[-0.1]])
