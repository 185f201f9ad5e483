"""Serving: JetStream's gRPC server + orchestrator with our engine, plus the `tmax_rl.Rollout` service.

`start_server` follows `jetstream.core.server_lib.run` step for step (engines from a
`config_lib.ServerConfig`, params from `load_params`, a Driver, a `JetStreamServer`), with two
differences that `server_lib.run` has no hook for: the Driver is our `RLDriver`, and the Rollout
service (rl_proto.py) is added to the same grpc.aio server before it starts. JetStream's own
`Orchestrator.Decode` / `HealthCheck` stay available on the same port. Binds 127.0.0.1 by default.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
from typing import Any

import grpc

from tmax_jax.inference import compat

compat.apply()

# pylint: disable=wrong-import-position
from jetstream.core import config_lib, server_lib
from jetstream.core.utils import async_multifuture

from tmax_jax.inference import driver as driver_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import rl_proto, sampling, updates

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
  """Where to listen. port 0 = pick a free port; host '[::]'/'0.0.0.0' opt into all interfaces."""
  port: int = 9000
  host: str = compat.LOOPBACK
  threads: int = 0  # gRPC worker threads; 0 = max(64, slots) like server_lib.run


def free_port(host: str = compat.LOOPBACK) -> int:
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


class RolloutServicer:
  """Async handlers of tmax_rl.Rollout, bound to one RLDriver."""

  def __init__(self, driver: driver_lib.RLDriver, engine: engine_lib.TmaxEngine):
    self._driver, self._engine = driver, engine
    self._push_lock = asyncio.Lock()  # one staged copy of the weights at a time

  def _validate(self, req) -> str:
    cfg, vocab = self._engine.cfg, self._engine.model_cfg.vocab_size
    n = len(req.prompt_token_ids)
    if n < 1:
      return "prompt_token_ids is empty"
    if n > cfg.max_prefill_length:
      return f"prompt of {n} tokens exceeds max_prefill_length={cfg.max_prefill_length}"
    if req.max_tokens < 1:
      return f"max_tokens must be >= 1, got {req.max_tokens}"
    if n + req.max_tokens > cfg.max_len:
      return f"prompt {n} + max_tokens {req.max_tokens} exceeds max_len={cfg.max_len}"
    bad = [t for t in req.prompt_token_ids if not 0 <= t < vocab]
    if bad:
      return f"prompt_token_ids {bad[:5]} outside the vocabulary [0, {vocab})"
    return ""

  async def Generate(self, req, context):  # pylint: disable=invalid-name
    error = self._validate(req)
    try:
      sp = sampling.SamplingParams(temperature=req.temperature, top_p=req.top_p or 1.0,
                                   top_k=req.top_k, seed=req.seed)
    except ValueError as e:
      error = error or str(e)
    if error:
      await context.abort(grpc.StatusCode.INVALID_ARGUMENT, error)
    channel = async_multifuture.AsyncMultifuture()
    context.add_done_callback(channel.cancel)
    request = driver_lib.RLActiveRequest(
        max_tokens=req.max_tokens, return_channel=channel,
        prefill_content=list(req.prompt_token_ids), is_client_side_tokenization=True,
        sampling_params=sp,
        stop_ids=frozenset(req.stop_token_ids) | frozenset(self._engine.cfg.stop_token_ids))
    self._driver.place_request_on_prefill_queue(request)
    try:
      async for step in channel:
        yield rl_proto.GenerateResponse(
            token_ids=[] if step.token_id is None else [step.token_id],
            logprobs=[] if step.token_id is None else [step.logprob],
            policy_versions=[] if step.token_id is None else [step.version],
            finish_reason=step.finish_reason)
    except driver_lib.ServerShutdown as e:
      await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

  async def UpdateWeights(self, request_iterator, context):  # pylint: disable=invalid-name
    """A per-tensor stream or a server-side path (protocol in updates.py); one push at a time."""
    start = time.perf_counter()
    async with self._push_lock:
      try:
        version, nbytes = await self._receive_weights(request_iterator)
      except updates.WeightUpdateError as e:
        log.warning("weight update refused: %s", e)
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
    return rl_proto.UpdateWeightsResponse(version=version, seconds=time.perf_counter() - start,
                                          bytes=nbytes)

  async def _receive_weights(self, request_iterator) -> tuple[int, int]:
    loop = asyncio.get_running_loop()
    served = self._driver.served_params()
    assembler = updates.TensorStreamAssembler(served)
    version, path, nbytes = None, "", 0
    async for msg in request_iterator:
      if version is None:
        version = msg.version
        if version <= self._driver.version:  # refuse before any data moves
          raise updates.WeightUpdateError(
              f"weight version {version} must be greater than the served version "
              f"{self._driver.version}")
      if msg.path:
        path = msg.path
      elif msg.manifest:
        assembler.start([updates.TensorSpec(m.name, tuple(m.shape), m.dtype)
                         for m in msg.manifest])
      else:
        nbytes += len(msg.data)
        await loop.run_in_executor(None, assembler.chunk, msg.tensor, msg.offset, msg.data,
                                   msg.crc32)
    if path:
      new = await loop.run_in_executor(None, updates.from_path, path, served,
                                       self._engine.model_cfg)
    else:
      new = assembler.finish()
    self._driver.update_weights(new, int(version or 0))
    return self._driver.version, nbytes

  async def Status(self, req, context):  # pylint: disable=invalid-name
    del req, context
    cfg = self._engine.cfg
    return rl_proto.StatusResponse(
        live=self._driver.live, version=self._driver.version,
        max_concurrent_decodes=cfg.max_concurrent_decodes, max_len=cfg.max_len,
        model_type=self._engine.model_cfg.model_type,
        active_requests=self._driver.active_requests())

  def generic_handler(self) -> grpc.GenericRpcHandler:
    kinds = {(False, True): grpc.unary_stream_rpc_method_handler,
             (True, False): grpc.stream_unary_rpc_method_handler,
             (False, False): grpc.unary_unary_rpc_method_handler}
    handlers = {}
    for name, (_, _, cstream, sstream) in rl_proto.METHODS.items():
      handlers[name] = kinds[(cstream, sstream)](
          getattr(self, name), request_deserializer=rl_proto.request_class(name).FromString,
          response_serializer=lambda m: m.SerializeToString())
    return grpc.method_handlers_generic_handler(rl_proto.SERVICE, handlers)


class RolloutServer(server_lib.JetStreamServer):
  """JetStreamServer + the Rollout service, bound to `host`."""

  def __init__(self, driver, engine, threads: int, port: int, host: str):
    with compat.bind_host(host):
      super().__init__(driver, threads, port, grpc.insecure_server_credentials())
    self.port, self.host, self.driver, self.engine = port, host, driver, engine
    self._grpc_server.add_generic_rpc_handlers(
        (RolloutServicer(driver, engine).generic_handler(),))

  @property
  def address(self) -> str:
    return f"{self.host}:{self.port}"

  def push_weights(self, params: Any, version: int) -> None:
    """In-process weight update (a trainer sharing the process skips gRPC)."""
    self.driver.update_weights(updates.conform(params, self.driver.served_params()), version)


def start_server(engine: engine_lib.TmaxEngine, cfg: ServerConfig = ServerConfig()) -> RolloutServer:
  """Builds the orchestrator around `engine` (interleaved prefill+generate) and starts serving."""
  port = cfg.port or free_port(cfg.host)
  config = config_lib.ServerConfig(
      interleaved_slices=("cpu=1",), interleaved_engine_create_fns=(lambda devices: engine,))
  engines = config_lib.get_engines(config, devices=[engine.mesh.devices.flat[0]])
  shared = [e.load_params() for e in engines.interleaved_engines]
  driver = driver_lib.RLDriver(
      prefill_engines=engines.interleaved_engines, generate_engines=engines.interleaved_engines,
      prefill_params=shared, generate_params=shared, interleaved_mode=True)
  threads = cfg.threads or max(driver.get_total_concurrent_requests(), 64)
  server = RolloutServer(driver, engine, threads, port, cfg.host)
  server.start()
  log.info("serving %s on %s (%d slots)", engine.model_cfg.model_type, server.address,
           engine.cfg.max_concurrent_decodes)
  return server
