"""A scripted OpenAI-compatible endpoint on loopback for dry runs, tests and the pipeline bench.

`ScriptedEndpoint` serves GET /v1/models and POST /v1/chat/completions (aiohttp, its own thread
and event loop) and answers each chat request with what `respond(body)` returns: an `Answer`
(content, an HTTP error status with retry-after-ms, a delay past the client's timeout, or a
malformed body) or a plain string.
`ScriptedWriter` answers the pipeline's writer prompt with a task of the sampled verifier kind
and fixture (templates.py), following a per-sample script of steps (variants and faults);
`ScriptedPolicy` plays such tasks through the harness's tool calls: per episode (the request's
`seed`) it runs the template's solution with probability `p_good`, else its near miss.
`route` sends writer prompts to the writer and everything else to the policy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence

from aiohttp import web

from tmax_jax.pipeline import templates
from tmax_jax.tasks.generator.llm import render_prompt

WRITER_MARK = "You write terminal tasks"  # first words of the writer's system prompt


@dataclasses.dataclass(frozen=True)
class Answer:
  """One scripted answer: `content` (after `delay_s`), or HTTP `status` (retry-after-ms set), or
  a 200 whose raw `body` is given (e.g. not JSON)."""

  content: str | None = None
  status: int = 0
  delay_s: float = 0.0
  body: bytes | None = None
  retry_after_ms: int = 10


Respond = Callable[[dict], "Answer | str"]


def _completion(model: str, content: str) -> dict:
  return {
    "id": "scripted",
    "object": "chat.completion",
    "created": 0,
    "model": model,
    "choices": [
      {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": content},
      }
    ],
    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
  }


class ScriptedEndpoint:
  """`with ScriptedEndpoint(respond) as ep: ep.base_url`; `ep.requests` logs every chat body.
  With `api_key`, a request without `Authorization: Bearer <api_key>` is answered 401."""

  def __init__(self, respond: Respond, model: str = "scripted", api_key: str | None = None):
    self.respond, self.model, self.api_key = respond, model, api_key
    self.requests: list[dict] = []
    self._lock = threading.Lock()
    self._loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
    self.base_url = ""

  def _refused(self, request: web.Request) -> web.Response | None:
    """OpenAI's 401 answer when the request lacks the key, else None."""
    if self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}":
      return None
    error = {"message": "Incorrect API key provided", "type": "invalid_request_error"}
    return web.json_response({"error": {**error, "code": "invalid_api_key"}}, status=401)

  async def _models(self, request: web.Request) -> web.Response:
    if refused := self._refused(request):
      return refused
    return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

  async def _chat(self, request: web.Request) -> web.Response:
    if refused := self._refused(request):
      return refused
    body = await request.json()
    with self._lock:
      self.requests.append(body)
    answer = self.respond(body)
    answer = Answer(content=answer) if isinstance(answer, str) else answer
    if answer.delay_s:
      await asyncio.sleep(answer.delay_s)
    if answer.status:
      return web.Response(
        status=answer.status, headers={"retry-after-ms": str(answer.retry_after_ms)}
      )
    if answer.body is not None:
      return web.Response(body=answer.body, content_type="application/json")
    return web.json_response(_completion(body.get("model", self.model), answer.content or ""))

  async def _start(self) -> int:
    app = web.Application()
    app.router.add_get("/v1/models", self._models)
    app.router.add_post("/v1/chat/completions", self._chat)
    self._runner = web.AppRunner(app)
    await self._runner.setup()
    site = web.TCPSite(self._runner, "127.0.0.1", 0)
    await site.start()
    return site._server.sockets[0].getsockname()[1]

  def __enter__(self) -> ScriptedEndpoint:
    self._thread.start()
    port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
    self.base_url = f"http://127.0.0.1:{port}/v1"
    return self

  def __exit__(self, *exc) -> None:
    asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join(30)


def first_user(body: Mapping) -> str:
  return next((m["content"] for m in body["messages"] if m["role"] == "user"), "")


def prompt_axes(prompt: str) -> dict[str, str]:
  """The sampled axes named in the writer's user prompt ("- fixture: image (...)")."""
  found = dict(re.findall(r"^- (verifier kind|fixture|domain): (\S+)", prompt, re.M))
  return {"verifier": found.get("verifier kind", ""), **found}


class ScriptedWriter:
  """Answers writer prompts. `script(user_prompt)` -> the steps of that sample, used one per
  request (the last repeats): a variant name of templates.VARIANTS or an Answer (a fault).
  `latency_s` delays every successful answer (a real writer's generation time); `unique_builds`
  gives every task an image layer of its own (templates.task_reply build_tag)."""

  def __init__(
    self,
    script: Callable[[str], Sequence] = lambda prompt: ["ok"],
    latency_s: float = 0.0,
    unique_builds: bool = False,
  ):
    self.script, self.latency_s, self.unique_builds = script, latency_s, unique_builds
    self.calls: dict[str, int] = {}
    self._lock = threading.Lock()

  def __call__(self, body: dict) -> Answer:
    prompt = first_user(body)
    with self._lock:
      n = self.calls[prompt] = self.calls.get(prompt, 0) + 1
    steps = list(self.script(prompt)) or ["ok"]
    step = steps[min(n, len(steps)) - 1]
    if isinstance(step, Answer):
      return step
    axes = prompt_axes(prompt)
    tag = hashlib.sha256(prompt.encode()).hexdigest()[:16] if self.unique_builds else ""
    reply = templates.task_reply(axes["verifier"], axes.get("fixture", "text_only"), step, tag)
    return Answer(content=reply, delay_s=self.latency_s)


class ScriptedPolicy:
  """Plays templates' tasks through `harness` tool calls: the solution (probability `p_good`,
  decided by random.Random(request seed)) or the template's near miss, then submits."""

  def __init__(self, tokenizer, episode_cfg, p_good: float = 0.5):
    # agents needs jax; the rest of the pipeline runs without it
    from tmax_jax.agents import harnesses  # noqa: PLC0415

    self.tok, self.cfg, self.p_good = tokenizer, episode_cfg, p_good
    self.harness = harnesses.get(episode_cfg.harness)

  def good(self, seed: int) -> bool:
    """Whether the episode with this request seed plays the solution (else the near miss)."""
    return random.Random(seed).random() < self.p_good

  def __call__(self, body: dict) -> str:
    instruction = first_user(body)
    turns = sum(m["role"] == "assistant" for m in body["messages"])
    if turns > 0:
      return self.harness.submit_text(self.tok, self.cfg)
    script = templates.policy_script(instruction, self.good(body.get("seed", 0)))
    return self.harness.script_step(self.tok, script, 0, self.cfg, 0.5).text


def route(writer: Respond, policy: Respond | None = None) -> Respond:
  """Writer prompts to `writer`, everything else to `policy`."""

  def respond(body: dict):
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    if system.startswith(WRITER_MARK) or policy is None:
      return writer(body)
    return policy(body)

  return respond


def sample_key(sample) -> str:
  """The writer's user prompt of an axis sample (what ScriptedWriter scripts are keyed by)."""
  return render_prompt(sample)[1]["content"]
