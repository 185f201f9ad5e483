"""JetStream's orchestrator Driver, extended for RL rollouts.

`RLDriver` subclasses `jetstream.core.orchestrator.Driver` and keeps its prefill/transfer/generate
threads unchanged; it overrides two hooks:
  * `_process_prefill_content`: our own bucketed padding (Qwen has no BOS), and for RL requests a
    `PrefillInput` that carries the request's sampling settings to `TmaxEngine.prefill`.
  * `_detokenize_thread`: same loop as upstream, but RL requests (`RLActiveRequest`) get one
    `RLStep` per decode step - token, behaviour logprob, policy version, finish reason - read from the
    5-column ResultTokens of engine.py; plain JetStream requests go through upstream
    `token_utils.process_result_tokens` as before.
Weight updates swap the engines' ParamsBox contents (see engine.py), i.e. between decode steps.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import Any

import numpy as np

from tmax_jax.inference import compat

compat.apply()

# pylint: disable=wrong-import-position
from jetstream.core import orchestrator
from jetstream.engine import engine_api, token_utils

from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling, updates

log = logging.getLogger(__name__)
SHUTDOWN_MESSAGE = "inference server is shutting down"


@dataclasses.dataclass
class RLActiveRequest(orchestrator.ActiveRequest):
  """An RL Generate request: token-id prompt, sampling settings, per-request stop ids."""
  sampling_params: sampling.SamplingParams = sampling.SamplingParams()
  stop_ids: frozenset = frozenset()
  generated: int = 0


@dataclasses.dataclass(frozen=True)
class RLStep:
  """One streamed step of an RL request. finish_reason: '' | 'stop' | 'length'."""
  token_id: int | None
  logprob: float
  version: int
  finish_reason: str


class ServerShutdown(RuntimeError):
  pass


def prefill_buckets(max_prefill_length: int) -> list[int]:
  """Powers of two from 16, capped by (and ending at) max_prefill_length: one compile per bucket."""
  out, b = [], 16
  while b < max_prefill_length:
    out.append(b)
    b *= 2
  return out + [max_prefill_length]


def pad_to_bucket(ids: np.ndarray, max_prefill_length: int, pad_id: int) -> np.ndarray:
  n = len(ids)
  size = next(b for b in prefill_buckets(max_prefill_length) if b >= n)
  out = np.full((size,), pad_id, np.int32)
  out[:n] = ids
  return out


class RLDriver(orchestrator.Driver):
  """Driver with RL streams (logprobs + versions) and versioned weight updates."""

  def __init__(self, *args, **kwargs):
    # Set before super().__init__, which starts the threads that use them.
    self._live_lock = threading.Lock()
    self._live: dict[int, orchestrator.ActiveRequest] = {}
    self._open: set = set()  # return channels of requests not finished yet (any stage)
    self._update_lock = threading.Lock()
    self._text_tokenizer = None  # built on the first text request (loading it is slow)
    super().__init__(*args, **kwargs)

  # ---- weights -------------------------------------------------------------------------------

  @property
  def version(self) -> int:
    return self._generate_params[0].version

  def served_params(self) -> Any:
    return self._generate_params[0].get()[0]["params"]

  def update_weights(self, params: Any, version: int) -> None:
    """Installs `params` (already conformed) as `version` in every engine; lands between steps."""
    with self._update_lock:
      if version < self.version:  # equal: a resync (e.g. of a restarted server) is idempotent
        raise updates.WeightUpdateError(
            f"weight version {version} is older than the served version {self.version}")
      boxes = {id(b): b for b in list(self._prefill_params) + list(self._generate_params)}
      for box in boxes.values():
        box.swap(params, version)
    log.info("weights updated to version %d", version)

  # ---- prefill hook --------------------------------------------------------------------------

  def place_request_on_prefill_queue(self, request: orchestrator.ActiveRequest):
    """Tokenises/validates plain JetStream requests here, where errors reach the client (an
    exception inside the prefill thread would SIGKILL the server)."""
    if not isinstance(request, RLActiveRequest):
      engine = self._prefill_engines[0]
      content = request.prefill_content
      if isinstance(content, str):
        if self._text_tokenizer is None:
          self._text_tokenizer = engine.build_tokenizer(engine.get_tokenizer())
        content = self._text_tokenizer.encode(content)[0].tolist()
      if not content:
        raise ValueError("empty prompt")
      # Keep the most recent tokens if too long, as upstream does.
      request.prefill_content = list(content)[-engine.max_prefill_length:]
    with self._live_lock:
      self._open.add(request.return_channel)
    super().place_request_on_prefill_queue(request)

  def _process_prefill_content(self, request, tokenizer, is_bos, max_prefill_length):
    del is_bos  # Qwen models have no BOS token
    ids = np.asarray(request.prefill_content, np.int32)
    padded = pad_to_bucket(ids, max_prefill_length, tokenizer.pad_id)
    if isinstance(request, RLActiveRequest):
      return engine_lib.PrefillInput(padded, request.sampling_params), len(ids)
    return padded, len(ids)

  # ---- detokenize hook -----------------------------------------------------------------------

  def active_requests(self) -> int:
    with self._live_lock:
      return len(self._live)

  def _detokenize_thread(self, idx: int):
    backlog = self._detokenize_backlogs[idx]
    slots = self._generate_slots[idx]
    engine = self._generate_engines[idx]
    tokenizer = engine.build_tokenizer(engine.get_tokenizer())
    while self.live:
      data = backlog.get(block=True)
      if data is None:
        break
      if isinstance(data[1], engine_api.ResultTokens):
        result = data[1].convert_to_numpy()
        with self._live_lock:
          live = list(self._live.items())
        for slot, request in live:
          if self._emit(request, slot, result, tokenizer):
            request.return_channel.close()
            with self._live_lock:
              del self._live[slot]
              self._open.discard(request.return_channel)
            slots.put(slot, block=False)
      else:
        slot, request = data
        with self._live_lock:
          self._live[slot] = request

  def _emit(self, request, slot: int, result, tokenizer) -> bool:
    """Sends this step's output of `slot` to its request; True when the request is complete."""
    if not isinstance(request, RLActiveRequest):
      samples, complete = token_utils.process_result_tokens(
          tokenizer=tokenizer, slot=slot, slot_max_length=request.max_tokens,
          result_tokens=result, is_client_side_tokenization=request.is_client_side_tokenization,
          complete=request.complete)
      request.complete = complete
      request.enqueue_samples(samples)
      return bool(complete.all())
    if request.return_channel.cancelled():
      return True
    token, valid, _, logp, version = engine_lib.decode_row(result.data, slot)
    if not valid:  # the slot's cache is full
      request.enqueue_samples(RLStep(None, 0.0, version, "length"))
      return True
    request.generated += 1
    finish = ("stop" if token in request.stop_ids else
              "length" if request.generated >= request.max_tokens else "")
    request.enqueue_samples(RLStep(token, logp, version, finish))
    return bool(finish)

  def stop(self):
    """Stops the threads, then fails the streams still open so their clients can retry."""
    with self._live_lock:
      channels, self._open = list(self._open), set()
    super().stop()
    for channel in channels:
      if not channel.done():
        channel.set_exception(ServerShutdown(SHUTDOWN_MESSAGE))
