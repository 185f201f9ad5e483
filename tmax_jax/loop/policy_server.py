"""The RL loop's handle on "the server the rollouts go to": push the trainer's policy as a
version, resync a server that restarted, stop. Two implementations, chosen once by `open_server`:

  InProcessServer  a JetStream server this process starts on its serving devices (colocated or
                   disaggregated, loop/placement.py); a push reshards the trainer's params device
                   to device (loop/weight_sync.py) and swaps them in between decode steps.
  ExternalServer   a separately launched server (`serving.address`, launch/serve.py); a push
                   streams the params over its UpdateWeights call (inference/updates.py).

The loop is the same for both (tunix's RLCluster.sync_weights seam, without the rest of a cluster).
Pushes and resyncs run the blocking parts in executor threads and never overlap a trainer step
(the caller holds its step lock: a step donates the state's buffers).
"""

from __future__ import annotations

import asyncio
import logging

from tmax_jax.inference.client import ClientConfig, RolloutClient
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import placement as placement_lib
from tmax_jax.loop.config import ServingConfig
from tmax_jax.loop.policy import served_config, start_serving
from tmax_jax.loop.weight_sync import WeightSync, served_target
from tmax_jax.models.config import ModelConfig

log = logging.getLogger(__name__)


class PolicyServer:
  """`address` serves the policy; `push(params, version)` makes it serve `params` as `version`;
  `resync(...)` does the same for a server that restarted on other weights; `stop()`."""

  address: str

  async def push(self, params, version: int) -> None:
    raise NotImplementedError

  async def resync(self, params, version: int) -> None:
    await self.push(params, version)

  async def stop(self) -> None:
    """Releases the server (an in-process one stops; an external one keeps running)."""


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
    sync = WeightSync(place.trainer_mesh, served_target(served_cfg, place.server_mesh))
    served = await loop.run_in_executor(None, sync, params)
    server = start_serving(served_cfg, served, engine_cfg, serving.port, place.server_mesh)
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
    server = ExternalServer(serving.address, client_cfg)
    # the server outlives trainers: one SIGKILLed after a push and before its checkpoint left
    # a version newer than the one this (restarted) trainer resumes from, which replaces it
    await server.push(params, version, replace=True)
    return server
  return await InProcessServer.start(model_cfg, params, version, serving, engine_cfg, place)
