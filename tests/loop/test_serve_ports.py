"""launch/serve.py on a port already served (issue 47): `error: ... port N is in use`, exit 2, no
traceback, before the model is built (a second server used to start beside the first: gRPC sets
SO_REUSEPORT by default; a taken OpenAI port died with an OSError after the model was built)."""

import os
import pathlib
import subprocess
import sys
from concurrent import futures

import grpc
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def served_port():
  """A port held by a gRPC server with gRPC's default options (SO_REUSEPORT), as a server of an
  earlier version of ours, or any other gRPC server, holds it."""
  server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
  port = server.add_insecure_port("127.0.0.1:0")
  server.start()
  yield port
  server.stop(grace=None)


@pytest.mark.parametrize(
  "field, other", [("serving.port", ""), ("openai.port", "--config.serving.port=0")]
)
def test_serve_on_a_taken_port_says_so_before_building_the_model(served_port, field, other):
  cmd = [sys.executable, "launch/serve.py", "--config=configs/serve_tiny.py"]
  cmd += [f"--config.{field}={served_port}", *filter(None, [other])]
  out = subprocess.run(
    cmd,
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,  # a server that starts instead would run until killed
    env=dict(os.environ, JAX_PLATFORMS="cpu"),
    check=False,
  )
  assert out.returncode == 2, out.stderr[-2000:]
  port = served_port
  assert f"error: config.{field}={port}: port {port} is in use on 127.0.0.1" in out.stderr
  assert "Traceback" not in out.stderr
  assert "serving qwen3" not in out.stderr + out.stdout  # refused before the server was built
