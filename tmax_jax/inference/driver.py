"""JetStream's orchestrator Driver, driving our replicas' schedulers.

`RLDriver` subclasses `jetstream.core.orchestrator.Driver`, so JetStream's gRPC `Orchestrator`
(Decode, HealthCheck) works unchanged on top of it, and keeps its thread layout (one generate and
one detokenize thread per generate engine = per replica) and shutdown. JetStream's prefill thread
handles one request at a time and its transfer thread moves whole prefixes; paged memory, prefix
reuse and batched/chunked prefill need the prefill to run where the pages are, so:
  * `place_request_on_prefill_queue` validates the request (errors reach the client: an exception
    inside a JetThread SIGKILLs the server) and routes it to a replica (longest cached prefix,
    else least loaded), whose scheduler inbox it joins; the prefill and transfer threads idle;
  * `_generate_thread(idx)` runs replica idx's `Scheduler.step` loop (admission, prefill, decode);
  * `_detokenize_thread(idx)` delivers the scheduler's events: RL requests (`RLActiveRequest`) get
    one `RLStep` per token (token, behaviour logprob, policy version, finish reason, top-K), plain
    JetStream requests `ReturnSample`s (the stop token is not returned, as upstream).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

from tmax_jax.inference import compat

compat.apply()

from jetstream.core import orchestrator
from jetstream.engine import token_utils

from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling, scheduler

log = logging.getLogger(__name__)
SHUTDOWN_MESSAGE = "inference server is shutting down"
IDLE_POLL_S = 0.05  # how long an idle scheduler waits for a request before checking `live`


@dataclasses.dataclass
class RLActiveRequest(orchestrator.ActiveRequest):
  """An RL Generate request: token-id prompt, sampling settings, per-request stop ids, top-K."""

  sampling_params: sampling.SamplingParams = sampling.SamplingParams()
  stop_ids: frozenset = frozenset()
  top_logprobs: int = 0


@dataclasses.dataclass(frozen=True)
class RLStep:
  """One streamed step of an RL request. finish_reason: '' | 'stop' | 'length'."""

  token_id: int | None
  logprob: float
  version: int
  finish_reason: str
  topk_ids: tuple = ()
  topk_logprobs: tuple = ()


class ServerShutdown(RuntimeError):
  pass


class RLDriver(orchestrator.Driver):
  """Driver over a TmaxEngine's replicas (RL streams with logprobs/versions/top-K)."""

  def __init__(self, engine: engine_lib.TmaxEngine):
    # Set before super().__init__, which starts the threads that use them.
    self.engine = engine
    self._live_lock = threading.Lock()
    self._open: set = set()  # return channels of requests not finished yet
    self._text_tokenizer: engine_lib.TokenizerAdapter | None = (
      None  # built on the first text request (loading it is slow)
    )
    boxes = engine.load_params()
    for rep in engine.replicas:  # schedulers exist before any request can be routed
      rep.start(lambda events: None)
    super().__init__(
      prefill_engines=engine.replicas,
      generate_engines=engine.replicas,
      prefill_params=boxes,
      generate_params=boxes,
      interleaved_mode=True,
    )

  @property
  def version(self) -> int:
    return self.engine.version

  def update_weights(self, params: Any, version: int, *, replace: bool = False) -> None:
    """Serves `params` (already checked) as `version` on every replica, between decode steps
    (`replace`: also when it is older than the served one; engine.swap)."""
    self.engine.swap(params, version, replace=replace)
    log.info("weights updated to version %d", version)

  # ---- requests ------------------------------------------------------------------------------

  def place_request_on_prefill_queue(self, request: orchestrator.ActiveRequest):
    """Validates, tokenises (plain text requests) and routes a request to a replica."""
    cfg = self.engine.cfg
    if isinstance(request, RLActiveRequest):
      seq = scheduler.Sequence(
        request,
        list(request.prefill_content),
        request.max_tokens,
        request.sampling_params,
        request.stop_ids,
        request.top_logprobs,
        request.return_channel.cancelled,
      )
    else:
      content = request.prefill_content
      if isinstance(content, str):
        if self._text_tokenizer is None:
          rep = self.engine.replicas[0]
          self._text_tokenizer = rep.build_tokenizer(rep.get_tokenizer())
        content = self._text_tokenizer.encode(content)[0].tolist()
      if not content:
        raise ValueError("empty prompt")
      # Keep the most recent tokens if too long, as upstream does.
      content = list(content)[-cfg.max_prefill_length :]
      max_tokens = max(1, min(request.max_tokens, cfg.max_len - len(content)))
      seq = scheduler.Sequence(
        request,
        content,
        max_tokens,
        cfg.default_sampling,
        frozenset(cfg.stop_token_ids),
        is_cancelled=request.return_channel.cancelled,
      )
    with self._live_lock:
      self._open.add(request.return_channel)
    self.engine.route(seq.prompt).live_scheduler.submit(seq)

  # ---- threads -------------------------------------------------------------------------------

  def _prefill_thread(self, idx: int):
    del idx  # prefill runs inside each replica's scheduler (see the module docstring)

  def _transfer_thread(self, idx: int):
    del idx

  def _generate_thread(self, idx: int):
    backlog = self._detokenize_backlogs[idx]
    step = 0

    def emit(events):
      nonlocal step
      step += 1
      backlog.put((step, events), block=True)  # a tuple: Driver.stop() unpacks backlog items

    sched = self._generate_engines[idx].scheduler
    sched.emit = emit
    while self.live:
      sched.step(timeout=IDLE_POLL_S)

  def _detokenize_thread(self, idx: int):
    backlog = self._detokenize_backlogs[idx]
    engine = self._generate_engines[idx]
    tokenizer = engine.build_tokenizer(engine.get_tokenizer())
    while self.live:
      item = backlog.get(block=True)
      if item is None:
        break
      for event in item[1]:
        self._deliver(event, tokenizer)

  def _deliver(self, event: scheduler.Event, tokenizer) -> None:
    request = event.handle
    if request.return_channel is None or request.return_channel.cancelled():
      with self._live_lock:
        self._open.discard(request.return_channel)
      return
    if isinstance(request, RLActiveRequest):
      request.enqueue_samples(
        RLStep(
          event.token,
          event.logprob,
          event.version,
          event.finish_reason,
          event.topk_ids,
          event.topk_logprobs,
        )
      )
    elif event.token is not None and event.finish_reason != "stop":
      text = [] if request.is_client_side_tokenization else [tokenizer.decode([event.token])]
      request.enqueue_samples([token_utils.ReturnSample(text=text, token_ids=[event.token])])
    if event.finish_reason:
      request.return_channel.close()
      with self._live_lock:
        self._open.discard(request.return_channel)

  def stop(self):
    """Stops the threads, then fails the streams still open so their clients can retry."""
    with self._live_lock:
      channels, self._open = list(self._open), set()
    super().stop()
    for channel in channels:
      if not channel.done():
        channel.set_exception(ServerShutdown(SHUTDOWN_MESSAGE))

  def served_params(self) -> Any:
    return self.engine.served_params()
