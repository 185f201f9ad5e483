"""One `tmax_rl.Rollout` endpoint in front of N inference servers (replicas): a gRPC proxy.

Sessions: a Generate request's session key is its `session_id`, else its `request_id` up to the
last '/' (ids like "episode/turn"), else none. The first request of a key goes to the replica
with the most room; the key's later requests (an episode's turns, each resending the whole
conversation) go to the same replica, whose prefix cache holds the conversation so far. Keys are
remembered LRU (RouterConfig.sessions). A request without a key goes where there is most room.

Admission: each request reserves ceil((prompt + max_tokens) / page_size) KV pages (at most a
replica's total) on its replica until it ends. A replica admits a request while both
  its reserved pages + the request's <= pages_total, and
  pages_free + pages_cached (its last Status; cached pages are evictable) - the pages reserved
  by requests started since that Status was asked for >= the request's,
or when nothing of the router's runs on it (a request larger than any budget still runs). Status
is polled every `poll_s`. When no replica admits a request it waits in the router (FIFO is not
guaranteed: a smaller request may pass a larger one). The reservation is the worst case (no
prefix sharing, every max_token generated), so a replica is never over-committed by the router.

Failures: a replica whose Generate stream fails with UNAVAILABLE/INTERNAL, or whose Status
fails `down_after` polls in a row, is taken out: its in-flight requests end with ABORTED (the
client's ServerRestartedError, an infrastructure failure: the episode is never scored), and a
request of a session it held that comes while it is out (or after it restarted: its KV is gone)
ends with ABORTED too, once; the key then starts afresh. New sessions go to the other replicas.
When no replica is up, requests get UNAVAILABLE (the client retries with backoff). A replica
comes back when its Status answers; a new instance_id (a restart) loses its old sessions the same
way.

Weights: UpdateWeights is read whole into the router's memory, then sent to every replica that
is up (the same messages, so the same version); the answer is theirs (the lowest version). The
last successful push stays in memory (for a tensor stream: the whole model's bytes; for a path
push: the path only) and is re-sent, with replace=true, to a replica that joins or restarts
before it takes requests. A replica that refuses a push (e.g. an older version) fails the push
with its code; the replicas that took it keep it.

Status aggregates the replicas that are up (sums of slots, pages, requests and prefill/cache
token counters; the router's waiting requests added to waiting_requests) under the router's own
instance_id, and lists every replica's last Status in `replica_status` (`address`, and
live=false for one that is down). Generate and UpdateWeights answers carry the router's
instance_id: clients see one server, and a router restart as a restart.

The replica list may change while it serves (`set_replicas`: a placement that restarts a replica
at a new address, tmax_jax/cluster): a removed replica is taken out as if it had failed, a new one
joins as a restarted one does (weights resynced before it takes requests).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import grpc

from tmax_jax.inference import rl_proto

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"  # compat.LOOPBACK, without importing JAX into the router
GRPC_OPTIONS = (("grpc.so_reuseport", 0),)  # server.GRPC_OPTIONS: alone on its port
FAILED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)  # the replica, not the request


@dataclasses.dataclass(frozen=True)
class RouterConfig:
  replicas: tuple[str, ...] = ()  # HOST:PORT of each inference server
  port: int = 9100  # 0 = a free port
  host: str = LOOPBACK
  poll_s: float = 0.5  # Status poll period
  status_timeout_s: float = 5.0
  down_after: int = 2  # failed Status polls in a row that take a replica out
  push_timeout_s: float = 1800.0  # one weight push to one replica
  sessions: int = 100_000  # session keys remembered (least recently used dropped)


class _Lost(Exception):
  """The request's replica is gone (ABORTED)."""


class _NoReplica(Exception):
  """No replica is up (UNAVAILABLE)."""


def session_key(req) -> str:
  """The affinity key of a GenerateRequest ("" = none)."""
  if req.session_id:
    return req.session_id
  head, sep, _ = req.request_id.rpartition("/")
  return head if sep else ""


def _callables(channel: grpc.aio.Channel) -> dict:
  factories = {
    (False, True): channel.unary_stream,
    (True, False): channel.stream_unary,
    (False, False): channel.unary_unary,
  }
  return {
    name: factories[(cstream, sstream)](
      rl_proto.method_path(name),
      request_serializer=lambda m: m.SerializeToString(),
      response_deserializer=rl_proto.response_class(name).FromString,
    )
    for name, (_, _, cstream, sstream) in rl_proto.METHODS.items()
  }


@dataclasses.dataclass(eq=False)
class _Flight:
  pages: int
  started: float
  call: grpc.aio.Call | None = None  # the replica's Generate call
  lost: str = ""  # why the router cut it (its replica was taken out)


class _Replica:
  """One inference server as the router sees it: DOWN -> SYNCING (weights) -> READY."""

  DOWN, SYNCING, READY = "down", "syncing", "ready"

  def __init__(self, address: str):
    self.address = address
    self.channel = grpc.aio.insecure_channel(address)
    self.calls = _callables(self.channel)
    self.state = self.DOWN
    self.status: rl_proto.StatusResponse | None = None  # last StatusResponse
    self.asked = 0.0  # when that Status was asked for
    self.instance_id = ""
    self.failures = 0  # Status polls failed in a row
    self.flights: set[_Flight] = set()

  def ready_status(self) -> rl_proto.StatusResponse:
    """The last StatusResponse: a replica is READY only after one."""
    assert self.status is not None, f"replica {self.address} has not answered Status yet"
    return self.status

  def room(self) -> int:
    """Pages a new request may reserve here now."""
    st = self.ready_status()
    reserved = sum(f.pages for f in self.flights)
    fresh = sum(f.pages for f in self.flights if f.started >= self.asked)
    return min(st.pages_total - reserved, st.pages_free + st.pages_cached - fresh)

  def need(self, req) -> int:
    st = self.ready_status()
    n = math.ceil((len(req.prompt_token_ids) + max(req.max_tokens, 1)) / max(st.page_size, 1))
    return min(n, st.pages_total)

  def admits(self, req) -> bool:
    return self.state == self.READY and (not self.flights or self.room() >= self.need(req))


class Router:
  """The Rollout service over `cfg.replicas`; `await start()` on the loop it serves from."""

  def __init__(self, cfg: RouterConfig):
    if not cfg.replicas:
      raise ValueError("RouterConfig.replicas: no replica address given")
    self.cfg = cfg
    self.instance_id = secrets.token_hex(8)
    self.replicas = [_Replica(a) for a in cfg.replicas]
    self.sessions: OrderedDict[str, tuple[_Replica, str]] = OrderedDict()
    self.weights: list = []  # the last successful push's messages
    self.waiting = 0
    self.port = 0
    self._wake = asyncio.Event()
    self._push_lock = asyncio.Lock()
    self._tasks: set[asyncio.Task] = set()
    self._server: grpc.aio.Server | None = None

  @property
  def address(self) -> str:
    return f"{self.cfg.host}:{self.port}"

  async def start(self) -> None:
    await self._poll_all()  # replicas that answer now take requests from the start
    self._spawn(self._poll_forever())
    self._server = grpc.aio.server(options=GRPC_OPTIONS)
    self._server.add_generic_rpc_handlers((self._handler(),))
    self.port = self._server.add_insecure_port(f"{self.cfg.host}:{self.cfg.port}")
    await self._server.start()
    log.info("router on %s over %s", self.address, ", ".join(self.addresses))

  @property
  def addresses(self) -> tuple[str, ...]:
    return tuple(r.address for r in self.replicas)

  async def set_replicas(self, addresses: Sequence[str]) -> None:
    """Routes over `addresses` from now on: the replicas kept keep their state and sessions, the
    ones dropped are taken out (their requests ABORTED) and the new ones join as DOWN (Status
    polled now; the last pushed weights resent before they take requests)."""
    if not addresses:
      raise ValueError("Router.set_replicas: no replica address given")
    kept = {r.address: r for r in self.replicas}
    self.replicas = [kept.pop(a) if a in kept else _Replica(a) for a in dict.fromkeys(addresses)]
    for r in kept.values():
      self._take_out(r, "removed from the replica list")
      self._spawn(r.channel.close(grace=1.0))
    log.info("router over %s", ", ".join(self.addresses))
    await self._poll_all()

  async def stop(self, grace_s: float = 1.0) -> None:
    if self._server is not None:
      await self._server.stop(grace_s)
    for task in list(self._tasks):
      task.cancel()
    for r in self.replicas:
      await r.channel.close()

  def _spawn(self, coro) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    self._tasks.add(task)
    task.add_done_callback(self._tasks.discard)

  def _notify(self) -> None:
    self._wake.set()
    self._wake = asyncio.Event()

  # -- replica health -------------------------------------------------------------------------

  async def _poll_forever(self) -> None:
    while True:
      await asyncio.sleep(self.cfg.poll_s)
      await self._poll_all()

  async def _poll_all(self) -> None:
    await asyncio.gather(*(self._poll(r) for r in self.replicas))
    self._notify()

  async def _poll(self, r: _Replica) -> None:
    asked = time.monotonic()
    try:
      st = await r.calls["Status"](rl_proto.StatusRequest(), timeout=self.cfg.status_timeout_s)
    except grpc.aio.AioRpcError as e:
      st, failed = None, e
    if r not in self.replicas:  # removed (set_replicas) while its poll was out
      return
    if st is None:
      r.failures += 1
      if r.failures >= self.cfg.down_after or r.status is None:
        self._take_out(r, f"Status failed: {failed.code().name}")
      return
    r.failures = 0
    if r.state == r.READY and st.instance_id != r.instance_id:
      self._take_out(r, f"restarted (instance {r.instance_id} -> {st.instance_id})")
    r.status, r.asked = st, asked
    if r.state == r.DOWN and st.live:
      r.state = r.SYNCING
      self._spawn(self._sync(r, st))

  def _take_out(self, r: _Replica, why: str) -> None:
    if r.state == r.DOWN:
      return
    log.warning("replica %s taken out: %s", r.address, why)
    r.state = r.DOWN
    for f in r.flights:
      f.lost = f"replica {r.address} lost ({why})"
      if f.call is not None:
        f.call.cancel()
    self._notify()

  async def _sync(self, r: _Replica, st) -> None:
    """A replica that (re)joined gets the last pushed weights, then takes requests."""
    async with self._push_lock:
      try:
        pushed = bool(self.weights) and (
          st.instance_id != r.instance_id or st.version != self.version
        )
        if pushed:
          first = rl_proto.UpdateWeightsRequest()
          first.CopyFrom(self.weights[0])
          first.replace = True  # the router's version is the truth, even over a newer one
          await self._push(r, [first, *self.weights[1:]])
      except grpc.aio.AioRpcError as e:
        log.warning("replica %s: weight resync failed: %s", r.address, e.details())
        r.state = r.DOWN
        return
      if r.state != r.SYNCING:
        return
      r.instance_id, r.state = st.instance_id, r.READY
      log.info("replica %s ready (instance %s%s)", r.address, st.instance_id, ", synced" * pushed)
    self._notify()

  @property
  def version(self) -> int:
    return self.weights[0].version if self.weights else 0

  # -- Generate -------------------------------------------------------------------------------

  async def _admit(self, key: str, req) -> tuple[_Replica, _Flight]:
    """Waits until a replica admits `req` (the session's own for a known key)."""
    self.waiting += 1
    try:
      while True:
        r = self._pick(key, req)
        if r is not None:
          flight = _Flight(r.need(req), time.monotonic())
          r.flights.add(flight)
          if key:
            self.sessions[key] = (r, r.instance_id)
            self.sessions.move_to_end(key)
            while len(self.sessions) > self.cfg.sessions:
              self.sessions.popitem(last=False)
          return r, flight
        await self._wake.wait()
    finally:
      self.waiting -= 1

  def _pick(self, key: str, req) -> _Replica | None:
    held = self.sessions.get(key) if key else None
    if held is not None:
      r, instance = held
      if r.state == r.DOWN or r.instance_id != instance:
        del self.sessions[key]
        raise _Lost(f"session {key!r}: its replica {r.address} was lost")
      return r if r.admits(req) else None
    up = [r for r in self.replicas if r.state == r.READY]
    if not up:
      raise _NoReplica(f"no replica is up (of {', '.join(self.addresses)})")
    ok = [r for r in up if r.admits(req)]
    if not ok:
      return None
    return max(ok, key=lambda r: (r.room() / max(r.ready_status().pages_total, 1), -len(r.flights)))

  async def Generate(self, req, context):
    try:
      r, flight = await self._admit(session_key(req), req)
    except _Lost as e:
      await context.abort(grpc.StatusCode.ABORTED, str(e))
    except _NoReplica as e:
      await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
    try:
      flight.call = r.calls["Generate"](req, timeout=context.time_remaining())
      first = True
      async for resp in flight.call:
        resp.instance_id = self.instance_id if first else ""
        first = False
        yield resp
    except (grpc.aio.AioRpcError, asyncio.CancelledError) as e:
      code = e.code() if isinstance(e, grpc.aio.AioRpcError) else None
      if code in FAILED:
        self._take_out(r, f"Generate: {code.name}: {e.details()}")
      if flight.lost:
        await context.abort(grpc.StatusCode.ABORTED, flight.lost)
      if code is None:
        raise  # our own handler was cancelled (the client went away)
      await context.abort(code, f"{r.address}: {e.details()}")
    finally:
      r.flights.discard(flight)
      if flight.call is not None:
        flight.call.cancel()
      self._notify()

  # -- UpdateWeights --------------------------------------------------------------------------

  async def _push(self, r: _Replica, messages: Sequence) -> object:
    async def stream():
      for m in messages:
        yield m

    return await r.calls["UpdateWeights"](stream(), timeout=self.cfg.push_timeout_s)

  async def UpdateWeights(self, request_iterator, context):
    start = time.perf_counter()
    messages = [m async for m in request_iterator]
    if not messages:
      await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an empty weight update")
    async with self._push_lock:
      targets = [r for r in self.replicas if r.state == r.READY]
      results = await asyncio.gather(
        *(self._push(r, messages) for r in targets), return_exceptions=True
      )
      done, refused = [], []
      for r, res in zip(targets, results, strict=True):
        if not isinstance(res, grpc.aio.AioRpcError):
          done.append(res)
        elif res.code() in (*FAILED, grpc.StatusCode.DEADLINE_EXCEEDED):
          self._take_out(r, f"UpdateWeights: {res.code().name}: {res.details()}")
        else:
          refused.append((r, res))
      if refused:
        r, e = refused[0]
        await context.abort(e.code(), f"{r.address}: {e.details()}")
      if not done:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "no replica is up to take the weights")
      self.weights = messages
    return rl_proto.UpdateWeightsResponse(
      version=min(d.version for d in done),
      seconds=time.perf_counter() - start,
      bytes=sum(len(m.data) for m in messages),
      instance_id=self.instance_id,
    )

  # -- Status ---------------------------------------------------------------------------------

  async def Status(self, req, context):
    del req, context
    up = [r.status for r in self.replicas if r.state == r.READY]
    out = rl_proto.StatusResponse(
      live=bool(up),
      version=min((s.version for s in up), default=self.version),
      instance_id=self.instance_id,
      max_len=min((s.max_len for s in up), default=0),
      max_topk=min((s.max_topk for s in up), default=0),
      model_type=up[0].model_type if up else "",
      page_size=up[0].page_size if up else 0,
      waiting_requests=self.waiting,
    )
    for s in up:
      for f in ("max_concurrent_decodes", "active_requests", "replicas", "pages_total"):
        setattr(out, f, getattr(out, f) + getattr(s, f))
      for f in ("pages_used", "pages_free", "pages_cached", "waiting_requests"):
        setattr(out, f, getattr(out, f) + getattr(s, f))
      out.prefill_tokens += s.prefill_tokens
      out.cached_prompt_tokens += s.cached_prompt_tokens
    for r in self.replicas:
      entry = out.replica_status.add()
      if r.status is not None:
        entry.CopyFrom(r.status)
      entry.address, entry.live = r.address, r.state == r.READY and entry.live
    return out

  def _handler(self) -> grpc.GenericRpcHandler:
    kinds = {
      (False, True): grpc.unary_stream_rpc_method_handler,
      (True, False): grpc.stream_unary_rpc_method_handler,
      (False, False): grpc.unary_unary_rpc_method_handler,
    }
    handlers = {
      name: kinds[(cstream, sstream)](
        getattr(self, name),
        request_deserializer=rl_proto.request_class(name).FromString,
        response_serializer=lambda m: m.SerializeToString(),
      )
      for name, (_, _, cstream, sstream) in rl_proto.METHODS.items()
    }
    return grpc.method_handlers_generic_handler(rl_proto.SERVICE, handlers)


class RouterThread:
  """A Router on its own event loop thread (tests, benches, a trainer's process)."""

  def __init__(self, cfg: RouterConfig):
    self._loop = asyncio.new_event_loop()
    self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
    self._thread.start()
    self.router = self.call(self._make(cfg))

  @staticmethod
  async def _make(cfg: RouterConfig) -> Router:
    router = Router(cfg)
    await router.start()
    return router

  def call(self, coro, timeout_s: float | None = 60.0):
    """Runs `coro` on the router's loop -> its result."""
    return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

  @property
  def address(self) -> str:
    return self.router.address

  def set_replicas(self, addresses: Sequence[str]) -> None:
    """Router.set_replicas from any thread."""
    self.call(self.router.set_replicas(addresses))

  def stop(self) -> None:
    self.call(self.router.stop())
    self._loop.call_soon_threadsafe(self._loop.stop)
    self._thread.join()


async def serve(cfg: RouterConfig, stop: asyncio.Event, ready=None) -> None:
  """Serves until `stop` is set; `ready(router)` once it listens."""
  router = Router(cfg)
  await router.start()
  if ready is not None:
    ready(router)
  await stop.wait()
  await router.stop(grace_s=5.0)


def parse_replicas(text: str) -> tuple[str, ...]:
  """'HOST:PORT,HOST:PORT' -> the addresses (ValueError naming a malformed one)."""
  out = tuple(a.strip() for a in text.split(",") if a.strip())
  for a in out:
    host, sep, port = a.rpartition(":")
    if not sep or not host or not port.isdigit():
      raise ValueError(f"replica address {a!r} is not HOST:PORT")
  return out
