"""Serving: the JetStream-style engine (data-parallel replicas, paged KV memory, continuous
batching), its gRPC server with the `tmax_rl.Rollout` service and the OpenAI-compatible API, the
router in front of replicas, and the asyncio client the rollout workers call.

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.inference`, import the
names below from here, and the public modules listed in `__all__` whole; the driver, the request
channel, the wire protocol (rl_proto, rl_pb2), weight-update streams (updates) and the OpenAI body
translation (openai_chat) are internal. Every name loads its module on first use: importing this
package imports neither JAX nor JetStream.
"""

from typing import TYPE_CHECKING

from tmax_jax import lazy_face

if TYPE_CHECKING:  # the lazy names' homes (the same as _HOMES), for mypy and the import graph
  from tmax_jax.inference.client import (
    ClientConfig,
    RolloutClient,
    RolloutError,
    ServerUnavailableError,
    check_top_logprobs,
  )
  from tmax_jax.inference.engine import EngineConfig
  from tmax_jax.inference.openai_api import OpenAIConfig
  from tmax_jax.inference.openai_chat import parse_calls
  from tmax_jax.inference.router import RouterConfig, RouterThread
  from tmax_jax.inference.sampling import SamplingParams
  from tmax_jax.inference.server import free_port

_HOMES = {
  "ClientConfig": "client",
  "RolloutClient": "client",
  "RolloutError": "client",
  "ServerUnavailableError": "client",
  "check_top_logprobs": "client",
  "EngineConfig": "engine",
  "OpenAIConfig": "openai_api",
  "parse_calls": "openai_chat",
  "RouterConfig": "router",
  "RouterThread": "router",
  "SamplingParams": "sampling",
  "free_port": "server",
}
__getattr__ = lazy_face(__name__, _HOMES)

__all__ = [
  # calling a server
  "ClientConfig",
  "RolloutClient",
  "RolloutError",
  "ServerUnavailableError",
  "check_top_logprobs",
  "parse_calls",
  # serving
  "EngineConfig",
  "OpenAIConfig",
  "RouterConfig",
  "RouterThread",
  "SamplingParams",
  "free_port",
  # public modules, used whole
  "client",  # the asyncio Rollout client
  "decode",  # the jitted device side of a replica (decode state, KV pool, programs)
  "engine",  # the serving engine and its replicas
  "openai_api",  # the OpenAI-compatible HTTP API
  "paged",  # host-side paged KV bookkeeping and the prefix cache
  "router",  # one Rollout endpoint in front of N replicas
  "sampling",  # per-row sampling and the behaviour logprob
  "scheduler",  # one replica's continuous-batching scheduler
  "server",  # the gRPC server and the Rollout service
]
