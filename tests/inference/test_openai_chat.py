"""openai_chat.py without a server: request checks, the reply split, tool-call parsing (both
formats), stop strings and the streaming hold-back (deltas add up to the final message)."""

import json

import pytest

from tmax_jax import tokenizers
from tmax_jax.inference import openai_chat as oc

TOOL = {
  "type": "function",
  "function": {
    "name": "run",
    "parameters": {
      "type": "object",
      "properties": {
        "cmd": {"type": "string"},
        "n": {"type": "integer"},
        "opts": {"type": "object"},
      },
    },
  },
}


@pytest.fixture(scope="module")
def tok():
  return tokenizers.load_tokenizer("qwen3")


def test_xml_calls_are_typed_by_the_schema_and_bad_calls_stay_content():
  text = (
    "Plan.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n</parameter>\n"
    '<parameter=n>\n3\n</parameter>\n<parameter=opts>\n{"a": [1]}\n</parameter>\n'
    "</function>\n</tool_call>"
  )
  content, calls = oc.parse_calls(text, "xml", [TOOL])
  assert content == "Plan."
  assert [json.loads(c["function"]["arguments"]) for c in calls] == [
    {"cmd": "ls -la", "n": 3, "opts": {"a": [1]}}
  ]
  hermes = '<tool_call>\n{"name": "run", "arguments": {"cmd": "pwd"}}\n</tool_call>\n' * 2
  _, calls = oc.parse_calls(hermes, "hermes", [TOOL])
  assert [c["function"]["name"] for c in calls] == ["run", "run"]
  assert len({c["id"] for c in calls}) == 2
  broken = '<tool_call>\n{"name": "run", "arguments": \n'  # cut by max_tokens
  assert oc.parse_calls(broken, "hermes", [TOOL]) == (broken, [])


def test_reply_split_with_and_without_a_prefilled_think():
  assert oc.split_reply("Let me see\n</think>\n\nAnswer", True) == ("Let me see\n", "Answer")
  assert oc.split_reply("still thinking", True) == ("still thinking", "")
  assert oc.split_reply("<think>\nhm</think>\n\nok", False) == ("hm", "ok")
  assert oc.split_reply("plain", False) == (None, "plain")


def _feed(tok, req, text, fmt="hermes"):
  """Streams `text` token by token through a Choice; -> (choice, concatenated deltas)."""
  choice, ids = oc.Choice(0, req, tok, fmt), tok.encode(text, add_special_tokens=False)
  got = {"content": "", "reasoning_content": ""}
  calls = []
  for i, t in enumerate(ids):
    done = choice.add(t, -0.5, "length" if i == len(ids) - 1 else "")
    delta, _ = choice.chat_delta(final=done)
    for k in got:
      got[k] += delta.get(k, "")
    calls += delta.get("tool_calls", [])
    if done:
      break
  return choice, got, calls


def test_streamed_deltas_add_up_to_the_message(tok):
  req = oc.GenRequest(
    prompt_ids=(1,),
    max_tokens=99,
    stop=("STOP",),
    think_prefilled=True,
    parse_tools=True,
    tools=(TOOL,),
  )
  text = (
    'Hmm, über 😀 ok</think>\n\nSure<tool_call>\n{"name": "run", "arguments": {"n": 2}}\n'
    "</tool_call>"
  )
  choice, got, calls = _feed(tok, req, text)
  msg = choice.message()
  assert got["reasoning_content"] == msg["reasoning_content"] == "Hmm, über 😀 ok"
  assert got["content"] == msg["content"] == "Sure"
  assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"n": 2}]
  assert choice.finish_reason() == "tool_calls"
  req = oc.GenRequest(prompt_ids=(1,), max_tokens=99, stop=(" STOP",))
  choice, got, _ = _feed(tok, req, "one two STOP three")
  assert got["content"] == choice.message()["content"] == "one two"
  assert choice.finish == "stop" and len(choice.tokens) == 2  # tokens from the cut on dropped


def test_request_checks_name_the_parameter(tok):
  base = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
  for extra, param in (
    ({"n": 0}, "n"),
    ({"stop": ["a"] * 5}, "stop"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": "9"}, "max_tokens"),
    ({"logit_bias": {"1": 2}}, "logit_bias"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    (
      {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
      "messages[0].content[0]",
    ),
  ):
    with pytest.raises(oc.APIError) as err:
      oc.chat_request({**base, **extra}, tok, max_len=512, max_topk=4)
    assert err.value.status == 400 and err.value.param == param, extra
  req = oc.chat_request(
    {**base, "seed": 5, "n": 2, "logprobs": True, "top_logprobs": 4, "stop": "x"},
    tok,
    max_len=512,
    max_topk=4,
  )
  assert req.top_logprobs == 4 and req.stop == ("x",)
  assert req.max_tokens == 512 - len(req.prompt_ids)
  assert req.sampling_params(1).seed == 6 and req.sampling_params(0).temperature == 1.0
  with pytest.raises(oc.APIError, match="top_logprobs: must be in"):
    oc.chat_request({**base, "logprobs": True, "top_logprobs": 5}, tok, max_len=512, max_topk=4)
