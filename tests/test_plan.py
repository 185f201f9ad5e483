"""The memory planner (tmax_jax/plan.py) on 8 fake CPU devices: the trainer figure extrapolated from
compiles with a few layers agrees with the fully compiled step within 10%; the server's cache is
the KV bytes of its slots; the CLI plans a job config."""

import dataclasses
import importlib.util
import json
import os
import pathlib
import runpy
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from tmax_jax import plan, sharding
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import policy
from tmax_jax.loop.config import SFT_TRAIN, MeshConfig, ModelSpec, ServingConfig, SFTConfig
from tmax_jax.models import registry
from tmax_jax.models.config import CONTEXT_PARALLEL_RULES, ModelConfig
from tmax_jax.train.config import PackingConfig, TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHAPE = dict(
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
CFG = ModelConfig(**SHAPE)
# CFG as a preset's overrides, blockwise, the context-parallel rules
TINY_SPEC = dict(
  SHAPE,
  attention_impl="blockwise",
  attention_q_chunk=128,
  attention_kv_chunk=128,
  logical_axis_rules=CONTEXT_PARALLEL_RULES,
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


PACKED = TrainConfig(
  micro_batches=1,
  logprob_chunk_size=128,
  packing=PackingConfig(tokens_per_micro_batch=4 * 512, row_lengths=(256, 512)),
)
BLOCKWISE = CFG.replace(attention_impl="blockwise", attention_q_chunk=128, attention_kv_chunk=128)


@pytest.mark.slow  # test_planned_trainer_memory_matches_the_compiled_step is the default check
def test_packed_job_is_planned_as_its_micro_batch_step_on_a_sequence_mesh():
  """A packed job is planned as the packed step runs: one micro-batch of a bucket shape (rows as
  Trainer packs them for data x fsdp, each row split over `sequence`) through step.make_micro_fn
  on the trainer mesh (ring attention, per-shard head), extrapolated from 2 and 3 layers to the
  full 5-layer compile within 10%; the plan says how many tokens each trainer device holds."""
  job = SFTConfig(
    model=ModelSpec(preset="qwen3-0.6b", overrides=TINY_SPEC),
    train=dataclasses.replace(SFT_TRAIN, logprob_chunk_size=128, packing=PACKED.packing),
    mesh=MeshConfig(fsdp=4, sequence=2),
    seq_len=512,
  )
  result = plan.plan_job(job, device_memory_gb=1.0, bucket=1)
  rows, row_len = PACKED.packing.buckets(512, shards=4)[1]
  assert (rows, row_len) == (4, 512)
  assert result.notes[1] == "packed micro-batch [4, 512]: 256 tokens per trainer device"
  assert result.fits and not result.server
  cfg = policy.model_config(job.model)
  mesh = sharding.make_mesh(data=1, fsdp=4, sequence=2, tensor=1)
  compiled = plan.compiled_micro_memory(cfg, job.train, mesh, rows, row_len)
  planned = result.trainer
  assert abs(planned["activations"] - compiled["temp"]) <= 0.1 * compiled["temp"], (
    planned,
    compiled,
  )
  # the accumulator is an argument of the micro-batch step (donated), not part of its temp
  expected = compiled["total"] + planned["optimizer"]
  assert abs(planned["total"] - expected) <= 0.1 * expected, (planned, compiled)
  # CONTEXT_PARALLEL_RULES: params and Adam state split over fsdp x sequence = 8 devices (the
  # default rules would split them over fsdp's 4 only)
  full = sum(np.prod(x.shape) * 4 for x in jax.tree.leaves(registry.abstract_params(cfg)))
  assert planned["params"] < full / 4, (planned["params"], full)


@pytest.mark.slow
def test_sequence_axis_splits_a_rows_activations():
  """The same [2, 1024] micro-batch on 2 devices (fsdp) and on 8 (fsdp 2 x sequence 4): the
  compiled per-device temp falls to about a quarter (a row's tokens split over sequence)."""
  devices = jax.devices()
  one = sharding.make_mesh(data=1, fsdp=2, sequence=1, tensor=1, devices=devices[:2])
  four = sharding.make_mesh(data=1, fsdp=2, sequence=4, tensor=1)
  cfg = plan.with_layers(BLOCKWISE, 2)
  t1, t4 = (plan.compiled_micro_memory(cfg, PACKED, m, 2, 1024)["temp"] for m in (one, four))
  assert t4 <= 0.4 * t1, (t1, t4)


def test_checkpoint_keeps_its_architecture_and_takes_the_runtime_overrides(tmp_path):
  """model.overrides on a checkpoint: the kernel / remat / rules apply (the recipe configs set
  them), a shape field the checkpoint defines does not (serve_tiny's tiny shapes)."""
  from tests.inference import inference_helpers
  from tmax_jax.loop import policy

  # config.json only (hidden 64): the plan reads no weights
  inference_helpers.hf_config("qwen3").save_pretrained(tmp_path)
  spec = ModelSpec(
    checkpoint=str(tmp_path),
    overrides={"hidden_size": 8, "remat_policy": "full", "attention_impl": "blockwise"},
  )
  assert policy.checkpoint_overrides(spec) == {
    "remat_policy": "full",
    "attention_impl": "blockwise",
  }
  cfg = policy.model_config(spec)
  assert (cfg.hidden_size, cfg.remat_policy, cfg.attention_impl) == (64, "full", "blockwise")


def test_serving_memory_states_the_shipped_9b_placement():
  """bench/serving_memory.py --config reads the 9B recipe's placement (2 replicas x tensor 4, 128
  slots each, its page pool): per device the pool holds what 128 episodes need at a 16k mean
  in-flight context, not at 32k (there admission waits for pages)."""
  spec = importlib.util.spec_from_file_location("serving_memory", ROOT / "bench/serving_memory.py")
  bench = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(bench)
  r = bench.main(["--config", str(ROOT / "configs/tmax_qwen3_5_9b.py")])
  assert (r["replicas"], r["tensor"], r["slots_per_replica"], r["episodes"]) == (2, 4, 128, 256)
  kv_per_token = 8 * 2 * 4 * 256 * 2 / 4  # 8 full-attention layers, K+V, bf16, kv heads / 4
  assert r["pool_kv_bytes_per_device"] == r["pool_pages"] * 64 * kv_per_token
  assert r["pages_needed"][16384] <= r["pool_pages"] < r["pages_needed"][32768]
  assert r["kv_bytes_per_device"]["dense"] == 128 * 67584 * kv_per_token


def test_hybrid_models_are_cut_by_whole_periods():
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
  serving = ServingConfig(
    engine=EngineConfig(max_concurrent_decodes=4, max_len=64, max_prefill_length=64)
  )
  got = plan.server_cache_bytes(CFG, serving, mesh)
  assert got == 4 * 64 * kv_per_token  # num_pages 0: every slot at max_len
  fewer = dataclasses.replace(serving, engine=dataclasses.replace(serving.engine, num_pages=5))
  assert plan.server_cache_bytes(CFG, fewer, mesh) == 5 * 16 * kv_per_token
  server = plan.server_memory(CFG, serving, mesh)
  assert server["head"] == CFG.hidden_size * CFG.vocab_size * 4 / 2
  assert server["total"] == server["params"] + server["head"] + got


def _plan_cli(*args: str, timeout: int) -> dict:
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")
  r = subprocess.run(
    [sys.executable, "-m", "tmax_jax.plan", *args, "--json"],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_cli_plans_a_job_config():
  """The devices and memory come from the config's topology when the flags are not given."""
  out = _plan_cli(
    "--config=tests/loop/rl_tiny_config.py",
    "--config.topology.devices=8",
    "--config.topology.device_memory_gb=1",
    "--config.mesh.num_devices=0",
    "--config.mesh.data=2",
    "--config.mesh.fsdp=2",
    "--config.mesh.tensor=2",
    timeout=1200,
  )
  assert out["fits"] and 0 < out["peak"] < 1e9 and out["device_bytes"] == 1e9
  assert out["notes"][0] == "trainer mesh {'data': 2, 'fsdp': 2, 'sequence': 1, 'tensor': 2}"


RECIPES = [  # every recipe config that trains a real model, each sized for its own topology
  "configs/tmax_qwen3_5_9b.py",
  "configs/tmax_qwen3_8b.py",
  "configs/tmax_qwen3_6_27b.py",
  "configs/tmax_qwen3_8b_v5p32.py",
  "configs/sft_tmax_qwen3_8b.py",
  "configs/sft_terminal_horizon.py",
]


@pytest.mark.slow
@pytest.mark.parametrize(
  "config",
  # CI's slow run plans the 8B SFT (80 s); the others are `full` (3-13 min each on 2 cores;
  # docs/design/ci.md); tests/test_rehearse_tpu.py compiles every one of them for TPU.
  [c if "sft_tmax" in c else pytest.param(c, marks=pytest.mark.full) for c in RECIPES],
)
def test_recipe_mesh_passes_its_plan(config):
  """The topology a recipe config names (its `topology` field: devices, memory per device, hosts)
  fits by the config's own plan: trainer mesh, packing or fixed micro-batches, attention kernel,
  sequence axis, serving placement and page pool as shipped. Rows of 64k tokens or more are
  split over a sequence axis."""
  from tmax_jax.config_dict import from_config_dict
  from tmax_jax.loop.config import RLConfig

  out = _plan_cli(f"--config={config}", timeout=3600)
  assert out["fits"], out
  module = runpy.run_path(str(ROOT / config))
  cd = module["get_config"]()
  job = from_config_dict(RLConfig if "rollout" in cd else SFTConfig, cd)
  assert out["topology"] == job.topology.name and job.topology.devices > 0
  assert out["device_bytes"] == job.topology.device_memory_gb * 1e9
  if job.seq_len >= 65536:
    assert job.mesh.sequence > 1, job.mesh


def _plan_error(*args: str, env: dict | None = None) -> str:
  r = subprocess.run(
    [sys.executable, "-m", "tmax_jax.plan", *args],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="", **(env or {})),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == 2, r.stderr[-3000:]
  assert "Traceback" not in r.stderr, r.stderr[-3000:]
  return r.stderr.strip().splitlines()[-1]


def test_plan_mistakes_answer_in_one_line():
  """A layout that does not fit the devices, a TPU slice that does not exist, and a --tpu plan
  without the compiler venv: `error: ...`, exit 2, no traceback (issue 47)."""
  cfg = "--config=tests/loop/rl_tiny_config.py"
  line = _plan_error(
    cfg, "--devices=3", "--device_memory_gb=1", "--config.mesh.num_devices=0",
    "--config.mesh.data=2", "--config.mesh.fsdp=2",
  )  # fmt: skip
  assert line.startswith("error: --devices=3") and "mesh" in line, line
  line = _plan_error(cfg, "--tpu=v5p-12")
  assert line.startswith("error: "), line
  line = _plan_error(cfg, "--tpu=v5p-8", env={"TMAX_JAX_CACHE": "/nonexistent-tmax-cache"})
  assert line.startswith("error: no TPU compiler venv") and "tmax_jax.aot.toolchain" in line
