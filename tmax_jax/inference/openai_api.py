"""OpenAI-compatible HTTP API on the serving process: /v1/chat/completions, /v1/completions,
/v1/models (+ /health), on the same engine and driver as the gRPC Rollout service.

HTTP stack: aiohttp, served on the JetStream server's own asyncio loop (the one grpc.aio runs on),
so a request is the same `server.submit` call the Rollout service makes and its tokens arrive on
the same kind of channel; no second event loop, no thread per connection, SSE streaming and
client-disconnect cancellation come with it. Binds loopback by default. Request/response shapes
live in openai_chat.py; errors use OpenAI's {"error": {message, type, param, code}} shape with
400 (bad request), 404 (unknown model or path), 405, 413 (body too large), 503 (shutting down) and
500 (a bug).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import pathlib
import secrets
import threading
import time
from typing import Any

from aiohttp import web

from tmax_jax import cli, tokenizers
from tmax_jax.inference import compat, openai_chat
from tmax_jax.inference import driver as driver_lib
from tmax_jax.inference.openai_chat import APIError
from tmax_jax.models import registry

log = logging.getLogger(__name__)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclasses.dataclass(frozen=True)
class OpenAIConfig:
  """The HTTP API. port -1 = off, 0 = a free port."""

  port: int = -1  # -1 = no HTTP API, 0 = a free port
  host: str = compat.LOOPBACK  # where the HTTP API listens
  model_name: str = ""  # the id /v1/models lists and requests must name; "" = the model_type
  tokenizer: str = ""  # a registered tokenizer family or an HF tokenizer dir; "" = the model's
  tool_call_format: str = ""  # "" = the registered tokenizer spec's (formats/tool_calls.py)
  max_body_mb: int = 64  # largest request body accepted

  @property
  def enabled(self) -> bool:
    return self.port >= 0


def load_tokenizer(cfg: OpenAIConfig, model_type: str) -> tuple[Any, str]:
  """-> (HF tokenizer with a chat template, tool-call format) for the served model."""
  spec = None
  if cfg.tokenizer and pathlib.Path(cfg.tokenizer).is_dir():
    from transformers import AutoTokenizer  # noqa: PLC0415  (transformers: slow import)

    tok = AutoTokenizer.from_pretrained(cfg.tokenizer)
  else:
    spec = (
      registry.tokenizer_spec(cfg.tokenizer)
      if cfg.tokenizer
      else registry.tokenizer_for(model_type)
    )
    tok = tokenizers.load_tokenizer(spec.family)
  fmt = cfg.tool_call_format or (spec.tool_call_format if spec else "")
  if not fmt:
    raise ValueError(
      f"OpenAIConfig.tool_call_format: tokenizer {cfg.tokenizer!r} is a directory "
      "without a registered spec; name its tool-call syntax ('hermes' or 'xml')"
    )
  if not tok.chat_template:
    raise ValueError(f"OpenAIConfig.tokenizer {cfg.tokenizer!r} has no chat template")
  return tok, fmt


@web.middleware
async def _errors(request: web.Request, handler):
  try:
    return await handler(request)
  except APIError as e:
    return web.json_response(e.body(), status=e.status)
  except web.HTTPException as e:  # unknown path (404), wrong method (405), body too large (413)
    kind = "invalid_request_error" if e.status < 500 else "server_error"
    err = APIError(
      e.status,
      f"{request.method} {request.path}: {e.reason}",
      kind=kind,
      code="not_found" if e.status == 404 else None,
    )
    return web.json_response(err.body(), status=e.status)
  except Exception as e:
    log.exception("OpenAI API: %s %s failed", request.method, request.path)
    err = APIError(500, f"internal error: {type(e).__name__}: {e}", kind="server_error")
    return web.json_response(err.body(), status=500)


class OpenAIServer:
  """The HTTP API of one RolloutServer (its `submit`, engine and event loop)."""

  def __init__(self, cfg: OpenAIConfig, rollout_server, tokenizer, tool_format: str):
    self.cfg, self._server = cfg, rollout_server
    self._tok, self._fmt = tokenizer, tool_format
    self._encode_lock = threading.Lock()
    engine = rollout_server.engine
    self.model_name = cfg.model_name or engine.model_cfg.model_type
    self._max_len = engine.cfg.max_len
    self._max_prefill = engine.cfg.max_prefill_length
    # A chat or completion ends at the tokenizer's end of turn whatever the engine's default stop
    # ids are (a served checkpoint may have none configured), as OpenAI-compatible servers do.
    self._stop_ids = (tokenizer.eos_token_id,) if tokenizer.eos_token_id is not None else ()
    self._max_topk = getattr(engine.cfg, "max_topk", 0)
    self._created = int(time.time())
    self._runner: web.AppRunner | None = None
    self.port = cfg.port

  @property
  def base_url(self) -> str:
    return f"http://{self.cfg.host}:{self.port}/v1"

  def app(self) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=self.cfg.max_body_mb << 20)
    app.add_routes(
      [
        web.get("/v1/models", self._models),
        web.get("/v1/models/{model}", self._model),
        web.post("/v1/chat/completions", self._chat),
        web.post("/v1/completions", self._completions),
        web.get("/health", self._health),
      ]
    )
    return app

  async def start(self) -> None:
    """Call on the server's event loop."""
    self._runner = web.AppRunner(
      self.app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0
    )
    await self._runner.setup()
    site = web.TCPSite(self._runner, self.cfg.host, self.cfg.port or 0, reuse_address=True)
    try:
      await site.start()
    except OSError:
      await self.stop()
      # A UserError naming the port when it is taken (or the host is not an address here).
      cli.check_port_free("OpenAIConfig.port", self.cfg.host, self.cfg.port)
      raise
    self.port = self._runner.addresses[0][1]  # the bound port (cfg.port 0: the OS picked it)
    log.info("OpenAI API on %s (model %r)", self.base_url, self.model_name)

  async def stop(self) -> None:
    if self._runner is not None:
      await self._runner.cleanup()
      self._runner = None

  # ---- small routes --------------------------------------------------------------------------

  def _card(self) -> dict:
    return {
      "id": self.model_name,
      "object": "model",
      "created": self._created,
      "owned_by": "tmax_jax",
      "max_model_len": self._max_len,
    }

  async def _models(self, request: web.Request) -> web.Response:
    del request
    return web.json_response({"object": "list", "data": [self._card()]})

  async def _model(self, request: web.Request) -> web.Response:
    self._check_model(request.match_info["model"])
    return web.json_response(self._card())

  async def _health(self, request: web.Request) -> web.Response:
    del request
    live = self._server.driver.live
    return web.json_response(
      {"live": live, "version": self._server.driver.version}, status=200 if live else 503
    )

  def _check_model(self, name: Any) -> None:
    if name != self.model_name:
      raise APIError(
        404,
        f"The model `{name}` does not exist; this server serves `{self.model_name}`",
        param="model",
        code="model_not_found",
      )

  async def _body(self, request: web.Request) -> dict:
    try:
      body = await request.json()
    except json.JSONDecodeError as e:
      raise APIError(400, f"the request body is not JSON: {e}") from e
    if not isinstance(body, dict):
      raise APIError(400, "the request body must be a JSON object")
    self._check_model(body.get("model"))
    return body

  # ---- generation ----------------------------------------------------------------------------

  async def _chat(self, request: web.Request) -> web.StreamResponse:
    body = await self._body(request)
    req = await self._parse(openai_chat.chat_request, body)
    return await self._generate(request, req, chat=True)

  async def _completions(self, request: web.Request) -> web.StreamResponse:
    body = await self._body(request)
    req = await self._parse(openai_chat.completion_request, body)
    if req.stream and req.logprobs:
      raise openai_chat.bad("logprobs", "not supported with stream=true on /v1/completions")
    return await self._generate(request, req, chat=False)

  async def _parse(self, parse_fn, body: dict) -> openai_chat.GenRequest:
    """Renders and tokenises off the event loop (a long conversation takes ms, and the gRPC
    streams share the loop), one request at a time: encoding may reconfigure the HF tokenizer,
    which is not safe from two threads at once."""

    def run():
      with self._encode_lock:
        return parse_fn(body, self._tok, self._max_len, self._max_topk)

    return await asyncio.get_running_loop().run_in_executor(None, run)

  def _check_context(self, req: openai_chat.GenRequest) -> None:
    """A prompt (+ max_tokens) the model cannot hold is OpenAI's context_length_exceeded, in its
    words, which clients (litellm, the openai package) map to their context-window errors."""
    n, total = len(req.prompt_ids), len(req.prompt_ids) + req.max_tokens
    if total <= self._max_len and n <= self._max_prefill:
      return
    over = "" if n <= self._max_prefill else f"; prompts hold at most {self._max_prefill} tokens"
    raise APIError(
      400,
      f"This model's maximum context length is {self._max_len} tokens. However, you requested "
      f"{total} tokens ({n} in the messages, {req.max_tokens} in the completion){over}. Please "
      "reduce the length of the messages or completion.",
      param="messages",
      code="context_length_exceeded",
    )

  def _open(self, req: openai_chat.GenRequest) -> list:
    self._check_context(req)
    channels = []
    try:
      for i in range(req.n):
        channels.append(
          self._server.submit(
            req.prompt_ids,
            req.max_tokens,
            req.sampling_params(i),
            stop_ids=self._stop_ids,
            top_logprobs=req.top_logprobs,
          )
        )
    except ValueError as e:
      for channel in channels:
        channel.cancel()
      raise APIError(400, str(e)) from e
    return channels

  async def _generate(self, request, req: openai_chat.GenRequest, chat: bool):
    choices = [openai_chat.Choice(i, req, self._tok, self._fmt) for i in range(req.n)]
    channels = self._open(req)
    meta = {
      "id": f"{'chatcmpl' if chat else 'cmpl'}-{secrets.token_hex(12)}",
      "created": int(time.time()),
      "model": self.model_name,
      "system_fingerprint": f"tmax_jax-policy-v{self._server.driver.version}",
    }
    try:
      if req.stream:
        return await self._stream(request, req, choices, channels, meta, chat)
      await asyncio.gather(*(self._drain(ch, c) for ch, c in zip(channels, choices, strict=True)))
      return web.json_response(self._final(req, choices, meta, chat))
    finally:
      for channel in channels:
        if not channel.done():
          channel.cancel()  # a stop string ended it early, or the client went away

  async def _drain(self, channel, choice: openai_chat.Choice, queue=None) -> None:
    """Feeds `choice` from its channel until it is complete (optionally announcing each step)."""
    try:
      async for step in channel:
        top = (step.topk_ids, step.topk_logprobs) if choice.req.top_logprobs else ((), ())
        done = choice.add(step.token_id, step.logprob, step.finish_reason, *top)
        if queue is not None:
          queue.put_nowait((choice, done))
        if done:
          return
    except driver_lib.ServerShutdown as e:
      raise APIError(503, str(e), kind="server_error", code="server_shutting_down") from e
    if choice.finish is None:
      raise APIError(
        503, "the generation stream ended without a finish reason", kind="server_error"
      )

  def _usage(self, req, choices) -> dict:
    completion = sum(c.generated for c in choices)
    return {
      "prompt_tokens": len(req.prompt_ids),
      "completion_tokens": completion,
      "total_tokens": len(req.prompt_ids) + completion,
    }

  def _final(self, req, choices, meta, chat: bool) -> dict:
    if chat:
      out = [
        {
          "index": c.index,
          "message": c.message(),
          "logprobs": c.chat_logprobs(),
          "finish_reason": c.finish_reason(),
        }
        for c in choices
      ]
    else:
      out = [
        {
          "index": c.index,
          "text": req.echo + c.text,
          "logprobs": c.completion_logprobs(),
          "finish_reason": c.finish_reason(),
        }
        for c in choices
      ]
    return {
      **meta,
      "object": "chat.completion" if chat else "text_completion",
      "choices": out,
      "usage": self._usage(req, choices),
    }

  async def _stream(self, request, req, choices, channels, meta, chat: bool):
    resp = web.StreamResponse(headers=SSE_HEADERS)
    await resp.prepare(request)
    head = {**meta, "object": "chat.completion.chunk" if chat else "text_completion"}

    async def send(payload: dict) -> None:
      await resp.write(f"data: {json.dumps(payload)}\n\n".encode())

    for payload in _opening_chunks(req, choices, head, chat):
      await send(payload)
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(channel, choice):
      try:
        await self._drain(channel, choice, queue)
      except Exception as e:  # re-raised below
        queue.put_nowait((choice, e))

    tasks = [asyncio.ensure_future(pump(ch, c)) for ch, c in zip(channels, choices, strict=True)]
    try:
      pending = len(tasks)
      while pending:
        choice, done = await queue.get()
        if isinstance(done, Exception):
          raise done
        chunk = _stream_chunk(req, choice, done, head, chat)
        if chunk is not None:
          await send(chunk)
        pending -= int(done)
      if req.include_usage:
        await send({**head, "choices": [], "usage": self._usage(req, choices)})
      await resp.write(b"data: [DONE]\n\n")
    except APIError as e:  # headers are sent: the error goes in the stream, as OpenAI does
      await send(e.body())
    finally:
      for t in tasks:
        t.cancel()
    await resp.write_eof()
    return resp


def _opening_chunks(req, choices, head: dict, chat: bool) -> list[dict]:
  """The chunks a stream starts with: each choice's assistant role (chat), then each choice's
  echoed prompt (completions with echo)."""
  out = []
  if chat:
    role = {"role": "assistant", "content": ""}
    out += [
      {
        **head,
        "choices": [
          {"index": c.index, "delta": dict(role), "logprobs": None, "finish_reason": None}
        ],
      }
      for c in choices
    ]
  if req.echo:
    out += [
      {
        **head,
        "choices": [{"index": c.index, "text": req.echo, "logprobs": None, "finish_reason": None}],
      }
      for c in choices
    ]
  return out


def _stream_chunk(req, choice, done: bool, head: dict, chat: bool) -> dict | None:
  """The chunk with what `choice` produced since the last one; None when there is nothing new."""
  if chat:
    delta, tokens = choice.chat_delta(final=done)
    if not (delta or tokens or done):
      return None
    body = {
      "index": choice.index,
      "delta": delta,
      "logprobs": choice.chat_logprobs(tokens) if req.logprobs else None,
    }
  else:
    text = choice.text_delta(final=done)
    if not (text or done):
      return None
    body = {"index": choice.index, "text": text, "logprobs": None}
  body["finish_reason"] = choice.finish_reason() if done else None
  return {**head, "choices": [body]}
