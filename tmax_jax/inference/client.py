"""Asyncio client for rollouts against the tmax_rl.Rollout service.

Each `generate` call has one deadline (`timeout_s`) covering every attempt and backoff. Transient
failures (UNAVAILABLE: server down/restarting/shutting down; RESOURCE_EXHAUSTED; a stream cut
mid-way) are retried from scratch with exponential backoff until the deadline or `max_attempts`;
a partial stream is discarded, never spliced. When nothing answers, `ServerUnavailableError` says
which address was tried, how often and for how long. A restarted server is picked up by the same
client (gRPC channels reconnect).

Restarts: every server start has its own `instance_id` (in Status, in the first Generate response
and in the UpdateWeights response). A request that began while the client knew instance A and is
answered by instance B lost its server (its KV, its prefix cache, maybe its weights): it raises
`ServerRestartedError` (not retried; the caller drops the episode). The first sight of B runs the
client's `on_restart` callback once (e.g. the RL loop pushes its current weights, so B serves the
trainer's policy), then B becomes the known instance. A push answered by B makes B known without
the callback (it just received the weights).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc

from tmax_jax.inference import rl_proto, sampling, updates

TRANSIENT = (
  grpc.StatusCode.UNAVAILABLE,
  grpc.StatusCode.RESOURCE_EXHAUSTED,
  grpc.StatusCode.CANCELLED,
  grpc.StatusCode.INTERNAL,
)


class _StreamCut(Exception):
  """The stream ended without a finish reason (treated like UNAVAILABLE)."""


class RolloutError(RuntimeError):
  """A request the server rejected (bad arguments, bad weights): not retried."""


class ContextTooLongError(RolloutError):
  """The prompt (the conversation so far) and max_tokens exceed the server's max_prefill_length /
  max_len (OUT_OF_RANGE): the request's fault, not the server's, and resending it fails the same
  way. Its kind is the episode's PromptTooLongError's: the RL loop drops the episode, never
  scores it and never reruns its group."""

  kind = "prompt_too_long"
  retryable = False


class ServerUnavailableError(RolloutError):
  """The server could not be reached (or kept failing) within the request's deadline."""

  kind = "server"  # the RL loop's name for this infrastructure failure (rollout/*_server)


class ServerRestartedError(ServerUnavailableError):
  """The request began on one server instance and another one answered: the request is lost."""


@dataclasses.dataclass(frozen=True)
class ClientConfig:
  timeout_s: float = 600.0  # per request, all attempts included
  max_attempts: int = 5
  backoff_s: float = 0.2  # first retry delay; doubles, with jitter, capped at backoff_max_s
  backoff_max_s: float = 5.0


@dataclasses.dataclass
class Completion:
  """Generated tokens with their behaviour logprobs and the policy version of each token; with
  `top_logprobs=K`, each token's top-K ids and logprobs ([n][K]; empty lists when not asked)."""

  token_ids: list[int]
  logprobs: list[float]
  versions: list[int]
  finish_reason: str
  attempts: int = 1
  topk_ids: list[list[int]] = dataclasses.field(default_factory=list)
  topk_logprobs: list[list[float]] = dataclasses.field(default_factory=list)


_DEFAULT_SAMPLING = sampling.SamplingParams()  # immutable, shared


class RolloutClient:
  """`async with RolloutClient("127.0.0.1:9000") as c: out = await c.generate(ids, 64)`."""

  def __init__(
    self,
    address: str,
    cfg: ClientConfig = ClientConfig(),
    on_restart: Callable[[], Awaitable[None]] | None = None,
  ):
    self.address, self.cfg, self._on_restart = address, cfg, on_restart
    self._channel = grpc.aio.insecure_channel(address)
    self._calls = {name: self._make_callable(name) for name in rl_proto.METHODS}
    self.instance_id = ""  # the server instance this client knows ("" = none yet)
    self.restarts = 0  # new instances seen after the first one
    self._resync: asyncio.Lock | None = None

  async def _seen(self, instance_id: str, synced: bool = False) -> None:
    """A response came from `instance_id`. A new instance runs `on_restart` once, unless this
    response answered a push (`synced`: it holds the pushed weights already)."""
    if not instance_id or instance_id == self.instance_id:
      return
    if synced or not self.instance_id:
      self._adopt(instance_id)
      return
    self._resync = self._resync or asyncio.Lock()
    async with self._resync:
      if instance_id == self.instance_id:
        return  # another request resynced it meanwhile
      if self._on_restart is not None:
        await self._on_restart()  # its push adopts the instance (synced)
      self._adopt(instance_id)

  def _adopt(self, instance_id: str) -> None:
    if instance_id != self.instance_id:
      self.restarts += bool(self.instance_id)
      self.instance_id = instance_id

  def _make_callable(self, name: str):
    _, _, cstream, sstream = rl_proto.METHODS[name]
    factory = {
      (False, True): self._channel.unary_stream,
      (True, False): self._channel.stream_unary,
      (False, False): self._channel.unary_unary,
    }[(cstream, sstream)]
    return factory(
      rl_proto.method_path(name),
      request_serializer=lambda m: m.SerializeToString(),
      response_deserializer=rl_proto.response_class(name).FromString,
    )

  async def __aenter__(self) -> RolloutClient:
    return self

  async def __aexit__(self, *exc) -> None:
    await self.close()

  async def close(self) -> None:
    await self._channel.close()

  async def _with_retries(self, what: str, attempt_fn, timeout_s: float | None):
    """Runs `attempt_fn(remaining_s)` until it returns, a permanent error, or the deadline."""
    timeout_s = self.cfg.timeout_s if timeout_s is None else timeout_s
    start = time.monotonic()
    deadline = start + timeout_s
    delay, last = self.cfg.backoff_s, None
    for attempt in range(1, self.cfg.max_attempts + 1):
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        break
      try:
        return await attempt_fn(remaining), attempt
      except grpc.aio.AioRpcError as e:
        if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
          last = "DEADLINE_EXCEEDED"
          break
        if e.code() == grpc.StatusCode.ABORTED:  # a router's replica died under the request
          raise ServerRestartedError(f"{what} lost by {self.address}: {e.details()}") from e
        if e.code() == grpc.StatusCode.OUT_OF_RANGE:
          raise ContextTooLongError(f"{what} rejected by {self.address}: {e.details()}") from e
        if e.code() not in TRANSIENT:
          raise RolloutError(
            f"{what} rejected by {self.address}: {e.code().name}: {e.details()}"
          ) from e
        last = f"{e.code().name}: {e.details()}"
      except _StreamCut as e:
        last = str(e)
      sleep = min(delay, self.cfg.backoff_max_s) * (0.5 + random.random() / 2)
      await asyncio.sleep(max(0.0, min(sleep, deadline - time.monotonic())))
      delay *= 2
    detail = last or "no attempt left"
    raise ServerUnavailableError(
      f"{what}: inference server at {self.address} unavailable after {attempt} attempt(s) "
      f"over {time.monotonic() - start:.1f}s (timeout {timeout_s}s); last error: {detail}"
    )

  async def generate(
    self,
    prompt_token_ids: Sequence[int],
    max_tokens: int,
    params: sampling.SamplingParams = _DEFAULT_SAMPLING,
    stop_token_ids: Sequence[int] = (),
    request_id: str = "",
    timeout_s: float | None = None,
    top_logprobs: int = 0,
    session_id: str = "",
  ) -> Completion:
    """Token-id prompt (the whole conversation for multi-turn) -> Completion. The server's
    prefix cache makes resending the conversation cost only its new tokens; behind a router
    (router.py), `session_id` (one per episode) keeps an episode's turns on one replica."""
    req = rl_proto.GenerateRequest(
      prompt_token_ids=list(prompt_token_ids),
      max_tokens=max_tokens,
      temperature=params.temperature,
      top_p=params.top_p,
      top_k=params.top_k,
      seed=params.seed,
      stop_token_ids=list(stop_token_ids),
      request_id=request_id,
      top_logprobs=top_logprobs,
      session_id=session_id,
    )
    k = top_logprobs

    began_on = self.instance_id

    async def attempt(remaining: float) -> Completion:
      out = Completion([], [], [], "")
      async for resp in self._calls["Generate"](req, timeout=remaining, wait_for_ready=False):
        if resp.instance_id and began_on and resp.instance_id != began_on:
          await self._seen(resp.instance_id)
          raise ServerRestartedError(
            f"generate: the inference server at {self.address} restarted (instance "
            f"{began_on} -> {resp.instance_id}) during the request; it is lost"
          )
        await self._seen(resp.instance_id)
        out.token_ids.extend(resp.token_ids)
        out.logprobs.extend(resp.logprobs)
        out.versions.extend(resp.policy_versions)
        for i in range(0, len(resp.topk_ids), max(k, 1)):
          out.topk_ids.append(list(resp.topk_ids[i : i + k]))
          out.topk_logprobs.append(list(resp.topk_logprobs[i : i + k]))
        out.finish_reason = resp.finish_reason or out.finish_reason
      if not out.finish_reason:
        raise _StreamCut("stream ended without a finish reason")
      return out

    out, attempts = await self._with_retries("generate", attempt, timeout_s)
    out.attempts = attempts
    return out

  async def update_weights(
    self,
    params: Any = None,
    version: int = 0,
    path: str = "",
    timeout_s: float | None = None,
    dtype: str | None = None,
    replace: bool = False,
  ) -> int:
    """Pushes a param tree as a per-tensor stream (updates.py; `dtype` "bfloat16"/"float32" casts
    on the wire, None keeps each leaf's) or names a checkpoint path on the server; returns the
    served version. Holds one tensor on the host at a time, fetching the next while sending.
    replace: the server takes it even when it serves a newer version (a restarted trainer's
    first push: its checkpoint is the truth, not what its killed predecessor pushed)."""
    specs = [] if path else updates.manifest(params, dtype)
    leaves = [] if path else list(updates.named_leaves(params).values())
    loop = asyncio.get_running_loop()

    async def messages():
      if path:
        yield rl_proto.UpdateWeightsRequest(version=version, path=path, replace=replace)
        return
      yield rl_proto.UpdateWeightsRequest(
        version=version,
        manifest=[rl_proto.TensorSpec(name=s.name, shape=s.shape, dtype=s.dtype) for s in specs],
        replace=replace,
      )

      def fetch(i):
        return loop.run_in_executor(None, updates.tensor_bytes, leaves[i], specs[i])

      pending = fetch(0) if specs else None
      for i in range(len(specs)):
        data, crc = await pending
        pending = fetch(i + 1) if i + 1 < len(specs) else None
        for offset, piece in updates.chunks(data):
          yield rl_proto.UpdateWeightsRequest(
            version=version, tensor=i, offset=offset, data=piece, crc32=crc if offset == 0 else ""
          )

    async def attempt(remaining: float) -> int:
      resp = await self._calls["UpdateWeights"](messages(), timeout=remaining)
      await self._seen(resp.instance_id, synced=True)
      return resp.version

    return (await self._with_retries("update_weights", attempt, timeout_s))[0]

  async def status(self, timeout_s: float = 5.0):
    resp = await self._calls["Status"](rl_proto.StatusRequest(), timeout=timeout_s)
    await self._seen(resp.instance_id)
    return resp

  async def wait_until_ready(self, timeout_s: float = 120.0):
    """Polls Status until the server answers (e.g. after a restart) -> StatusResponse."""

    async def attempt(remaining: float):
      resp = await self._calls["Status"](
        rl_proto.StatusRequest(), timeout=remaining, wait_for_ready=True
      )
      await self._seen(resp.instance_id)
      return resp

    return (await self._with_retries("status", attempt, timeout_s))[0]


def check_top_logprobs(status, wanted: int, address: str) -> None:
  """Raises when a server (its Status response) returns fewer top-K logprobs per token than a
  config asks for (`worker.top_logprobs`): the loop checks this before its first rollout."""
  if wanted > status.max_topk:
    raise ValueError(
      f"worker.top_logprobs={wanted} but the server at {address} returns at most "
      f"max_topk={status.max_topk} top-K logprobs per token: start it with engine.max_topk >= "
      f"{wanted} (EngineConfig.max_topk) or lower worker.top_logprobs"
    )
