"""The memory planner (tmax_jax/plan.py) on 8 fake CPU devices: the trainer figure extrapolated from
compiles with a few layers agrees with the fully compiled step within 10%; the server's cache is
the KV bytes of its slots; the CLI plans a job config."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from tmax_jax import plan, sharding
from tmax_jax.loop.config import ServingConfig
from tmax_jax.models.config import ModelConfig
from tmax_jax.train.config import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
CFG = ModelConfig(
  vocab_size=1024,
  hidden_size=128,
  intermediate_size=256,
  num_hidden_layers=5,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=32,
  tie_word_embeddings=False,
  remat_policy="full",
)


@pytest.fixture(autouse=True)
def _eight_devices():
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")


def test_planned_trainer_memory_matches_the_compiled_step():
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  train = TrainConfig(micro_batches=2, logprob_chunk_size=128)
  compiled = plan.compiled_step_memory(CFG, train, mesh, rows=8, seq_len=256)
  planned = plan.trainer_memory(CFG, train, mesh, rows=8, seq_len=256)  # from 2 and 3 layers
  assert abs(planned["total"] - compiled["total"]) <= 0.1 * compiled["total"], (planned, compiled)
  # the state parts are exact: params fp32 split 8 ways (embeddings and norms aside), Adam 2x
  assert planned["optimizer"] == pytest.approx(2 * planned["params"], rel=1e-3)
  assert planned["activations"] > 0 and planned["gradients"] == planned["params"]


def test_hybrid_models_are_cut_by_whole_periods():
  from tmax_jax.models import registry  # pylint: disable=import-outside-toplevel

  cfg = registry.preset("qwen3.5-9b")
  p = plan.layer_period(cfg)
  assert p == 4 and plan.layer_period(CFG) == 1
  cut = plan.with_layers(cfg, 2 * p)
  assert cut.num_hidden_layers == 8 and tuple(cut.family_config.layer_types) == tuple(
    cfg.family_config.layer_types[:8]
  )


def test_server_cache_is_the_engines_page_pool():
  mesh = Mesh(np.asarray(jax.devices()[:2]).reshape(1, 2), ("replica", "tensor"))
  kv_per_token = CFG.num_hidden_layers * 2 * CFG.num_key_value_heads * CFG.head_dim * 4 / 2
  serving = ServingConfig(max_concurrent_decodes=4, max_len=64, max_prefill_length=64)
  got = plan.server_cache_bytes(CFG, serving, mesh)
  assert got == 4 * 64 * kv_per_token  # num_pages 0: every slot at max_len
  fewer = dataclasses.replace(serving, num_pages=5)  # 5 pages of 16 tokens
  assert plan.server_cache_bytes(CFG, fewer, mesh) == 5 * 16 * kv_per_token
  server = plan.server_memory(CFG, serving, mesh)
  assert server["head"] == CFG.hidden_size * CFG.vocab_size * 4 / 2
  assert server["total"] == server["params"] + server["head"] + got


@pytest.mark.slow
def test_cli_plans_a_job_config():
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS="")
  r = subprocess.run(
    [
      sys.executable,
      "-m",
      "tmax_jax.plan",
      "--config=tests/loop/rl_tiny_config.py",
      "--devices=8",
      "--device_memory_gb=1",
      "--config.mesh.num_devices=0",
      "--config.mesh.data=2",
      "--config.mesh.fsdp=2",
      "--config.mesh.tensor=2",
      "--json",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=1200,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["fits"] and 0 < out["peak"] < 1e9
  assert out["notes"][0] == "trainer mesh {'data': 2, 'fsdp': 2, 'sequence': 1, 'tensor': 2}"


@pytest.mark.slow
@pytest.mark.parametrize("config", ["configs/tmax_qwen3_8b.py"])  # the recipe configs with a mesh
def test_recipe_mesh_passes_its_plan(config):
  """The topology a recipe config names (8 x H200, 141 GB) fits by its own plan."""
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS="")
  r = subprocess.run(
    [
      sys.executable,
      "-m",
      "tmax_jax.plan",
      f"--config={config}",
      "--devices=8",
      "--device_memory_gb=141",
      "--json",
    ],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=3000,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out["fits"], out
