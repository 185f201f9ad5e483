"""A server refuses a port that is taken (issue 47): gRPC's default SO_REUSEPORT would let a second
server bind beside the first and split its clients' requests between two models; an HTTP API on a
taken port died with an OSError traceback. Both are now a UserError naming the port."""

import socket
import threading
from concurrent import futures

import grpc
import jax
import numpy as np
import pytest
import scripted_model

from tmax_jax.errors import UserError
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import openai_api
from tmax_jax.inference import server as server_lib
from tmax_jax.models import registry


@pytest.fixture(scope="module")
def params():
  """A model whose vocabulary covers the qwen3 tokenizer (the OpenAI API needs one)."""
  return jax.tree.map(
    np.asarray, registry.init_params(scripted_model.model_config(), jax.random.key(0))
  )


def _engine(params) -> engine_lib.TmaxEngine:
  cfg = engine_lib.EngineConfig(max_concurrent_decodes=2, max_len=64, max_prefill_length=32)
  return engine_lib.TmaxEngine(scripted_model.model_config(), cfg, lambda: params)


def test_a_second_grpc_server_on_a_served_port_is_refused(params):
  first = server_lib.start_server(_engine(params), server_lib.ServerConfig(port=0))
  try:
    threads = threading.active_count()
    port = first.port
    with pytest.raises(UserError, match=f"ServerConfig.port={port}: port {port} is in use"):
      server_lib.start_server(_engine(params), server_lib.ServerConfig(port=port))
    assert threading.active_count() == threads  # the refused server's threads are gone
    # Nor does a gRPC server with the default options (SO_REUSEPORT) bind beside ours.
    other = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    with pytest.raises(RuntimeError, match="Failed to bind"):
      other.add_insecure_port(first.address)
  finally:
    first.stop()


def test_an_http_api_on_a_taken_port_is_refused(params):
  with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    cfg = server_lib.ServerConfig(port=0, openai=openai_api.OpenAIConfig(port=port))
    with pytest.raises(UserError, match=f"OpenAIConfig.port={port}: port {port} is in use"):
      server_lib.start_server(_engine(params), cfg)
