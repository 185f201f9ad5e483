"""Task writing by an LLM through any OpenAI-compatible chat endpoint (standard library HTTP only).

`ChatClient` POSTs {base_url}/chat/completions. `render_prompt` fills prompts/{system,user}.txt from
an AxisSample. `parse_task_reply` is strict: the reply must be exactly one JSON object (bare or in
one ```json fence) with exactly the documented keys and types, and its verifier kind must be the
sampled one; anything else raises ReplyError, whose message is fed back to the model on retry.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import string
import urllib.error
import urllib.request
from typing import Any, Mapping, Sequence

from tmax_jax.tasks import verifiers as V
from tmax_jax.tasks import vocabulary
from tmax_jax.tasks.format import AgentConfig, Task, TaskConfig, TaskInfo, VerifierConfig
from tmax_jax.tasks.generator.axes import AxisSample

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
DIFFICULTIES = ("easy", "medium", "hard")
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")


class ReplyError(ValueError):
  """The model's reply is not a usable task; the message says what to fix."""


class ChatError(RuntimeError):
  """The endpoint could not be reached or answered with an error."""


@dataclasses.dataclass(frozen=True)
class ChatConfig:
  base_url: str  # e.g. http://127.0.0.1:8000/v1
  model: str
  api_key: str | None = None
  temperature: float = 0.7
  max_tokens: int = 8192
  timeout_s: float = 300.0


class ChatClient:
  """Minimal OpenAI-compatible chat client (urllib)."""

  def __init__(self, config: ChatConfig):
    self.config = config

  def complete(self, messages: Sequence[Mapping[str, str]], max_tokens: int | None = None) -> str:
    """The reply text; `max_tokens` caps this call below the configured limit."""
    c = self.config
    limit = c.max_tokens if max_tokens is None else min(c.max_tokens, max_tokens)
    body = json.dumps(
      {
        "model": c.model,
        "messages": list(messages),
        "temperature": c.temperature,
        "max_tokens": limit,
      }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if c.api_key:
      headers["Authorization"] = f"Bearer {c.api_key}"
    req = urllib.request.Request(
      c.base_url.rstrip("/") + "/chat/completions", data=body, headers=headers
    )
    try:
      with urllib.request.urlopen(req, timeout=c.timeout_s) as resp:
        data = json.loads(resp.read().decode())
    except urllib.error.HTTPError as err:
      raise ChatError(f"{req.full_url}: HTTP {err.code}: {err.read()[:300]!r}") from None
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as err:
      raise ChatError(f"{req.full_url}: {err}") from None
    try:
      content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
      raise ChatError(
        f"{req.full_url}: no choices[0].message.content in {str(data)[:300]}"
      ) from None
    if not isinstance(content, str):
      raise ChatError(
        f"{req.full_url}: message content is {type(content).__name__}, expected a string"
      )
    return content


def render_prompt(sample: AxisSample) -> list[dict[str, str]]:
  """The chat messages for one axis sample."""
  values = {
    **sample.to_json(),
    "primitive_skills": "; ".join(sample.primitive_skills),
    "workdir": WORKDIR,
    "complexity_hint": vocabulary.TASK_COMPLEXITY.get(sample.task_complexity, ""),
    "fixture_hint": vocabulary.FIXTURES.get(sample.fixture, ""),
  }
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
  env = obj["environment"]
  if set(env) - {"seeds", "dockerfile"}:
    raise ReplyError(f"environment: unexpected keys {sorted(set(env) - {'seeds', 'dockerfile'})}")
  environment = {
    f"seeds/{k}": v.encode()
    for k, v in check_str_map(env.get("seeds", {}), "environment.seeds").items()
  }
  if "dockerfile" in env:
    if not isinstance(env["dockerfile"], str):
      raise ReplyError("environment.dockerfile: expected a string")
    environment["Dockerfile"] = env["dockerfile"].encode()
  timeouts = obj.get("timeouts", {})
  if not isinstance(timeouts, dict) or any(
    k not in ("agent_sec", "verifier_sec") or not isinstance(v, (int, float)) or v <= 0
    for k, v in timeouts.items()
  ):
    raise ReplyError("timeouts: expected {agent_sec: number, verifier_sec: number}")
  tests = _verifier_tests(obj["verifier"], sample)
  meta = {
    **{k: v for k, v in sample.to_json().items() if k not in ("seed", "index")},
    "difficulty": obj["difficulty"],
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
    instruction=obj["instruction"],
    config=config,
    environment=environment,
    tests=tests,
    solution={"solve.sh": solve.encode()},
  )
  return task, obj["smoke_test"]
