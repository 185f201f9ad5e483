"""OpenAI request bodies -> token-level requests, and generated tokens -> OpenAI choices (no HTTP).

Requests: `chat_request` renders `messages` (+ `tools`) with the served family's chat template and
tokenises the result; `completion_request` tokenises `prompt` as is (or takes token ids). Both
check every supported field and raise `APIError` naming the parameter; fields that would change
the sampling in ways the engine cannot (penalties, logit_bias, JSON mode, suffix) are refused
rather than ignored.

Outputs: a `Choice` consumes one request's `RLStep`s: an incremental detokenizer (a token that
ends inside a UTF-8 character waits for the next), `stop` strings (the text is cut before the
first match and the request ends), and for chat the reply split of the Qwen templates: reasoning
up to `</think>` (`reasoning_content`, as vLLM returns it), content, and `<tool_call>` blocks parsed
with the family's tool-call format (formats/tool_calls.py) into `tool_calls`. While
streaming, text that might still turn out to be a stop string, a `</think>` or a tool call is held
back until it is decided, so the deltas always add up to the final message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from tmax_jax.formats import THINK_CLOSE, THINK_OPEN, FormatError
from tmax_jax.formats import tool_calls as tool_calls_lib
from tmax_jax.inference import sampling

TOOL_OPEN = "<tool_call>"
MAX_STOP = 4  # OpenAI's limit on `stop` sequences
ROLES = ("system", "developer", "user", "assistant", "tool")


class APIError(Exception):
  """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

  def __init__(
    self,
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    kind: str = "invalid_request_error",
  ):
    super().__init__(message)
    self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

  def body(self) -> dict:
    return {
      "error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
    }


def bad(param: str, message: str) -> APIError:
  return APIError(400, f"{param}: {message}", param=param)


@dataclasses.dataclass(frozen=True)
class GenRequest:
  """One prompt's generation settings (a request with `n` choices submits it n times)."""

  prompt_ids: tuple[int, ...]
  max_tokens: int
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  seed: int | None = None
  stop: tuple[str, ...] = ()
  logprobs: bool = False
  top_logprobs: int = 0
  n: int = 1
  stream: bool = False
  include_usage: bool = False
  tools: tuple = ()  # the request's tool definitions (chat), for typing XML arguments
  parse_tools: bool = False
  think_prefilled: bool = False  # the prompt ends inside an open <think> block
  echo: str = ""  # completions: prompt text put before the generated text

  def sampling_params(self, index: int) -> sampling.SamplingParams:
    """Choice `index`'s settings: seed + index when the request has a seed (reproducible), else
    a fresh random seed per choice."""
    seed = secrets.randbits(63) if self.seed is None else (self.seed + index) % (1 << 64)
    return sampling.SamplingParams(
      temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, seed=seed
    )


def _get(body: Mapping, name: str, types, default=None):
  value = body.get(name, default)
  if value is None:
    return default
  if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
    raise bad(name, f"expected {_names(types)}, got a boolean")
  if not isinstance(value, types):
    raise bad(name, f"expected {_names(types)}, got {type(value).__name__}")
  return value


def _names(types) -> str:
  types = types if isinstance(types, tuple) else (types,)
  return " or ".join(
    {
      int: "an integer",
      float: "a number",
      str: "a string",
      bool: "a boolean",
      list: "an array",
      dict: "an object",
    }.get(t, t.__name__)
    for t in types
  )


def _refuse_unsupported(body: Mapping) -> None:
  for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
    if body.get(name) not in (None, 0, 0.0, 1.0 if name == "repetition_penalty" else 0):
      raise bad(name, "not supported by this server (sampling has no penalties)")
  if body.get("logit_bias"):
    raise bad("logit_bias", "not supported by this server")
  fmt = body.get("response_format")
  if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
    raise bad("response_format", "only {'type': 'text'} is supported (no constrained decoding)")


def _sampling(body: Mapping) -> dict:
  temperature = float(_get(body, "temperature", (int, float), 1.0))
  top_p = float(_get(body, "top_p", (int, float), 1.0))
  top_k = _get(body, "top_k", int, 0)  # vLLM's extension; 0 = off
  seed = _get(body, "seed", int)
  if not 0.0 <= temperature <= 2.0:
    raise bad("temperature", f"must be in [0, 2], got {temperature}")
  if not 0.0 < top_p <= 1.0:
    raise bad("top_p", f"must be in (0, 1], got {top_p}")
  if top_k < 0:
    raise bad("top_k", f"must be >= 0, got {top_k}")
  return dict(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed)


def _stop(body: Mapping) -> tuple[str, ...]:
  stop = body.get("stop")
  if stop is None:
    return ()
  stop = [stop] if isinstance(stop, str) else stop
  if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
    raise bad("stop", "expected a non-empty string or an array of them")
  if len(stop) > MAX_STOP:
    raise bad("stop", f"at most {MAX_STOP} sequences, got {len(stop)}")
  return tuple(stop)


def _common(body: Mapping, prompt_ids: Sequence[int], max_len: int) -> dict:
  """The fields chat and completions share (sampling, max_tokens, n, stream, stop)."""
  _refuse_unsupported(body)
  name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
  max_tokens = _get(body, name, int, max(1, max_len - len(prompt_ids)))
  if max_tokens < 1:
    raise bad(name, f"must be >= 1, got {max_tokens}")
  n = _get(body, "n", int, 1)
  if not 1 <= n <= 16:
    raise bad("n", f"must be in [1, 16], got {n}")
  options = _get(body, "stream_options", dict, {})
  stream = _get(body, "stream", bool, False)
  if options and not stream:
    raise bad("stream_options", "only allowed with stream=true")
  return dict(
    prompt_ids=tuple(prompt_ids),
    max_tokens=max_tokens,
    stop=_stop(body),
    n=n,
    stream=stream,
    include_usage=bool(options.get("include_usage")),
    **_sampling(body),
  )


def _top(value: int, param: str, max_topk: int) -> int:
  if not 0 <= value <= max_topk:
    raise bad(
      param, f"must be in [0, {max_topk}] on this server (EngineConfig.max_topk), got {value}"
    )
  return value


def _text_content(content: Any, param: str) -> str:
  """A message's content: a string or an array of text parts."""
  if content is None:
    return ""
  if isinstance(content, str):
    return content
  if isinstance(content, list):
    parts = []
    for i, part in enumerate(content):
      if (
        not isinstance(part, dict)
        or part.get("type") != "text"
        or not isinstance(part.get("text"), str)
      ):
        raise bad(f"{param}[{i}]", "only text content parts are supported")
      parts.append(part["text"])
    return "".join(parts)
  raise bad(param, f"expected a string or an array of text parts, got {type(content).__name__}")


def _template_message(msg: Any, i: int) -> dict:
  """One OpenAI message -> the dict the chat template reads (tool-call arguments as objects)."""
  param = f"messages[{i}]"
  if not isinstance(msg, dict) or msg.get("role") not in ROLES:
    raise bad(f"{param}.role", f"expected one of {list(ROLES)}")
  role = "system" if msg["role"] == "developer" else msg["role"]
  out: dict[str, Any] = {
    "role": role,
    "content": _text_content(msg.get("content"), f"{param}.content"),
  }
  if isinstance(msg.get("reasoning_content"), str):
    out["reasoning_content"] = msg["reasoning_content"]
  calls = msg.get("tool_calls")
  if calls and role == "assistant":
    out["tool_calls"] = []
    for j, call in enumerate(calls):
      fn = call.get("function") if isinstance(call, dict) else None
      if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad(f"{param}.tool_calls[{j}].function", "expected {name, arguments}")
      args = fn.get("arguments", "{}")
      try:
        args = json.loads(args) if isinstance(args, str) else args
      except json.JSONDecodeError as e:
        raise bad(f"{param}.tool_calls[{j}].function.arguments", f"not JSON: {e}") from e
      out["tool_calls"].append(
        {
          "type": "function",
          "id": call.get("id"),
          "function": {"name": fn["name"], "arguments": args},
        }
      )
  if role == "tool" and msg.get("tool_call_id"):
    out["tool_call_id"] = msg["tool_call_id"]
  return out


def _tools(body: Mapping) -> list[dict]:
  tools = _get(body, "tools", list, [])
  for i, tool in enumerate(tools):
    fn = tool.get("function") if isinstance(tool, dict) else None
    if (
      tool.get("type", "function") != "function"
      or not isinstance(fn, dict)
      or not isinstance(fn.get("name"), str)
    ):
      raise bad(f"tools[{i}]", "expected {type: 'function', function: {name, parameters}}")
  return tools


def chat_request(body: Mapping, tokenizer, max_len: int, max_topk: int) -> GenRequest:
  """A /v1/chat/completions body -> GenRequest (prompt = the chat template's rendering)."""
  messages = _get(body, "messages", list)
  if not messages:
    raise bad("messages", "expected a non-empty array")
  tools = _tools(body)
  choice = body.get("tool_choice", "auto")
  if choice not in ("auto", "none"):
    raise bad("tool_choice", "only 'auto' and 'none' are supported (no constrained decoding)")
  kwargs = _get(body, "chat_template_kwargs", dict, {})
  rendered = [_template_message(m, i) for i, m in enumerate(messages)]
  try:
    text = tokenizer.apply_chat_template(
      rendered, tools=tools or None, tokenize=False, add_generation_prompt=True, **kwargs
    )
  except Exception as e:  # jinja's raise_exception
    raise bad("messages", f"the chat template refused them: {e}") from e
  ids = tokenizer.encode(text, add_special_tokens=False)
  logprobs = _get(body, "logprobs", bool, False)
  top = _top(_get(body, "top_logprobs", int, 0), "top_logprobs", max_topk)
  if top and not logprobs:
    raise bad("top_logprobs", "needs logprobs=true")
  return GenRequest(
    **_common(body, ids, max_len),
    logprobs=logprobs,
    top_logprobs=top,
    tools=tuple(tools),
    parse_tools=bool(tools) and choice != "none",
    think_prefilled=text.rstrip("\n").endswith(THINK_OPEN),
  )


def completion_request(body: Mapping, tokenizer, max_len: int, max_topk: int) -> GenRequest:
  """A /v1/completions body (one prompt: a string or token ids) -> GenRequest."""
  prompt = body.get("prompt")
  if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
    prompt = prompt[0]  # a batch of one
  if isinstance(prompt, str):
    ids = tokenizer.encode(prompt, add_special_tokens=False)
  elif (
    isinstance(prompt, list)
    and prompt
    and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
  ):
    ids = list(prompt)
  else:
    raise bad("prompt", "expected a string or an array of token ids (one prompt per request)")
  if body.get("suffix"):
    raise bad("suffix", "not supported by this server")
  if body.get("best_of") not in (None, 1, body.get("n", 1)):
    raise bad("best_of", "not supported by this server")
  top = _top(_get(body, "logprobs", int, 0), "logprobs", max_topk)  # here: the top-K count
  echo = _get(body, "echo", bool, False)
  if echo and body.get("logprobs") is not None:
    raise bad("echo", "echo with logprobs is not supported (no prompt logprobs)")
  return GenRequest(
    **_common(body, ids, max_len),
    logprobs=body.get("logprobs") is not None,
    top_logprobs=top,
    echo=tokenizer.decode(ids) if echo else "",
  )


class Detokenizer:
  """Incremental decoding: text is emitted once the tokens so far decode to whole characters."""

  def __init__(self, tokenizer):
    self._tok, self._ids, self._prefix, self._read = tokenizer, [], 0, 0

  def push(self, token_id: int) -> str:
    self._ids.append(token_id)
    prefix = self._tok.decode(self._ids[self._prefix : self._read], skip_special_tokens=True)
    full = self._tok.decode(self._ids[self._prefix :], skip_special_tokens=True)
    if len(full) > len(prefix) and not full.endswith("\ufffd"):
      self._prefix, self._read = self._read, len(self._ids)
      return full[len(prefix) :]
    return ""


def _held(text: str, markers: Sequence[str]) -> int:
  """Length of the longest suffix of `text` that is a proper prefix of one of `markers`."""
  best = 0
  for marker in markers:
    for k in range(min(len(marker) - 1, len(text)), best, -1):
      if text.endswith(marker[:k]):
        best = k
        break
  return best


def split_reply(text: str, think_prefilled: bool) -> tuple[str | None, str]:
  """(reasoning or None, content) of a reply in the Qwen templates' layout."""
  if think_prefilled:
    text = THINK_OPEN + "\n" + text
  if not text.lstrip().startswith(THINK_OPEN):
    return None, text
  body = text.lstrip()[len(THINK_OPEN) :]
  if THINK_CLOSE not in body:
    return body.lstrip("\n"), ""
  reasoning, content = body.split(THINK_CLOSE, 1)
  return reasoning.lstrip("\n"), content.lstrip("\n")


def _typed_args(args: dict, tool: Mapping | None) -> dict:
  """XML arguments arrive as strings; non-string parameters of the tool's schema are JSON."""
  props = ((tool or {}).get("function", {}).get("parameters") or {}).get("properties", {})
  out = {}
  for key, value in args.items():
    kind = (props.get(key) or {}).get("type", "string")
    if isinstance(value, str) and kind != "string":
      with contextlib.suppress(json.JSONDecodeError):  # else return it as the model wrote it
        value = json.loads(value)
    out[key] = value
  return out


def parse_calls(content: str, fmt: str, tools: Sequence[Mapping]) -> tuple[str | None, list]:
  """(content outside the calls or None, OpenAI tool_calls); no calls if they do not parse."""
  try:
    rest, calls = tool_calls_lib.parse_tool_calls(content, fmt)
  except FormatError:
    return content, []
  by_name = {t["function"]["name"]: t for t in tools}
  out = [
    {
      "id": f"call_{secrets.token_hex(12)}",
      "type": "function",
      "function": {"name": name, "arguments": json.dumps(_typed_args(args, by_name.get(name)))},
    }
    for name, args in calls
  ]
  return (rest or None) if out else content, out


def _entry(tokenizer, token_id: int, logprob: float) -> dict:
  text = tokenizer.decode([token_id])
  return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}


class Choice:
  """One choice's output, fed the request's tokens one by one (`add`)."""

  def __init__(self, index: int, req: GenRequest, tokenizer, tool_format: str = ""):
    self.index, self.req, self._tok, self._fmt = index, req, tokenizer, tool_format
    self._detok = Detokenizer(tokenizer)
    self.text = ""  # decoded so far (cut before a stop string)
    self.tokens: list[tuple[int, float, tuple, tuple]] = []  # (id, logprob, top ids, top lps)
    self.offsets: list[int] = []  # where each token's text starts in self.text
    self.generated = 0  # every sampled token, the stop token included (usage)
    self.finish: str | None = None
    self._sent = {"reasoning_content": 0, "content": 0, "tokens": 0}
    self._markers = req.stop + (THINK_OPEN, THINK_CLOSE) + ((TOOL_OPEN,) if req.parse_tools else ())

  def add(
    self,
    token: int | None,
    logprob: float,
    finish: str,
    top_ids: Sequence[int] = (),
    top_logprobs: Sequence[float] = (),
  ) -> bool:
    """One engine step; True once the choice is complete (then `finish` is set)."""
    if token is not None:
      self.generated += 1
      if finish != "stop":  # the engine's stop token is not part of the reply
        self._append(token, logprob, tuple(top_ids), tuple(top_logprobs))
    if self.finish is None and finish:
      self.finish = finish
    return self.finish is not None

  def _append(self, token: int, logprob: float, top_ids: tuple, top_lps: tuple) -> None:
    piece = self._detok.push(token)
    self.tokens.append((token, logprob, top_ids, top_lps))
    self.offsets.append(len(self.text))
    start = max(0, len(self.text) - max((len(s) for s in self.req.stop), default=0))
    self.text += piece
    hits = [i for i in (self.text.find(s, start) for s in self.req.stop) if i >= 0]
    if hits:  # cut before the earliest stop string and end the request
      cut = min(hits)
      self.text = self.text[:cut]
      keep = sum(1 for o in self.offsets if o < cut)
      del self.tokens[keep:], self.offsets[keep:]
      self.finish = "stop"

  # ---- the reply ---------------------------------------------------------------------------

  def _parts(self, final: bool) -> tuple[str | None, str, list, int]:
    """(reasoning, content, tool_calls, released chars of self.text) at this point."""
    text = self.text if final else self.text[: len(self.text) - _held(self.text, self._markers)]
    reasoning, content = split_reply(text, self.req.think_prefilled)
    calls: list[dict[str, Any]] = []
    if self.req.parse_tools:
      head = content.split(TOOL_OPEN, 1)[0]
      if final:
        rest, calls = parse_calls(content, self._fmt, self.req.tools)
        content = head if calls else (rest or "")
      else:
        content = head
    return reasoning, content, calls, len(text)

  def message(self) -> dict:
    """The non-streamed chat message."""
    reasoning, content, calls, _ = self._parts(final=True)
    msg: dict[str, Any] = {"role": "assistant", "content": content.rstrip() if calls else content}
    if calls:
      msg["content"] = msg["content"] or None
      msg["tool_calls"] = calls
    if reasoning is not None:
      msg["reasoning_content"] = reasoning
    return msg

  def finish_reason(self) -> str:
    if self.req.parse_tools and self._parts(final=True)[2]:
      return "tool_calls"
    return self.finish or "length"

  def chat_logprobs(self, tokens=None) -> dict | None:
    if not self.req.logprobs:
      return None
    content = []
    for token, lp, top_ids, top_lps in self.tokens if tokens is None else tokens:
      entry = _entry(self._tok, token, lp)
      entry["top_logprobs"] = [
        _entry(self._tok, t, v) for t, v in zip(top_ids, top_lps, strict=True)
      ]
      content.append(entry)
    return {"content": content}

  def completion_logprobs(self) -> dict | None:
    if not self.req.logprobs:
      return None
    out: dict[str, Any] = {
      "tokens": [],
      "token_logprobs": [],
      "top_logprobs": [],
      "text_offset": [],
    }
    base = len(self.req.echo)
    for (token, lp, top_ids, top_lps), offset in zip(self.tokens, self.offsets, strict=True):
      out["tokens"].append(self._tok.decode([token]))
      out["token_logprobs"].append(lp)
      out["top_logprobs"].append(
        {self._tok.decode([t]): v for t, v in zip(top_ids, top_lps, strict=True)}
      )
      out["text_offset"].append(base + offset)
    if not self.req.top_logprobs:
      out["top_logprobs"] = None  # as OpenAI answers logprobs=0
    return out

  def chat_delta(self, final: bool) -> tuple[dict, list]:
    """(delta fields not streamed yet, their tokens for logprobs) for a chat chunk."""
    reasoning, content, calls, released = self._parts(final)
    delta: dict[str, Any] = {}
    for key, value in (("reasoning_content", reasoning), ("content", content)):
      if value is not None and len(value) > self._sent[key]:
        delta[key] = value[self._sent[key] :]
        self._sent[key] = len(value)
    if calls:
      delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(calls)]
    done = sum(1 for o in self.offsets if o < released) if not final else len(self.tokens)
    tokens, self._sent["tokens"] = self.tokens[self._sent["tokens"] : done], done
    return delta, tokens

  def text_delta(self, final: bool) -> str:
    """Completion text not streamed yet (held back while it might be a stop string)."""
    hold = 0 if final else _held(self.text, self.req.stop)
    text = self.text[: len(self.text) - hold]
    delta, self._sent["content"] = text[self._sent["content"] :], len(text)
    return delta
