"""The RL loop's handle on "the server the rollouts go to": push the trainer's policy as a
version, resync a server that restarted, stop. Two implementations, chosen once by `open_server`:

  InProcessServer  a JetStream server this process starts on its serving devices (colocated or
                   disaggregated, loop/placement.py); a push reshards the trainer's params device
                   to device (loop/weight_sync.py) and swaps them in between decode steps.
  ExternalServer   a separately launched server (`serving.address`, launch/serve.py or a router
                   in front of replicas); a push streams the params over its UpdateWeights call
                   (inference/updates.py).
  SharedExternalServer  the same server shared by the processes of a multi-process trainer:
                   one push per version, streamed by process 0 from params every process helped
                   gather to its host.

The loop is the same for both (tunix's RLCluster.sync_weights seam, without the rest of a cluster).
Pushes and resyncs run the blocking parts in executor threads and never overlap a trainer step
(the caller holds its step lock: a step donates the state's buffers).
"""

from __future__ import annotations

import asyncio
import logging
import time

import jax
import numpy as np

from tmax_jax.inference.client import ClientConfig, RolloutClient, ServerUnavailableError
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import placement as placement_lib
from tmax_jax.loop.config import ServingConfig
from tmax_jax.loop.policy import served_config, start_serving
from tmax_jax.loop.weight_sync import WeightSync, served_target
from tmax_jax.models import ModelConfig
from tmax_jax.train import distributed

log = logging.getLogger(__name__)


class PolicyServer:
  """`address` serves the policy; `push(params, version)` makes it serve `params` as `version`;
  `resync(...)` does the same for a server that restarted on other weights; `stop()`."""

  address: str
  resync_reads_params = True  # resync(params, ...) reads the trainer's state (take its step lock)

  async def push(self, params, version: int) -> None:
    raise NotImplementedError

  async def resync(self, params, version: int) -> None:
    await self.push(params, version)

  async def stop(self) -> None:
    """Releases the server (an in-process one stops; an external one keeps running)."""

  async def watch(self, client: RolloutClient) -> None:
    """Runs for the whole loop beside the rollouts' `client` (cancelled at the end); nothing to
    watch but for SharedExternalServer."""


class InProcessServer(PolicyServer):
  """A server on this process's serving mesh, started on a resharded copy of the trainer's params
  (the trainer donates its state's buffers) as `version`."""

  def __init__(self, server, sync: WeightSync):
    self._server, self._sync = server, sync
    self.address = server.address

  @classmethod
  async def start(
    cls,
    model_cfg: ModelConfig,
    params,
    version: int,
    serving: ServingConfig,
    engine_cfg: EngineConfig,
    place: placement_lib.Placement,
  ) -> InProcessServer:
    loop = asyncio.get_running_loop()
    served_cfg = served_config(model_cfg, serving)
    mesh = place.serving_mesh()
    sync = WeightSync(place.trainer_mesh, served_target(served_cfg, mesh))
    served = await loop.run_in_executor(None, sync, params)
    server = start_serving(served_cfg, served, engine_cfg, serving.port, mesh)
    out = cls(server, sync)
    if version:  # the engine starts at version 0: tag the restored policy with its own
      await loop.run_in_executor(None, server.driver.update_weights, served, version)
    return out

  async def push(self, params, version: int) -> None:
    loop = asyncio.get_running_loop()
    served = await loop.run_in_executor(None, self._sync, params)
    await loop.run_in_executor(None, self._server.driver.update_weights, served, version)

  async def stop(self) -> None:
    self._server.stop()


class ExternalServer(PolicyServer):
  """A server at `address` that this process does not own; weights go over UpdateWeights."""

  def __init__(self, address: str, client_cfg: ClientConfig):
    self.address = address
    self._client = RolloutClient(address, client_cfg)

  async def push(self, params, version: int, *, replace: bool = False) -> None:
    await self._client.update_weights(params, version=version, replace=replace)

  async def stop(self) -> None:
    await self._client.close()


class SharedExternalServer(ExternalServer):
  """An external server that every process of a multi-process trainer samples from; every process
  calls `push` (a collective) and each process's rollout client calls `resync` on a restart.

  A push is one push per version: every process takes part in gathering the params leaf by leaf
  to process 0's host (distributed.gather_to_host: chunks replicated on the devices for one step,
  never a device_get of a non-fully-addressable array), process 0 streams that copy with the
  ordinary UpdateWeights call (replace semantics unchanged), and then every process gathers the
  outcome: that is the barrier after which the loop goes on (no process samples for the next step
  before the server holds the version) and a refused push fails every process, not process 0
  alone.

  Restarts: a resync never starts a collective (a restart seen by one process's client would
  start it on that process alone and deadlock). Process 0 keeps its host copy of the last pushed
  version (the params' bytes in the trainer's dtype, one copy: each push overwrites it in place)
  and resyncs the new instance from it by itself, unless its last push already reached that
  instance (the step's push came first); any other process's resync waits until the server
  reports that version. Process 0 notices a restart through its own requests or through `watch`,
  a Status poll every `watch_every_s` (it may have no request in flight while another process
  waits). A server that restarts at version 0 before the first step's push counts as synced for
  processes > 0 (its version cannot tell its own weights from the pushed ones) until process 0
  resyncs it, at most one poll later."""

  resync_reads_params = False
  watch_every_s = 1.0

  def __init__(self, address: str, client_cfg: ClientConfig, main: bool):
    super().__init__(address, client_cfg)
    self._cfg = client_cfg
    self._main = main  # process 0: streams the pushes, keeps the copy, resyncs
    self._copy = None  # process 0: host copy of the last pushed params, pushed as `_version`
    self._version = 0
    self._lock = asyncio.Lock()  # process 0: one push or resync at a time over `_copy`

  async def push(self, params, version: int, *, replace: bool = False) -> None:
    loop = asyncio.get_running_loop()
    error = None
    if self._main:
      async with self._lock:
        await loop.run_in_executor(None, self._gather, params)
        self._version = version
        try:
          await self._client.update_weights(self._copy, version=version, replace=replace)
        except Exception as e:  # every process learns of it below, then raises
          error = e
    else:
      await loop.run_in_executor(None, self._gather, params)
    said = await loop.run_in_executor(
      None, distributed.allgather_json, error and f"{type(error).__name__}: {error}"
    )
    if error is not None:
      raise error
    if said[0] is not None:
      raise RuntimeError(f"weight push of version {version} by process 0 failed: {said[0]}")

  def _gather(self, params) -> None:
    leaves = jax.tree.leaves(params)
    if not self._main:
      outs = [None] * len(leaves)
    else:
      if self._copy is None:
        self._copy = jax.tree.map(lambda x: np.empty(x.shape, x.dtype), params)
      outs = jax.tree.leaves(self._copy)
    for leaf, out in zip(leaves, outs, strict=True):
      distributed.gather_to_host(leaf, out)

  async def resync(self, params, version: int) -> None:
    if self._main:
      async with self._lock:
        known = self._client.instance_id  # the instance that took our last push
        st = await self._client.wait_until_ready(self._cfg.timeout_s)
        if self._copy is not None and (st.instance_id != known or st.version < self._version):
          await self._client.update_weights(self._copy, version=self._version)
      return
    deadline = time.monotonic() + self._cfg.timeout_s
    while (await self._client.wait_until_ready(self._cfg.timeout_s)).version < version:
      if time.monotonic() > deadline:
        raise ServerUnavailableError(
          f"the restarted server at {self.address} did not get version {version} from process 0 "
          f"within {self._cfg.timeout_s:.0f} s"
        )
      await asyncio.sleep(self.watch_every_s / 2)

  async def watch(self, client: RolloutClient) -> None:
    if not self._main:
      return
    while True:
      await asyncio.sleep(self.watch_every_s)
      try:
        await client.status()  # a new instance runs the client's on_restart: our resync
      except Exception as e:  # down or restarting: the next poll (or a request) sees it
        log.debug("status poll of %s: %s", self.address, e)


async def open_server(
  model_cfg: ModelConfig,
  params,
  version: int,
  serving: ServingConfig,
  engine_cfg: EngineConfig,
  place: placement_lib.Placement,
  client_cfg: ClientConfig,
) -> PolicyServer:
  """The server `serving` describes, serving `params` as `version` once this returns."""
  if serving.address:
    server: ExternalServer
    if jax.process_count() > 1:
      main = jax.process_index() == 0
      server = SharedExternalServer(serving.address, client_cfg, main)
    else:
      server = ExternalServer(serving.address, client_cfg)
    # the server outlives trainers: one SIGKILLed after a push and before its checkpoint left
    # a version newer than the one this (restarted) trainer resumes from, which replaces it
    await server.push(params, version, replace=True)
    return server
  return await InProcessServer.start(model_cfg, params, version, serving, engine_cfg, place)
