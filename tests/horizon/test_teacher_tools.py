"""ChatTeacher with native tool calls (evaluation's policy=endpoint): the harness's conversation
sent as OpenAI messages with `tool_calls` / `tool` turns renders, under the same chat template,
to the prompt the harness built; the reply's `tool_calls` come back in the family's tool-call
syntax; every reply's usage is added up. No server: a recording client."""

import json

import pytest

from tmax_jax import formats
from tmax_jax.agents import harnesses
from tmax_jax.agents.episode import EpisodeConfig
from tmax_jax.agents.shell import SYSTEM_PROMPT
from tmax_jax.horizon import teacher
from tmax_jax.inference import openai_chat
from tmax_jax.tasks.generator.llm import ChatReply
from tmax_jax.tokenizers import load_tokenizer

FAMILIES = ("qwen3", "qwen3_5")


@pytest.fixture(scope="module", params=FAMILIES)
def fam(request):
  return request.param, load_tokenizer(request.param)


def _spec(family: str) -> teacher.ToolSpec:
  return teacher.ToolSpec((formats.BASH_TOOL,), formats.tool_call_format(family))


def _two_calls() -> dict:
  msg = formats.bash_call_message("ls")
  msg["tool_calls"] += formats.bash_call_message("pwd")["tool_calls"]
  return msg


def _conversation() -> list[dict]:
  """A bash-tool episode as structured messages: a call, a malformed reply answered by the
  format error as a user turn, two calls in one turn, then the last result."""
  return [
    {"role": "system", "content": SYSTEM_PROMPT.format(submit=formats.SUBMIT_COMMAND)},
    {"role": "user", "content": "Count the lines of /app/a.txt."},
    formats.bash_call_message("wc -l /app/a.txt", content="Let me look."),
    {"role": "tool", "content": "3 /app/a.txt\n(exit_code=0)"},
    {"role": "assistant", "content": "I run <tool_call>not closed"},
    {"role": "user", "content": "Format error: the tool call is not closed"},
    _two_calls(),
    {"role": "tool", "content": "a.txt\n(exit_code=0)"},
    {"role": "tool", "content": "/app\n(exit_code=0)"},
  ]


def test_native_messages_render_the_same_prompt(fam):
  family, tok = fam
  rendered = tok.apply_chat_template(
    _conversation(), tools=[formats.BASH_TOOL], tokenize=False, add_generation_prompt=True
  )
  messages, _ = teacher.chat_messages(rendered)
  sent = teacher.tool_messages(messages, tok, _spec(family))
  assert [m["role"] for m in sent] == [
    *("system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "tool")
  ]
  assert "<tools>" not in sent[0]["content"] and sent[0]["content"].startswith("You are an expert")
  (call,) = sent[2]["tool_calls"]
  assert json.loads(call["function"]["arguments"]) == {"command": "wc -l /app/a.txt"}
  assert sent[3] == {
    "role": "tool",
    "tool_call_id": call["id"],
    "content": "3 /app/a.txt\n(exit_code=0)",
  }
  assert "tool_calls" not in sent[4] and "<tool_call>not closed" in sent[4]["content"]
  assert [c["id"] for c in sent[6]["tool_calls"]] == [
    sent[7]["tool_call_id"],
    sent[8]["tool_call_id"],
  ]
  # An endpoint rendering with this template (ours: openai_chat) sees exactly the same prompt.
  req = openai_chat.chat_request(
    {"messages": sent, "tools": [formats.BASH_TOOL]}, tok, max_len=1 << 20, max_topk=0
  )
  assert tok.decode(list(req.prompt_ids), skip_special_tokens=False) == rendered


class Recorder:
  """A ChatClient stand-in: records each request, answers with the next scripted reply."""

  def __init__(self, *replies: ChatReply):
    self.replies, self.requests = list(replies), []

  def chat(self, messages, max_tokens=None, seed=None, tools=()):
    self.requests.append(dict(messages=messages, max_tokens=max_tokens, seed=seed, tools=tools))
    return self.replies.pop(0)


def test_teacher_sends_tools_and_writes_their_calls_back(fam):
  family, tok = fam
  cfg = EpisodeConfig(family=family)
  harness = harnesses.get("bash_tool")
  ids = harness.initial_prompt_ids(tok, "Say hi.", cfg)
  client = Recorder(
    ChatReply(None, (("bash", '{"command": "echo hi"}'),), "I should greet.", 120, 9),
    ChatReply("done, no call", (), None, 150, 4),
    ChatReply(None, (("bash", "{not json"),), None, 0, 0),
  )
  t = teacher.ChatTeacher(client, tok, seed=7, tools=_spec(family))
  out = t(ids, 256)
  req = client.requests[0]
  assert req["tools"] == (formats.BASH_TOOL,) and req["seed"] == 7 and req["max_tokens"] == 256
  assert [m["role"] for m in req["messages"]] == ["system", "user"]
  text = tok.decode(out.token_ids, skip_special_tokens=False)
  assert text.endswith(tok.eos_token) and out.finish_reason == "stop"
  assert formats.parse_bash_call(text, family) == "echo hi"  # the harness reads the call
  assert "I should greet." in text  # the endpoint's reasoning kept, in the template's place
  assert set(out.logprobs) == {0.0} and set(out.versions) == {-1}
  assert formats.parse_bash_call(harness.submit_text(tok, cfg), family) == formats.SUBMIT_COMMAND

  plain = tok.decode(t(ids, 256).token_ids, skip_special_tokens=False)
  assert formats.strip_reasoning(plain).strip().startswith("done, no call")
  with pytest.raises(formats.FormatError):  # no call: the harness answers with its feedback
    formats.parse_bash_call(plain, family)
  bad = tok.decode(t(ids, 256).token_ids, skip_special_tokens=False)
  with pytest.raises(formats.FormatError):  # arguments that are not JSON: a format error too
    formats.parse_bash_call(bad, family)
  assert (t.usage.requests, t.usage.prompt_tokens, t.usage.completion_tokens) == (3, 270, 13)
  assert t.calls == 3


def test_text_mode_is_unchanged(fam):
  """Without tools (the pipeline's calibration) the conversation goes as text, no `tools`."""
  family, tok = fam
  ids = harnesses.get("bash_tool").initial_prompt_ids(tok, "x", EpisodeConfig(family=family))
  client = Recorder(ChatReply("hello", (), None, 5, 1))
  t = teacher.ChatTeacher(client, tok)
  t(ids, 64)
  (req,) = client.requests
  assert req["tools"] == () and "<tools>" in req["messages"][0]["content"]
  assert t.usage.requests == 1 and t.usage.prompt_tokens == 5


def test_endpoint_policy_hands_over_each_episodes_usage(fam):
  family, tok = fam

  class Task:
    name = "t"

  client = Recorder(ChatReply("a", (), None, 10, 2))
  policy = teacher.EndpointPolicy(client, tok, seed=3, track_usage=True)
  gen = policy.generate_fn(Task, 0, 1)
  gen(harnesses.get("mini_swe").initial_prompt_ids(tok, "x", EpisodeConfig(family=family)), 32)
  assert policy.usage("t", 0, 1) == teacher.Usage(1, 10, 2)
  assert policy.usage("t", 0, 1) == teacher.Usage()  # handed over once
  assert policy.usage("t", 0, 5) == teacher.Usage()  # no episode ran
  with pytest.raises(ValueError, match="keeps no usage"):
    teacher.EndpointPolicy(client, tok).usage("t", 0, 1)
