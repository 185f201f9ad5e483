"""Any OpenAI-compatible chat endpoint as a harness policy (the teacher, the probe agent, the
pipeline's calibration policy and evaluation's `endpoint` policy).

The harnesses are token in / token out (`generate(token_ids, max_tokens) -> Completion`). This
adapter decodes the conversation so far (rendered by the student's own chat template, so the
system prompt already explains the tool-call syntax of the harness), splits it into chat messages
at the template's turn markers and sends them to `{base_url}/chat/completions` through the
generator's `ChatClient`; the teacher's reply text is tokenised with the student's tokenizer and
returned as the turn's tokens (logprob 0, version -1: not sampled from our policy). The trajectory
is therefore exactly what the student model would train on, in its own format.

Two ways to send a conversation:
  - text (no `tools`): every turn verbatim, tool calls and tool results as the template wrote
    them (<tool_call> text in assistant turns, <tool_response> user turns); the reply's text is
    the turn.
  - native tool calls (`tools`, the harness's function definitions, e.g. the bash tool): the
    system turn without the template's tool preamble, each assistant turn's calls as OpenAI
    `tool_calls` (earlier reasoning left out, as OpenAI's API expects) answered by `tool`
    messages, and `tools` in the request; the reply's `tool_calls` are written back in the
    family's tool-call syntax by the template itself (formats.assistant_text). An endpoint that
    renders with the same template (ours) sees exactly the prompt the harness built.
Every reply's `usage` is added up per episode (`ChatTeacher.usage`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Mapping, Sequence

from tmax_jax import formats
from tmax_jax.agents.scripted import ScriptedCompletion
from tmax_jax.agents.worker import episode_seed
from tmax_jax.formats import encode
from tmax_jax.inference import parse_calls
from tmax_jax.tasks.generator.llm import ChatClient, ChatReply

_TURN = re.compile(r"<\|im_start\|>(system|user|assistant)\n(.*?)<\|im_end\|>", re.S)
_THINK_PREFILL = "<think>\n"
_RESPONSES = re.compile(r"(?:\s*<tool_response>.*?</tool_response>)+\s*", re.S)
_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S)
_MARK = "TMAX_SYSTEM_MARK"


def chat_messages(text: str) -> tuple[list[dict[str, str]], str]:
  """Rendered conversation -> (messages, generation prefill). Tool results (rendered by Qwen
  templates as user turns wrapped in <tool_response>) are sent as user messages, verbatim."""
  messages = [{"role": m.group(1), "content": m.group(2)} for m in _TURN.finditer(text)]
  tail = text[text.rfind("<|im_end|>") + len("<|im_end|>") :] if messages else text
  prefill = tail.split("<|im_start|>assistant\n", 1)[1] if "<|im_start|>assistant\n" in tail else ""
  if not messages:
    raise ValueError(
      "the prompt has no <|im_start|>role ... <|im_end|> turns; is this a Qwen "
      "chat-template rendering?"
    )
  return messages, prefill


@dataclasses.dataclass(frozen=True)
class ToolSpec:
  """Native tool calls: the harness's `tools` (OpenAI function definitions), the family's
  tool-call syntax (`fmt`, formats.tool_call_format) and the episode's chat-template options."""

  tools: tuple[dict, ...]
  fmt: str
  template_kwargs: tuple[tuple[str, object], ...] = ()

  @property
  def kwargs(self) -> dict:
    return dict(self.template_kwargs)


def _tool_preamble(tokenizer, spec: ToolSpec) -> tuple[str, str]:
  """(before, after) the system prompt's own text in the system turn the template renders with
  `spec.tools` (Qwen3 appends the tool block, Qwen3.5 puts it first)."""
  probe = [{"role": "system", "content": _MARK}, {"role": "user", "content": "q"}]
  text = tokenizer.apply_chat_template(probe, tools=list(spec.tools), tokenize=False, **spec.kwargs)
  system = chat_messages(text)[0][0]["content"]
  before, _, after = system.partition(_MARK)
  return before, after


def tool_messages(messages: Sequence[Mapping], tokenizer, spec: ToolSpec) -> list[dict]:
  """`chat_messages` of a conversation rendered with `spec.tools` -> OpenAI messages with native
  tool calls. An assistant turn's calls become `tool_calls` (ids call_<turn>_<i>) when the next
  turn holds exactly their results; otherwise (a malformed call, a format error's feedback) the
  turn is sent as its text."""
  before, after = _tool_preamble(tokenizer, spec)
  out: list[dict] = []
  for i, msg in enumerate(messages):
    role, content = msg["role"], msg["content"]
    if role == "system" and content.startswith(before) and content.endswith(after):
      content = content[len(before) : len(content) - len(after)]
    if role == "user" and _RESPONSES.fullmatch(content) and out and out[-1].get("tool_calls"):
      ids = [c["id"] for c in out[-1]["tool_calls"]]
      out += [
        {"role": "tool", "tool_call_id": cid, "content": body}
        for cid, body in zip(ids, _RESPONSE.findall(content), strict=True)
      ]
      continue
    if role == "assistant":
      out.append(_assistant(formats.strip_reasoning(content), i, messages[i + 1 :], spec))
      continue
    out.append({"role": role, "content": content})
  return out


def _assistant(text: str, turn: int, rest: Sequence[Mapping], spec: ToolSpec) -> dict:
  rest_content, calls = parse_calls(text, spec.fmt, spec.tools)
  answered = rest and rest[0]["role"] == "user" and _RESPONSES.fullmatch(rest[0]["content"])
  if not calls or not answered or len(_RESPONSE.findall(rest[0]["content"])) != len(calls):
    return {"role": "assistant", "content": text}
  for j, call in enumerate(calls):
    call["id"] = f"call_{turn}_{j}"
  return {"role": "assistant", "content": rest_content, "tool_calls": calls}


def reply_text(reply: ChatReply, tokenizer, spec: ToolSpec) -> str:
  """The reply (content, tool calls, reasoning) as the assistant turn the template writes for it
  after the generation prompt. A call whose arguments are not a JSON object is kept as Hermes
  text, so the harness answers it with its format error."""
  content = reply.content or ""
  calls = []
  for name, arguments in reply.tool_calls:
    try:
      args = json.loads(arguments)
    except json.JSONDecodeError:
      args = None
    if isinstance(args, dict):
      calls.append({"type": "function", "function": {"name": name, "arguments": args}})
    else:
      call = f'{{"name": {json.dumps(name)}, "arguments": {arguments}}}'
      content += f"\n<tool_call>\n{call}\n</tool_call>"
  message = {"role": "assistant", "content": content}
  if calls:
    message["tool_calls"] = calls
  if reply.reasoning is not None:
    message["reasoning_content"] = reply.reasoning
  return formats.assistant_text(tokenizer, message, list(spec.tools), **spec.kwargs)


@dataclasses.dataclass
class Usage:
  """An episode's requests and the token counts the endpoint reported for them."""

  requests: int = 0
  prompt_tokens: int = 0
  completion_tokens: int = 0

  def add(self, reply: ChatReply) -> None:
    self.requests += 1
    self.prompt_tokens += reply.prompt_tokens
    self.completion_tokens += reply.completion_tokens


@dataclasses.dataclass
class ChatTeacher:
  """`generate(token_ids, max_tokens)` backed by a chat endpoint (one request per turn)."""

  client: ChatClient
  tokenizer: object
  calls: int = 0
  seed: int | None = None  # sent with every request (reproducible sampling where supported)
  tools: ToolSpec | None = None  # native tool calls (None: the conversation as text)
  usage: Usage = dataclasses.field(default_factory=Usage)

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    text = self.tokenizer.decode(list(token_ids), skip_special_tokens=False)
    messages, prefill = chat_messages(text)
    spec = self.tools
    if spec is not None:
      messages = tool_messages(messages, self.tokenizer, spec)
    reply = self.client.chat(
      messages, max_tokens=max_tokens, seed=self.seed, tools=spec.tools if spec else ()
    )
    self.calls += 1
    self.usage.add(reply)
    if spec is not None:
      turn = reply_text(reply, self.tokenizer, spec)
    else:
      turn = (reply.content or "").strip()
      if prefill.endswith(_THINK_PREFILL) and "</think>" not in turn:
        turn = "\n</think>\n\n" + turn  # the template opened a reasoning block: close it empty
    ids = encode(self.tokenizer, turn + self.tokenizer.eos_token)
    finish = "stop" if len(ids) <= max_tokens else "length"
    ids = ids[:max_tokens]
    return ScriptedCompletion(ids, [0.0] * len(ids), [-1] * len(ids), finish)


class EndpointPolicy:
  """EpisodeWorker policy provider: a chat endpoint, one seeded ChatTeacher per episode (seed
  agents/worker.episode_seed of `seed`, the task, the group and the sample). With `track_usage`,
  `usage(task_name, group, sample)` hands over (once) the Usage of that episode's requests."""

  def __init__(
    self,
    client: ChatClient,
    tokenizer,
    seed: int = 0,
    tools: ToolSpec | None = None,
    track_usage: bool = False,
  ):
    self.client, self.tokenizer, self.seed, self.tools = client, tokenizer, seed, tools
    self._usage: dict[tuple[str, int, int], Usage] | None = {} if track_usage else None
    self._lock = threading.Lock()

  def generate_fn(self, task, group: int, sample: int) -> ChatTeacher:
    teacher = ChatTeacher(
      self.client,
      self.tokenizer,
      seed=episode_seed(self.seed, task.name, group, sample),
      tools=self.tools,
    )
    if self._usage is not None:
      with self._lock:
        self._usage[(task.name, group, sample)] = teacher.usage
    return teacher

  def usage(self, task_name: str, group: int, sample: int) -> Usage:
    """The episode's Usage (zero when no episode started: the sandbox never did)."""
    if self._usage is None:
      raise ValueError("EndpointPolicy(track_usage=False) keeps no usage")
    with self._lock:
      return self._usage.pop((task_name, group, sample), Usage())
