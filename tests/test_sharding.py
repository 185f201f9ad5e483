"""Sharded forward on 8 fake CPU devices (tests/conftest.py sets the flag) and the mesh helpers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tmax_jax import sharding
from tmax_jax.models import (
  ModelConfig,
  build_model,
  full_logits,
  head_weight,
  init_params,
  registry,
)

CFG = ModelConfig(
  vocab_size=256,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
  tie_word_embeddings=False,
  attention_bias=True,
  qk_norm=True,
)


def forward(cfg, params, tokens, positions, segments):
  hidden, _ = build_model(cfg).apply({"params": params}, tokens, positions, segments)
  return full_logits(hidden, head_weight(params, cfg))


@pytest.fixture(scope="module")
def mesh():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices: run under tests/conftest.py (XLA_FLAGS host device count)")
  return sharding.make_mesh(data=1, fsdp=4, tensor=2)


def test_sharded_forward_matches_single_device(mesh):
  shardings = registry.param_shardings(CFG, mesh)
  params = init_params(CFG, jax.random.key(1), shardings)
  # Intended shardings: embed dim over fsdp, heads / mlp / vocab over tensor, layers unsharded.
  layer = params["model"]["layers"]
  assert layer["self_attn"]["q_proj"]["kernel"].sharding.spec == P(None, "fsdp", "tensor", None)
  assert layer["self_attn"]["k_proj"]["bias"].sharding.spec == P(None, "tensor", None)
  assert layer["self_attn"]["o_proj"]["kernel"].sharding.spec == P(None, "tensor", None, "fsdp")
  assert layer["mlp"]["down_proj"]["kernel"].sharding.spec == P(None, "tensor", "fsdp")
  assert params["model"]["embed_tokens"]["embedding"].sharding.spec == P("tensor", "fsdp")
  assert params["lm_head"]["kernel"].sharding.spec == P("fsdp", "tensor")
  q = layer["self_attn"]["q_proj"]["kernel"]
  assert q.addressable_shards[0].data.shape == (2, 16, 2, 16)  # [L, D/4, N/2, H]

  rng = np.random.default_rng(0)
  tokens = jnp.asarray(rng.integers(0, 256, (8, 12)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(12, dtype=jnp.int32), (8, 12))
  segments = jnp.ones((8, 12), jnp.int32).at[3, 8:].set(0)
  batch_sharding = sharding.activation_sharding(mesh, CFG.logical_axis_rules, ("batch", "length"))
  assert batch_sharding.spec == P(("data", "fsdp"), "sequence")  # sequence axis of size 1 here
  inputs = [jax.device_put(x, batch_sharding) for x in (tokens, positions, segments)]
  with sharding.use_mesh(mesh, CFG.logical_axis_rules):
    sharded = jax.jit(forward, static_argnums=0)(CFG, params, *inputs)
  assert sharded.addressable_shards[0].data.shape[0] == 2  # batch 8 split over fsdp=4

  host_params = jax.device_put(params, jax.devices()[0])
  single = jax.jit(forward, static_argnums=0)(CFG, host_params, tokens, positions, segments)
  np.testing.assert_allclose(np.asarray(sharded), np.asarray(single), atol=1e-5, rtol=1e-5)


def test_cache_shardings(mesh):
  model = build_model(CFG)
  shardings = sharding.logical_to_sharding(model.cache_logical_axes(), mesh, CFG.logical_axis_rules)
  assert shardings["k"].spec == P(None, ("data", "fsdp"), "sequence", "tensor", None)
  cache = jax.jit(model.init_cache, static_argnums=(0, 1), out_shardings=shardings)(8, 16)
  assert cache["v"].addressable_shards[0].data.shape == (2, 2, 16, 1, 16)


def test_make_mesh_sizes():
  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  mesh = sharding.make_mesh(data=2, fsdp=-1, tensor=2)
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "sequence": 1, "tensor": 2}
  assert mesh.axis_names == sharding.MESH_AXES
  with pytest.raises(ValueError, match="needs 12 devices"):
    sharding.make_mesh(data=3, fsdp=2, tensor=2)
  cp = sharding.make_mesh(data=1, fsdp=2, tensor=1, sequence=-1)
  assert dict(cp.shape) == {"data": 1, "fsdp": 2, "sequence": 4, "tensor": 1}
  with pytest.raises(ValueError, match="at most one mesh axis may be -1"):
    sharding.make_mesh(fsdp=-1, sequence=-1)


def test_initialize_distributed_single_process_is_noop(monkeypatch):
  for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
    monkeypatch.delenv(name, raising=False)
  assert sharding.initialize_distributed() is False


def test_initialize_distributed_reports_missing_values(monkeypatch):
  monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "127.0.0.1:12345")
  monkeypatch.delenv("JAX_NUM_PROCESSES", raising=False)
  monkeypatch.delenv("JAX_PROCESS_ID", raising=False)
  with pytest.raises(ValueError, match=r"\['num_processes', 'process_id'\]"):
    sharding.initialize_distributed()
  with pytest.raises(ValueError, match="process_id=2 must be in"):
    sharding.initialize_distributed(num_processes=2, process_id=2)


def test_cluster_launches_are_detected():
  assert sharding.cluster_detected({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"})
  assert not sharding.cluster_detected({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"})  # sbatch shell
  assert sharding.cluster_detected({"TMAX_AUTO_DISTRIBUTED": "1"})
  assert not sharding.cluster_detected({})
