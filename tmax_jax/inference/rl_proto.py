"""The `tmax_rl.Rollout` gRPC service that sits next to JetStream's `Orchestrator` on one server.

JetStream 0.2.2's DecodeResponse carries text and token ids only, and its proto has no weight
update call, so RL gets its own small service. Its messages and methods are declared in rl.proto
beside this file (the source of truth, with what each field means); rl_pb2.py is protoc's
checked-in output for it (tests/inference/test_rl_proto.py keeps it current). This module is the
face the servers, the router and the client use: the message classes, and the service's methods
read from the descriptor, so that a grpc generic handler or a channel's callables can be built per
method without generated service stubs.
"""

from google.protobuf import message_factory

from tmax_jax.inference import rl_pb2

# protoc's rl_pb2 builds its message classes at import time, out of mypy's sight (they are Any)
from tmax_jax.inference.rl_pb2 import (  # type: ignore[attr-defined]
  GenerateRequest,
  GenerateResponse,
  StatusRequest,
  StatusResponse,
  TensorSpec,
  UpdateWeightsRequest,
  UpdateWeightsResponse,
)

__all__ = [
  "METHODS",
  "PACKAGE",
  "SERVICE",
  "GenerateRequest",
  "GenerateResponse",
  "StatusRequest",
  "StatusResponse",
  "TensorSpec",
  "UpdateWeightsRequest",
  "UpdateWeightsResponse",
  "method_path",
  "request_class",
  "response_class",
]

_ROLLOUT = rl_pb2.DESCRIPTOR.services_by_name["Rollout"]
PACKAGE = rl_pb2.DESCRIPTOR.package
SERVICE = _ROLLOUT.full_name

# method -> (request, response, client_streaming, server_streaming)
METHODS = {
  m.name: (m.input_type.name, m.output_type.name, m.client_streaming, m.server_streaming)
  for m in _ROLLOUT.methods
}


def method_path(method: str) -> str:
  return f"/{SERVICE}/{method}"


def request_class(method: str):
  return message_factory.GetMessageClass(_ROLLOUT.methods_by_name[method].input_type)


def response_class(method: str):
  return message_factory.GetMessageClass(_ROLLOUT.methods_by_name[method].output_type)
