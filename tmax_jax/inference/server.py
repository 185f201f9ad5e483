"""Serving: JetStream's gRPC server + orchestrator with our engine, plus the `tmax_rl.Rollout`
service.

`start_server` follows `jetstream.core.server_lib.run` step for step (engines from a
`config_lib.ServerConfig`, params from `load_params`, a Driver, a `JetStreamServer`), with three
differences that `server_lib.run` has no hook for: the Driver is our `RLDriver`, the Rollout
service (rl_proto.py) is added to the same grpc.aio server before it starts, and that server does
not share its port (GRPC_OPTIONS: a taken port is a UserError, not a second server beside the
first). JetStream's own `Orchestrator.Decode` / `HealthCheck` stay available on the same port.
Binds 127.0.0.1 by default.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import grpc

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.inference import compat

compat.apply()

from jetstream.core import orchestrator, server_lib
from jetstream.core.proto import jetstream_pb2_grpc

from tmax_jax.inference import channel as channel_lib
from tmax_jax.inference import driver as driver_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import openai_api, rl_proto, sampling, updates

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
  """Where to listen. port 0 = pick a free port; host '[::]'/'0.0.0.0' opt into all interfaces."""

  port: int = 9000
  host: str = compat.LOOPBACK
  threads: int = 0  # gRPC worker threads; 0 = max(64, slots) like server_lib.run
  openai: openai_api.OpenAIConfig = openai_api.OpenAIConfig()  # the HTTP API (off by default)


def free_port(host: str = compat.LOOPBACK) -> int:
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def validate(
  engine: engine_lib.TmaxEngine, prompt_ids: Sequence[int], max_tokens: int, top_logprobs: int = 0
) -> str:
  """ "" if a token-id request fits the engine, else what is wrong with it."""
  cfg, vocab = engine.cfg, engine.model_cfg.vocab_size
  n = len(prompt_ids)
  if n < 1:
    return "the prompt is empty"
  if max_tokens < 1:
    return f"max_tokens must be >= 1, got {max_tokens}"
  too_long = context_too_long(cfg, n, max_tokens)
  if too_long:
    return too_long
  if not 0 <= top_logprobs <= cfg.max_topk:
    return (
      f"top_logprobs={top_logprobs} must be in [0, max_topk={cfg.max_topk}] "
      "(EngineConfig.max_topk of this server)"
    )
  bad = [t for t in prompt_ids if not 0 <= t < vocab]
  if bad:
    return f"prompt token ids {bad[:5]} outside the vocabulary [0, {vocab})"
  return ""


def context_too_long(cfg: engine_lib.EngineConfig, n: int, max_tokens: int) -> str:
  """ "" if a prompt of `n` tokens and `max_tokens` more fit the engine's lengths, else why not."""
  if n > cfg.max_prefill_length:
    return f"prompt of {n} tokens exceeds max_prefill_length={cfg.max_prefill_length}"
  if n + max_tokens > cfg.max_len:
    return f"prompt {n} + max_tokens {max_tokens} exceeds max_len={cfg.max_len}"
  return ""


class ContextTooLong(ValueError):
  """A request longer than the engine's max_prefill_length / max_len: the Rollout service answers
  OUT_OF_RANGE (the client's ContextTooLongError: the prompt's fault, never retried)."""


def submit(
  driver: driver_lib.RLDriver,
  engine: engine_lib.TmaxEngine,
  prompt_ids: Sequence[int],
  max_tokens: int,
  params: sampling.SamplingParams,
  stop_ids: Sequence[int] = (),
  top_logprobs: int = 0,
) -> channel_lib.StepChannel:
  """Validates and queues one token-id request (call on the server's event loop): its
  `driver.RLStep`s arrive on the returned channel; cancelling the channel ends the request.
  ValueError says what is wrong with a request that does not fit. Used by the Rollout service and
  the OpenAI API alike."""
  error = validate(engine, prompt_ids, max_tokens, top_logprobs)
  if error:
    too_long = error == context_too_long(engine.cfg, len(prompt_ids), max_tokens)
    raise (ContextTooLong if too_long else ValueError)(error)
  channel = channel_lib.StepChannel()
  driver.place_request_on_prefill_queue(
    driver_lib.RLActiveRequest(
      max_tokens=max_tokens,
      return_channel=channel,
      prefill_content=list(prompt_ids),
      is_client_side_tokenization=True,
      sampling_params=params,
      top_logprobs=top_logprobs,
      stop_ids=frozenset(stop_ids) | frozenset(engine.cfg.stop_token_ids),
    )
  )
  return channel


def _response(steps: list, instance_id: str) -> rl_proto.GenerateResponse:
  """One GenerateResponse carrying `steps` (driver.RLStep; the last may be the finish without a
  token)."""
  tokens = [s for s in steps if s.token_id is not None]
  return rl_proto.GenerateResponse(
    token_ids=[s.token_id for s in tokens],
    logprobs=[s.logprob for s in tokens],
    policy_versions=[s.version for s in tokens],
    finish_reason=steps[-1].finish_reason,
    topk_ids=[i for s in steps for i in s.topk_ids],
    topk_logprobs=[x for s in steps for x in s.topk_logprobs],
    instance_id=instance_id,
  )


class RolloutServicer:
  """Async handlers of tmax_rl.Rollout, bound to one RLDriver."""

  def __init__(self, driver: driver_lib.RLDriver, engine: engine_lib.TmaxEngine, instance_id: str):
    self._driver, self._engine, self._instance = driver, engine, instance_id
    self._push_lock = asyncio.Lock()  # one staged copy of the weights at a time

  async def Generate(self, req, context):
    try:
      sp = sampling.SamplingParams(
        temperature=req.temperature, top_p=req.top_p or 1.0, top_k=req.top_k, seed=req.seed
      )
      channel = submit(
        self._driver,
        self._engine,
        req.prompt_token_ids,
        req.max_tokens,
        sp,
        req.stop_token_ids,
        req.top_logprobs,
      )
    except ContextTooLong as e:
      await context.abort(grpc.StatusCode.OUT_OF_RANGE, str(e))
    except ValueError as e:
      await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
    context.add_done_callback(channel.cancel)
    first = True
    try:
      async for step in channel:
        yield _response([step, *channel.take_ready()], self._instance if first else "")
        first = False
    except driver_lib.ServerShutdown as e:
      await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

  async def UpdateWeights(self, request_iterator, context):
    """A per-tensor stream or a server-side path (protocol in updates.py); one push at a time."""
    start = time.perf_counter()
    async with self._push_lock:
      try:
        version, nbytes = await self._receive_weights(request_iterator)
      except updates.WeightUpdateError as e:
        log.warning("weight update refused: %s", e)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
    return rl_proto.UpdateWeightsResponse(
      version=version, seconds=time.perf_counter() - start, bytes=nbytes, instance_id=self._instance
    )

  async def _receive_weights(self, request_iterator) -> tuple[int, int]:
    loop = asyncio.get_running_loop()
    served = self._driver.served_params()
    assembler = updates.TensorStreamAssembler(served)
    version, path, nbytes, replace = None, "", 0, False
    async for msg in request_iterator:
      if version is None:
        version, replace = msg.version, msg.replace
        if version < self._driver.version and not replace:  # refuse before any data moves
          raise updates.WeightUpdateError(
            f"weight version {version} is older than the served version {self._driver.version}"
          )
      if msg.path:
        path = msg.path
      elif msg.manifest:
        assembler.start([updates.TensorSpec(m.name, tuple(m.shape), m.dtype) for m in msg.manifest])
      else:
        nbytes += len(msg.data)
        await loop.run_in_executor(
          None, assembler.chunk, msg.tensor, msg.offset, msg.data, msg.crc32
        )
    if path:
      new = await loop.run_in_executor(
        None, updates.from_path, path, served, self._engine.model_cfg
      )
    else:
      new = assembler.finish()
    self._driver.update_weights(new, int(version or 0), replace=replace)
    return self._driver.version, nbytes

  async def Status(self, req, context):
    del req, context
    engine = self._engine
    cfg, st = engine.cfg, engine.status()
    return rl_proto.StatusResponse(
      live=self._driver.live,
      version=engine.version,
      max_concurrent_decodes=cfg.max_concurrent_decodes,
      max_len=cfg.max_len,
      model_type=engine.model_cfg.model_type,
      active_requests=st["active"],
      replicas=len(engine.replicas),
      page_size=cfg.page_size,
      max_topk=cfg.max_topk,
      pages_total=st["pages_total"],
      pages_used=st["pages_used"],
      pages_free=st["pages_free"],
      pages_cached=st["pages_cached"],
      waiting_requests=st["waiting"] + st["prefilling"],
      prefill_tokens=st["prefill_tokens"],
      cached_prompt_tokens=st["cached_tokens"],
      instance_id=self._instance,
    )

  def generic_handler(self) -> grpc.GenericRpcHandler:
    kinds = {
      (False, True): grpc.unary_stream_rpc_method_handler,
      (True, False): grpc.stream_unary_rpc_method_handler,
      (False, False): grpc.unary_unary_rpc_method_handler,
    }
    handlers = {}
    for name, (_, _, cstream, sstream) in rl_proto.METHODS.items():
      handlers[name] = kinds[(cstream, sstream)](
        getattr(self, name),
        request_deserializer=rl_proto.request_class(name).FromString,
        response_serializer=lambda m: m.SerializeToString(),
      )
    return grpc.method_handlers_generic_handler(rl_proto.SERVICE, handlers)


# gRPC sets SO_REUSEPORT by default: a second server on a port already served would bind beside
# the first, and clients' requests (and weight pushes) would be split between two models. Without
# it the second bind fails, and a server of ours is never joined by another either.
GRPC_OPTIONS = (("grpc.so_reuseport", 0),)


class RolloutServer(server_lib.JetStreamServer):
  """JetStreamServer + the Rollout service, bound to `host`, alone on its port."""

  def __init__(self, driver, engine, threads: int, port: int, host: str):
    # JetStreamServer.__init__'s steps, with server options (GRPC_OPTIONS), which it has no hook
    # for, and the host passed in (compat.bind_host is not needed).
    self._executor = futures.ThreadPoolExecutor(max_workers=threads)
    self._loop = asyncio.new_event_loop()
    self._loop.set_default_executor(self._executor)
    self._loop_thread = threading.Thread(target=self._loop.run_forever)
    self._loop_thread.start()
    self._driver = driver
    try:
      port = asyncio.run_coroutine_threadsafe(self._bind(host, port), self._loop).result()
    except RuntimeError as e:  # grpc: "Failed to bind to address ..."
      self._stop_loop()
      cli.check_port_free("ServerConfig.port", host, port)  # says why: in use, no such address
      raise UserError(f"ServerConfig.port={port}: gRPC cannot listen on {host}:{port} ({e})") from e
    self.port, self.host, self.driver, self.engine = port, host, driver, engine
    self.instance_id = secrets.token_hex(8)  # clients tell a restarted server by a new one
    self.openai: openai_api.OpenAIServer | None = None
    self._grpc_server.add_generic_rpc_handlers(
      (RolloutServicer(driver, engine, self.instance_id).generic_handler(),)
    )

  async def _bind(self, host: str, port: int) -> int:
    """Builds the grpc.aio server (on the loop, as JetStream does) and binds `host:port` (0: a
    free port, chosen by the bind itself); -> the bound port."""
    self._grpc_server = grpc.aio.server(self._executor, options=GRPC_OPTIONS)
    jetstream_pb2_grpc.add_OrchestratorServicer_to_server(
      orchestrator.LLMOrchestrator(driver=self._driver), self._grpc_server
    )
    return self._grpc_server.add_secure_port(f"{host}:{port}", grpc.insecure_server_credentials())

  def _stop_loop(self) -> None:
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._loop_thread.join()
    self._executor.shutdown(wait=False)

  @property
  def address(self) -> str:
    return f"{self.host}:{self.port}"

  def submit(
    self,
    prompt_ids: Sequence[int],
    max_tokens: int,
    params: sampling.SamplingParams,
    stop_ids: Sequence[int] = (),
    top_logprobs: int = 0,
  ):
    """`submit` on this server's driver and engine (call on its event loop)."""
    return submit(self.driver, self.engine, prompt_ids, max_tokens, params, stop_ids, top_logprobs)

  def start_openai(self, cfg: openai_api.OpenAIConfig) -> openai_api.OpenAIServer:
    """Serves the OpenAI HTTP API on this server's event loop, engine and driver."""
    tok, fmt = openai_api.load_tokenizer(cfg, self.engine.model_cfg.model_type)
    check_vocabulary(len(tok), self.engine.model_cfg.vocab_size)
    self.openai = openai_api.OpenAIServer(cfg, self, tok, fmt)
    asyncio.run_coroutine_threadsafe(self.openai.start(), self._loop).result()
    return self.openai

  def stop(self) -> None:
    if self.openai is not None:  # close HTTP first: its open requests are cancelled cleanly
      asyncio.run_coroutine_threadsafe(self.openai.stop(), self._loop).result()
      self.openai = None
    super().stop()

  def push_weights(self, params: Any, version: int) -> None:
    """In-process weight update (a trainer sharing the process skips gRPC). Params already on
    device in `engine.param_shardings()` are swapped in without a host round trip."""
    updates.check_tree(params, self.engine.served_params())
    self.engine.swap(params, version)


def check_vocabulary(tokenizer_size: int, vocab_size: int) -> None:
  """The OpenAI API tokenizes chats with the model family's tokenizer: a model whose vocabulary
  is smaller (e.g. a tiny random model with vocab_size=256) would reject every request's template
  tokens, so the server refuses to start instead."""
  if tokenizer_size > vocab_size:
    raise UserError(
      f"the OpenAI API needs a model that covers its tokenizer's {tokenizer_size} ids, but the "
      f"model's vocab_size is {vocab_size}: serve a checkpoint (model.checkpoint) or a preset\n"
      "without a smaller vocab_size override, or leave openai.port unset (gRPC only)"
    )


def start_server(
  engine: engine_lib.TmaxEngine, cfg: ServerConfig = ServerConfig()
) -> RolloutServer:
  """Builds the orchestrator around `engine` (one scheduler per replica) and starts serving."""
  driver = driver_lib.RLDriver(engine)
  threads = cfg.threads or max(driver.get_total_concurrent_requests(), 64)
  try:
    server = RolloutServer(driver, engine, threads, cfg.port, cfg.host)
  except Exception:
    driver.stop()  # its threads would keep the process alive
    raise
  server.start()
  log.info(
    "serving %s on %s (%d replicas x %d slots)",
    engine.model_cfg.model_type,
    server.address,
    len(engine.replicas),
    engine.cfg.max_concurrent_decodes,
  )
  if cfg.openai.enabled:
    try:
      server.start_openai(cfg.openai)
    except Exception:
      server.stop()
      raise
  return server
