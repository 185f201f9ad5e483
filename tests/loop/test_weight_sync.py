"""Trainer -> server weight sync on 8 fake CPU devices: values, dtypes (server bf16, head fp32) and
shardings of the served tree, and no host round trip (transfer guards around the sync)."""

import contextlib

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from tmax_jax import sharding
from tmax_jax.loop.weight_sync import WeightSync, served_target
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig

CFG = ModelConfig(
  vocab_size=256,
  hidden_size=32,
  intermediate_size=64,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=4,
  head_dim=8,
  tie_word_embeddings=True,
)


@pytest.fixture(autouse=True)
def _eight_devices():
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")


@contextlib.contextmanager
def no_host_round_trip():
  """Any host copy on the way back to a device is an h2d transfer, which this refuses (explicit
  ones too). On CPU, d2h reads are zero-copy and not guarded; on GPU/TPU they are refused too."""
  with (
    jax.transfer_guard_host_to_device("disallow_explicit"),
    jax.transfer_guard_device_to_host("disallow_explicit"),
  ):
    yield


def _trainer_params(mesh):
  return registry.init_params(CFG, jax.random.key(0), registry.param_shardings(CFG, mesh))


@pytest.mark.parametrize("layout", ["disaggregated", "colocated"])
def test_sync_is_a_device_reshard_with_server_dtypes(layout):
  devices = jax.devices()
  trainer_mesh = sharding.make_mesh(fsdp=2, tensor=2, devices=devices[:4])
  server_devices = devices[4:] if layout == "disaggregated" else devices[:4]
  server_mesh = Mesh(np.asarray(server_devices).reshape(1, 4), ("replica", "tensor"))
  served_cfg = CFG.with_dtypes(param_dtype="bfloat16", compute_dtype="bfloat16")
  target = served_target(served_cfg, server_mesh)
  sync = WeightSync(trainer_mesh, target)
  params = _trainer_params(trainer_mesh)
  jax.block_until_ready(params)
  sync(params)  # compile outside the guard (constants of the compiled program are host copies)
  with no_host_round_trip():
    served = sync(params)
  host = jax.device_get(params)
  for (path, got), want, tgt in zip(
    jax.tree_util.tree_leaves_with_path(served),
    jax.tree.leaves(host),
    jax.tree.leaves(target),
    strict=True,
  ):
    name = jax.tree_util.keystr(path)
    # bf16 params, but the head's weight (the tied embedding) keeps the trainer's fp32 values
    head = "embed_tokens" in name
    assert got.dtype == (jax.numpy.float32 if head else jax.numpy.bfloat16), name
    assert got.sharding == tgt.sharding and got.sharding.device_set == set(server_devices), name
    np.testing.assert_array_equal(np.asarray(got), want.astype(got.dtype), err_msg=name)
  q = served["model"]["layers"]["self_attn"]["q_proj"]["kernel"]
  assert q.addressable_shards[0].data.shape == (2, 32, 1, 8)  # [L, D, N/4, H] on tensor=4


def test_guard_catches_a_host_round_trip():
  """The guard the sync test relies on does fire for a serialising path (device_get + put)."""
  mesh = sharding.make_mesh(devices=jax.devices()[:1])
  params = _trainer_params(mesh)
  with no_host_round_trip(), pytest.raises(Exception, match="host-to-device"):
    jax.device_put(jax.device_get(params), jax.devices()[4])


@pytest.mark.slow
def test_bench_tiny_runs_both_paths(tmp_path):
  import json
  import os
  import pathlib
  import subprocess
  import sys

  root = pathlib.Path(__file__).resolve().parents[2]
  out = tmp_path / "r.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  subprocess.run(
    [sys.executable, "bench/weight_sync.py", "--tiny", "--out", str(out)],
    cwd=root,
    env=env,
    check=True,
    capture_output=True,
    timeout=900,
  )
  r = json.loads(out.read_text())
  assert r["device_s"] > 0 and r["grpc_s"] > 0 and len(r["ratios"]) >= 5
