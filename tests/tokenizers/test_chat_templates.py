"""The chat templates render a tool-use conversation exactly as the official Qwen templates do.

Expected strings are written out by hand from the templates' documented formats: Hermes JSON tool
calls for Qwen3, the XML `<function=...><parameter=...>` format for Qwen3.5, tool results as a user
turn wrapped in <tool_response>, and each family's <think> handling.
"""

import json

import pytest

BASH_TOOL = {
  "type": "function",
  "function": {
    "name": "bash",
    "description": "Run a command in a persistent bash shell.",
    "parameters": {
      "type": "object",
      "properties": {"command": {"type": "string", "description": "The command to run."}},
      "required": ["command"],
    },
  },
}
SYSTEM = "You are a terminal agent."
USER = "List the files in /tmp."
REASONING = "I should run ls."
THOUGHT = "I will list the directory."
COMMAND = "ls -la /tmp"
OUTPUT = "total 0\n(exit_code=0)"


def _conversation(with_reasoning=True):
  assistant = {
    "role": "assistant",
    "content": THOUGHT,
    "tool_calls": [
      {"type": "function", "function": {"name": "bash", "arguments": {"command": COMMAND}}}
    ],
  }
  if with_reasoning:
    assistant["reasoning_content"] = REASONING
  return [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": USER},
    assistant,
    {"role": "tool", "content": OUTPUT},
  ]


def _render(tok, messages, **kw):
  return tok.apply_chat_template(messages, tools=[BASH_TOOL], tokenize=False, **kw)


# Hand-written pieces of the Qwen3 format.
QWEN3_SYSTEM = (
  "<|im_start|>system\n" + SYSTEM + "\n\n# Tools\n\nYou may call one or more functions to assist "
  "with the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
  "tags:\n<tools>\n" + json.dumps(BASH_TOOL) + "\n</tools>\n\nFor each function call, return a "
  "json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
  '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  "<|im_end|>\n"
)
QWEN3_CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la /tmp"}}\n</tool_call>'
QWEN3_TOOL_TURN = (
  "<|im_start|>user\n<tool_response>\ntotal 0\n(exit_code=0)\n</tool_response><|im_end|>\n"
)


def test_qwen3_tool_conversation(toks):
  text = _render(toks["qwen3"], _conversation(), add_generation_prompt=True)
  assert text == (
    QWEN3_SYSTEM
    + "<|im_start|>user\nList the files in /tmp.<|im_end|>\n"
    + "<|im_start|>assistant\n<think>\nI should run ls.\n</think>\n\n"
    + "I will list the directory.\n"
    + QWEN3_CALL
    + "<|im_end|>\n"
    + QWEN3_TOOL_TURN
    + "<|im_start|>assistant\n"
  )


def test_qwen3_history_without_reasoning_and_no_thinking_prompt(toks):
  # A past assistant turn with no reasoning renders without a think block; enable_thinking=False
  # pre-fills an empty one.
  msgs = _conversation(with_reasoning=False)
  text = _render(toks["qwen3"], msgs, add_generation_prompt=True, enable_thinking=False)
  assert text == (
    QWEN3_SYSTEM
    + "<|im_start|>user\nList the files in /tmp.<|im_end|>\n"
    + "<|im_start|>assistant\nI will list the directory.\n"
    + QWEN3_CALL
    + "<|im_end|>\n"
    + QWEN3_TOOL_TURN
    + "<|im_start|>assistant\n<think>\n\n</think>\n\n"
  )
  # Without a generation prompt the text stops after the tool turn.
  assert _render(toks["qwen3"], msgs).endswith("</tool_response><|im_end|>\n")


def test_qwen3_inline_think_is_parsed_out_of_content(toks):
  # A model turn stored verbatim (think block inside content) renders like reasoning_content.
  raw = _conversation(with_reasoning=False)
  raw[2]["content"] = "<think>\n" + REASONING + "\n</think>\n\n" + THOUGHT
  assert _render(toks["qwen3"], raw, add_generation_prompt=True) == _render(
    toks["qwen3"], _conversation(), add_generation_prompt=True
  )


QWEN3_5_SYSTEM = (
  "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
  + json.dumps(BASH_TOOL)
  + "\n</tools>\n\nIf you choose to call a function ONLY reply in the "
  "following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n"
  "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\n"
  "This is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n"
  "</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
  "specified format: an inner <function=...></function> block must be nested within "
  "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide "
  "optional reasoning for your function call in natural language BEFORE the function call, but "
  "NOT after\n- If there is no function call available, answer the question like normal with "
  "your current knowledge and do not tell the user about function calls\n</IMPORTANT>\n\n"
  + SYSTEM
  + "<|im_end|>\n"
)
QWEN3_5_CALL = (
  "<tool_call>\n<function=bash>\n<parameter=command>\nls -la /tmp\n</parameter>\n"
  "</function>\n</tool_call>"
)


def test_qwen3_5_tool_conversation(toks):
  text = _render(toks["qwen3_5"], _conversation(), add_generation_prompt=True)
  assert text == (
    QWEN3_5_SYSTEM
    + "<|im_start|>user\nList the files in /tmp.<|im_end|>\n"
    + "<|im_start|>assistant\n<think>\nI should run ls.\n</think>\n\n"
    + "I will list the directory.\n\n"
    + QWEN3_5_CALL
    + "<|im_end|>\n"
    + "<|im_start|>user\n<tool_response>\ntotal 0\n(exit_code=0)\n</tool_response><|im_end|>\n"
    + "<|im_start|>assistant\n<think>\n"
  )


def test_qwen3_5_thinking_switch_and_multiline_parameter(toks):
  msgs = _conversation(with_reasoning=False)
  msgs[2]["content"] = ""
  msgs[2]["tool_calls"][0]["function"]["arguments"] = {"command": "cat <<'EOF'\na\nb\nEOF"}
  text = _render(toks["qwen3_5"], msgs, add_generation_prompt=True, enable_thinking=False)
  # Turns after the last user query always carry a (possibly empty) think block in Qwen3.5.
  assert text.endswith(
    "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=bash>\n"
    "<parameter=command>\ncat <<'EOF'\na\nb\nEOF\n</parameter>\n</function>\n</tool_call>"
    "<|im_end|>\n<|im_start|>user\n<tool_response>\ntotal 0\n(exit_code=0)\n"
    "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
  )


def test_qwen3_5_tool_arguments_follow_the_official_template(toks):
  # The official template loops over `tool_call.arguments|items` whenever arguments are defined:
  # non-string values render as JSON, no arguments render an empty call, and OpenAI-style
  # JSON-string arguments are an error (not a call silently rendered without its arguments).
  msgs = _conversation()
  call = msgs[2]["tool_calls"][0]["function"]
  call["arguments"] = {"command": COMMAND, "env": {"A": 1}, "args": [1, "x"]}
  assert (
    '<parameter=command>\nls -la /tmp\n</parameter>\n<parameter=env>\n{"A": 1}\n'
    '</parameter>\n<parameter=args>\n[1, "x"]\n</parameter>\n</function>'
    in _render(toks["qwen3_5"], msgs)
  )
  del call["arguments"]
  assert "<function=bash>\n</function>" in _render(toks["qwen3_5"], msgs)
  call["arguments"] = json.dumps({"command": COMMAND})
  with pytest.raises(TypeError, match="mapping"):
    _render(toks["qwen3_5"], msgs)


def test_plain_chat_generation_prompts(toks):
  msgs = [{"role": "user", "content": "hi"}]
  q3 = toks["qwen3"].apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  q35 = toks["qwen3_5"].apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert q3 == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
  assert q35 == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n"


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_template_tokens_are_single_ids(toks, family):
  tok = toks[family]
  ids = tok.apply_chat_template(
    _conversation(), tools=[BASH_TOOL], tokenize=True, add_generation_prompt=True, return_dict=False
  )
  for content in (
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
  ):
    assert tok.convert_tokens_to_ids(content) in ids, content
