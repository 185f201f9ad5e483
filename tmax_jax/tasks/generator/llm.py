"""Task writing by an LLM through any OpenAI-compatible chat endpoint.

`ChatClient` calls {base_url}/chat/completions through the `openai` package, which retries 408,
409, 429, 5xx, timeouts and connection errors with exponential backoff and jitter and honours the
server's Retry-After (see docs/design/tasks.md): `complete` returns the reply text, `chat` the reply
with its tool calls and token usage (`tools` sent as OpenAI function definitions). `render_prompt`
fills prompts/{system,user}.txt from an AxisSample. `parse_task_reply` is strict: the reply must
be exactly one JSON object (bare or in one ```json fence) with exactly the documented keys and
types, and its verifier kind must be the sampled one; anything else raises ReplyError, whose
message is fed back to the model on retry.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import openai

from tmax_jax.tasks import verifiers as V
from tmax_jax.tasks import vocabulary
from tmax_jax.tasks.format import AgentConfig, Task, TaskConfig, TaskInfo, VerifierConfig
from tmax_jax.tasks.generator import fixtures
from tmax_jax.tasks.generator.axes import AxisSample
from tmax_jax.tasks.verifiers import knobs

PROMPTS = pathlib.Path(__file__).with_name("prompts")
WORKDIR = "/workspace"
REQUIRED = {
  "name": str,
  "instruction": str,
  "difficulty": str,
  "environment": dict,
  "solution": str,
  "verifier": dict,
  "smoke_test": str,
}
ENVIRONMENT_KEYS = ("seeds", "files", "dockerfile")
DIFFICULTIES = ("easy", "medium", "hard")
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")
MAX_TOKENS_PARAMS = ("max_tokens", "max_completion_tokens")


class ReplyError(ValueError):
  """The model's reply is not a usable task; the message says what to fix."""


class ChatError(RuntimeError):
  """One request failed (e.g. HTTP 400, a reply without content): counts as a failed attempt."""


class EndpointError(ChatError):
  """The endpoint cannot serve requests: unreachable, or still rate limited / failing after the
  client's retries (`fatal` False: a run may wait and resume), or refusing us (wrong key, URL or
  model: `fatal` True)."""

  def __init__(self, message: str, fatal: bool = False):
    super().__init__(message)
    self.fatal = fatal


@dataclasses.dataclass(frozen=True)
class ChatConfig:
  base_url: str  # e.g. http://127.0.0.1:8000/v1
  model: str
  api_key: str | None = None
  temperature: float = 0.7
  max_tokens: int = 8192
  timeout_s: float = 300.0  # per request attempt
  max_retries: int = 5  # on 408/409/429/5xx/timeouts/connection errors, with backoff
  # the request field that caps the reply: OpenAI's reasoning models take only
  # "max_completion_tokens"; older OpenAI-compatible servers only "max_tokens"
  max_tokens_param: str = "max_tokens"

  def __post_init__(self):
    if self.max_tokens_param not in MAX_TOKENS_PARAMS:
      raise ValueError(
        f"max_tokens_param={self.max_tokens_param!r}; expected one of {MAX_TOKENS_PARAMS}"
      )


@dataclasses.dataclass(frozen=True)
class ChatReply:
  """One chat completion: the message's `content` (None when it only calls tools), its
  `tool_calls` as (name, arguments JSON text), `reasoning` (the reasoning_content that vLLM-style
  servers, ours included, return; None otherwise) and the response's `usage` token counts (0
  where the endpoint reports none)."""

  content: str | None
  tool_calls: tuple[tuple[str, str], ...] = ()
  reasoning: str | None = None
  prompt_tokens: int = 0
  completion_tokens: int = 0


_FATAL = (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)
_EXHAUSTED = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)


def _chat_error(url: str, err: Exception) -> ChatError:
  """An openai exception as ChatError (this request) or EndpointError (the endpoint)."""
  status = getattr(err, "status_code", None)
  what = f"HTTP {status}: {str(err)[:300]}" if status else f"{type(err).__name__}: {err}"
  if isinstance(err, _FATAL):
    return EndpointError(f"{url}: {what}", fatal=True)
  if isinstance(err, _EXHAUSTED) or (status is not None and status >= 500):
    return EndpointError(f"{url}: {what} (after the client's retries)")
  return ChatError(f"{url}: {what}")


class ChatClient:
  """OpenAI-compatible chat client (thread-safe: one connection pool shared by the threads)."""

  def __init__(self, config: ChatConfig):
    self.config = config
    self.url = config.base_url.rstrip("/") + "/chat/completions"
    self._client = openai.OpenAI(
      base_url=config.base_url,
      api_key=config.api_key or "none",  # local endpoints take any key; the package needs one
      timeout=config.timeout_s,
      max_retries=config.max_retries,
    )

  def complete(
    self,
    messages: Sequence[Mapping[str, str]],
    max_tokens: int | None = None,
    seed: int | None = None,
  ) -> str:
    """The reply text; `max_tokens` caps this call below the configured limit; `seed` asks the
    endpoint for reproducible sampling (OpenAI's best-effort `seed`)."""
    content = self.chat(messages, max_tokens, seed).content
    if not isinstance(content, str):
      raise ChatError(f"{self.url}: message content is {type(content).__name__}, expected a string")
    return content

  def chat(
    self,
    messages: Sequence[Mapping[str, Any]],
    max_tokens: int | None = None,
    seed: int | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
  ) -> ChatReply:
    """One chat completion with `tools` (OpenAI function definitions; none: a text reply) ->
    ChatReply. Raises ChatError (this request) or EndpointError (the endpoint) as `complete`."""
    c = self.config
    limit = c.max_tokens if max_tokens is None else min(c.max_tokens, max_tokens)
    extra = {c.max_tokens_param: limit}
    if seed is not None:
      extra["seed"] = seed
    if tools:
      extra["tools"] = list(tools)
    try:
      resp = self._client.chat.completions.create(
        model=c.model, messages=list(messages), temperature=c.temperature, **extra
      )
    except openai.OpenAIError as err:
      raise _chat_error(self.url, err) from None
    except ValueError as err:  # a 200 whose body is not JSON
      raise ChatError(f"{self.url}: malformed response body: {err}") from None
    return self._reply(resp)

  def _reply(self, resp) -> ChatReply:
    try:
      msg = resp.choices[0].message
      calls = tuple((t.function.name, t.function.arguments) for t in msg.tool_calls or ())
    except (AttributeError, IndexError, TypeError):
      raise ChatError(f"{self.url}: no choices[0].message in {str(resp)[:300]}") from None
    if msg.content is not None and not isinstance(msg.content, str):
      raise ChatError(
        f"{self.url}: message content is {type(msg.content).__name__}, expected a string"
      )
    if not all(isinstance(n, str) and isinstance(a, str) for n, a in calls):
      raise ChatError(f"{self.url}: tool_calls without a function name and arguments: {calls}")
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    usage = resp.usage
    return ChatReply(
      msg.content,
      calls,
      reasoning if isinstance(reasoning, str) else None,
      int(getattr(usage, "prompt_tokens", 0) or 0),
      int(getattr(usage, "completion_tokens", 0) or 0),
    )

  def preflight(self) -> list[str]:
    """Checks that the endpoint answers and serves `model` before any work starts -> the model
    ids it lists. Raises EndpointError (fatal) naming what is wrong."""
    c = self.config
    try:
      try:
        ids = [m.id for m in self._client.with_options(max_retries=1).models.list()]
      except openai.APIStatusError as err:
        if err.status_code not in (404, 405, 501):
          raise
        # an endpoint without /models: one tiny completion instead
        self.complete([{"role": "user", "content": "Reply with OK."}], max_tokens=1)
        return []
    except openai.OpenAIError as err:
      raise EndpointError(
        f"endpoint unusable: {_chat_error(c.base_url.rstrip('/') + '/models', err)}", fatal=True
      ) from None
    except ChatError as err:
      raise EndpointError(f"endpoint unusable: {err}", fatal=True) from None
    if ids and c.model not in ids:
      raise EndpointError(
        f"{c.base_url}: model {c.model!r} is not served (the endpoint lists {ids[:20]})",
        fatal=True,
      )
    return ids


def render_prompt(sample: AxisSample) -> list[dict[str, str]]:
  """The chat messages for one axis sample."""
  values = {
    **sample.to_json(),
    "primitive_skills": "; ".join(sample.primitive_skills),
    "workdir": WORKDIR,
    "complexity_hint": vocabulary.TASK_COMPLEXITY.get(sample.task_complexity, ""),
    "fixture_hint": vocabulary.FIXTURES.get(sample.fixture, ""),
    "placeholders": ", ".join(f"{{{{{n}}}}}" for n in knobs.PLACEHOLDERS[sample.verifier])
    or "none for this verifier kind",
  }
  values["fixture_recipe"] = string.Template(fixtures.RECIPES[sample.fixture]).substitute(values)
  system = string.Template((PROMPTS / "system.txt").read_text()).substitute(values)
  user = string.Template((PROMPTS / "user.txt").read_text()).substitute(values)
  return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def extract_json(reply: str) -> Any:
  """One JSON object: the whole reply, or the single ```json fenced block in it."""
  text = reply.strip()
  fences = re.findall(r"```(?:json)?\s*\n(.*?)```", text, re.S)
  if len(fences) > 1:
    raise ReplyError(f"found {len(fences)} fenced blocks; expected exactly one JSON object")
  if fences:
    text = fences[0].strip()
  elif not text.startswith("{"):
    raise ReplyError("the reply does not start with '{' and has no ```json block")
  try:
    obj = json.loads(text)
  except json.JSONDecodeError as err:
    raise ReplyError(f"invalid JSON: {err}") from None
  if not isinstance(obj, dict):
    raise ReplyError(f"expected a JSON object, got {type(obj).__name__}")
  return obj


def check_str_map(obj: Any, field: str) -> dict[str, str]:
  if not isinstance(obj, dict) or not all(
    isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
  ):
    raise ReplyError(f"{field}: expected an object mapping file paths to string contents")
  for k in obj:
    if k.startswith("/") or ".." in k.split("/") or not k:
      raise ReplyError(f"{field}.{k}: expected a relative path inside the directory")
  return obj


def _verifier_tests(v: Mapping[str, Any], sample: AxisSample) -> dict[str, bytes]:
  if set(v) != {"kind", "params"} or not isinstance(v.get("params"), dict):
    raise ReplyError(
      f"verifier: expected exactly keys kind and params (an object), got {sorted(v)}"
    )
  if v["kind"] != sample.verifier:
    raise ReplyError(
      f"verifier.kind: expected {sample.verifier!r} (the sampled verifier), got {v['kind']!r}"
    )
  params = dict(v["params"])
  builder = getattr(V, sample.verifier)
  try:
    if sample.verifier == "metric_threshold":
      return builder(params.pop("metric"), params.pop("threshold"), workdir=WORKDIR, **params)
    return builder(workdir=WORKDIR, **params)
  except (TypeError, ValueError, KeyError) as err:
    raise ReplyError(f"verifier.params: {err}") from None


def _environment(env: Mapping[str, Any]) -> dict[str, bytes]:
  """The reply's environment -> environment/ files: seeds/ (copied into the workdir), build-context
  files (scripts the Dockerfile runs, docker-compose.yaml) and the Dockerfile."""
  extra = sorted(set(env) - set(ENVIRONMENT_KEYS))
  if extra:
    raise ReplyError(f"environment: unexpected keys {extra}; expected {list(ENVIRONMENT_KEYS)}")
  files = {
    f"seeds/{k}": v.encode()
    for k, v in check_str_map(env.get("seeds", {}), "environment.seeds").items()
  }
  for k, v in check_str_map(env.get("files", {}), "environment.files").items():
    if k == "Dockerfile" or k.split("/")[0] == "seeds":
      raise ReplyError(f"environment.files.{k}: the Dockerfile and seeds/ have their own keys")
    files[k] = v.encode()
  if "dockerfile" in env:
    if not isinstance(env["dockerfile"], str):
      raise ReplyError("environment.dockerfile: expected a string")
    files["Dockerfile"] = env["dockerfile"].encode()
  return files


def _tests_and_instruction(obj: Mapping[str, Any], sample: AxisSample) -> tuple[dict, str]:
  """The verifier's tests/ files and the instruction with its {{placeholders}} filled in."""
  tests = _verifier_tests(obj["verifier"], sample)
  try:
    knobs.check_placeholders(obj["instruction"], sample.verifier)
  except ValueError as err:
    raise ReplyError(f"instruction: {err}") from None
  spec = json.loads(tests["spec.json"])
  return tests, knobs.render(obj["instruction"], spec)


def parse_task_reply(reply: str, sample: AxisSample) -> tuple[Task, str]:
  """A model reply -> (Task, smoke test command). Raises ReplyError naming the field."""
  obj = extract_json(reply)
  missing = [k for k in REQUIRED if k not in obj]
  extra = sorted(set(obj) - set(REQUIRED) - {"timeouts"})
  if missing or extra:
    raise ReplyError(
      f"keys: missing {missing}, unexpected {extra}; expected exactly {sorted(REQUIRED)}"
    )
  for k, typ in REQUIRED.items():
    if not isinstance(obj[k], typ) or (typ is str and not obj[k].strip()):
      raise ReplyError(f"{k}: expected a non-empty {typ.__name__}, got {type(obj[k]).__name__}")
  if not SLUG.match(obj["name"]):
    raise ReplyError(f"name: expected a kebab-case slug, got {obj['name']!r}")
  if obj["difficulty"] not in DIFFICULTIES:
    raise ReplyError(f"difficulty: expected one of {DIFFICULTIES}, got {obj['difficulty']!r}")
  environment = _environment(obj["environment"])
  timeouts = obj.get("timeouts", {})
  if not isinstance(timeouts, dict) or any(
    k not in ("agent_sec", "verifier_sec") or not isinstance(v, (int, float)) or v <= 0
    for k, v in timeouts.items()
  ):
    raise ReplyError("timeouts: expected {agent_sec: number, verifier_sec: number}")
  tests, instruction = _tests_and_instruction(obj, sample)
  meta = {
    **{k: v for k, v in sample.to_json().items() if k not in ("seed", "index")},
    "difficulty": obj["difficulty"],
    "category": sample.domain,  # the eval runner's per-category table
    "generator": "tmax-llm",
  }
  config = TaskConfig(
    task=TaskInfo(name=obj["name"], keywords=(sample.domain, sample.skill_type)),
    metadata=meta,
    agent=AgentConfig(timeout_sec=float(timeouts.get("agent_sec", 900))),
    verifier=VerifierConfig(timeout_sec=float(timeouts.get("verifier_sec", 600))),
  )
  solve = obj["solution"] if obj["solution"].startswith("#!") else "#!/bin/bash\n" + obj["solution"]
  task = Task(
    instruction=instruction,
    config=config,
    environment=environment,
    tests=tests,
    solution={"solve.sh": solve.encode()},
  )
  return task, obj["smoke_test"]
