"""Fixtures: tiny HF checkpoints and in-process servers (real gRPC on 127.0.0.1)."""

import inference_helpers as helpers
import pytest


@pytest.fixture(scope="session")
def tiny_ckpts(tmp_path_factory):
  """model_type -> (checkpoint dir, torch model)."""
  out = {}
  for model_type in ("qwen2", "qwen3"):
    d = tmp_path_factory.mktemp(model_type)
    out[model_type] = (d, helpers.save_tiny(model_type, d))
  return out
