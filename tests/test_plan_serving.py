"""The memory plan of eval (policy=server) and serve jobs: every shipped one fits the topology it
names, a layout that does not fit says so with its numbers, and the plan's server figure is what a
real engine allocates on a device (tests/conftest.py's 8 fake CPU devices)."""

import dataclasses
import gc
import os
import pathlib
import re
import subprocess
import sys

import jax
import pytest

from tmax_jax import jobs, plan
from tmax_jax.config_dict import load_config_file
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import serve
from tmax_jax.loop.config import ModelSpec, ServeConfig, ServingConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.rehearse.shrink import tiny_model

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _eight_devices():
  if jax.device_count() != 8:
    pytest.skip("needs the 8 fake CPU devices of tests/conftest.py")


def _served_configs() -> list[str]:
  """configs/*.py of the eval and serve jobs (a new one is covered without editing this test)."""
  paths = sorted((ROOT / "configs").glob("*.py"))
  return [p.name for p in paths if jobs.job_of(load_config_file(str(p)))[0] in ("eval", "serve")]


def _job(name: str):
  return jobs.job_config(load_config_file(str(ROOT / "configs" / name)))


@pytest.mark.parametrize("name", _served_configs())
def test_shipped_served_configs_fit_their_topology(name):
  """Each one that serves a model it names is planned abstractly on the devices of its topology
  and fits; an eval naming no model (it asks a running server) is told so by the CLI."""
  job = _job(name)
  if isinstance(job, EvalConfig) and job.policy != "server":
    pytest.skip(f"policy={job.policy!r} serves no model")
  if isinstance(job, EvalConfig) and not (job.model.preset or job.model.checkpoint):
    assert "names no model to serve" in _plan_cli(f"--config=configs/{name}", rc=2)
    return
  top = job.topology
  assert 0 < top.devices <= jax.device_count() and top.device_memory_gb > 0, top
  result = plan.plan_job(
    job, top.device_memory_gb, top.processes, devices=jax.devices()[: top.devices]
  )
  assert result.placement == "server only" and not result.trainer
  assert 0 < result.server["total"] == result.peak, result.server
  assert result.fits, result.table()


def test_terminal_horizon_eval_serves_the_27b_in_bf16_over_the_node():
  """The shipped layout: Qwen3.5-27B, bf16 params and K/V, every GPU of the 8 x H200 node, a page
  pool that holds each slot at 262,144 tokens; the K/V pages are the 16 full-attention layers'
  only (the Gated DeltaNet layers hold state blocks)."""
  job = _job("eval_terminal_horizon.py")
  serving, engine = job.serving, job.serving.engine
  assert job.model.preset == "qwen3.5-27b" and job.model.compute_dtype == "bfloat16"
  assert serving.replicas * serving.tensor == job.topology.devices == 8
  slots = serving.replicas * engine.max_concurrent_decodes
  assert slots == job.worker.max_parallel_episodes == 8
  assert engine.num_pages * engine.page_size >= engine.max_concurrent_decodes * 262144
  result = plan.plan_job(job, job.topology.device_memory_gb, devices=jax.devices())
  kv_per_token = 16 * 2 * 4 * 256 * 2 / serving.tensor  # layers, K+V, kv heads, head dim, bf16
  kv = engine.num_pages * engine.page_size * kv_per_token
  assert kv < result.server["cache"] < 1.1 * kv, (kv, result.server)


def _plan_cli(*args: str, rc: int = 0) -> str:
  r = subprocess.run(
    [sys.executable, "-m", "tmax_jax.plan", *args],
    cwd=ROOT,
    env=dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=""),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == rc, r.stderr[-3000:]
  assert "Traceback" not in r.stderr, r.stderr[-3000:]
  return r.stdout if rc == 0 else r.stderr.strip().splitlines()[-1]


TERMINAL_HORIZON = "--config=configs/eval_terminal_horizon.py"


def test_a_layout_that_does_not_fit_says_so_with_its_numbers():
  """The TerminalHorizon eval as it shipped before (fp32, one device, 8 dense slots of 262,144
  tokens): the table's numbers and DOES NOT FIT, exit 0."""
  out = _plan_cli(
    TERMINAL_HORIZON, "--config.serving.replicas=1", "--config.serving.tensor=1",
    "--config.model.param_dtype=float32", "--config.model.compute_dtype=float32",
    "--config.serving.engine.max_concurrent_decodes=8", "--config.serving.engine.num_pages=0",
  )  # fmt: skip
  rows = dict(re.findall(r"^server (\w+) +([\d.]+) GB$", out, re.M))
  assert float(rows["params"]) > 100 and float(rows["cache"]) > 250, out
  assert "DOES NOT FIT" in out and "of 141.0 (server only)" in out, out


def test_a_tensor_split_the_weights_do_not_divide_answers_in_one_line():
  """The 27B's 4 KV heads over tensor 8: a one-line error naming serving.tensor."""
  line = _plan_cli(
    TERMINAL_HORIZON, "--config.serving.replicas=1", "--config.serving.tensor=8", rc=2
  )
  assert line.startswith("error: ") and "serving.tensor=8 does not split" in line, line


def _engine_bytes(job: ServeConfig) -> int:
  """Bytes the engine of `job` allocates on its first device: params, prepared head and decode
  state (arrays created while it loads and starts, those alive before left out)."""
  gc.collect()
  before = jax.live_arrays()
  seen = {id(a) for a in before}
  engine = serve.engine_from_config(job)
  engine.load_params()
  for replica in engine.replicas:
    replica.start(lambda events: None)
  gc.collect()
  device = engine.mesh.devices.flat[0]
  return sum(
    s.data.nbytes
    for a in jax.live_arrays()
    if id(a) not in seen
    for s in a.addressable_shards
    if s.device == device
  )


def _check_against_engine(job: ServeConfig) -> None:
  n = job.serving.replicas * job.serving.tensor
  planned = plan.plan_job(job, 1.0, devices=jax.devices()[:n]).server["total"]
  allocated = _engine_bytes(job)
  # what the plan leaves out: the slots' sampling vectors (a few bytes per slot)
  assert planned <= allocated <= 1.01 * planned, (planned, allocated)


def test_planned_server_is_what_the_engine_allocates():
  """configs/serve_tiny.py split over tensor 2, bf16: params, head and page pool per device."""
  job = _job("serve_tiny.py")
  model = dataclasses.replace(job.model, param_dtype="bfloat16", compute_dtype="bfloat16")
  serving = dataclasses.replace(job.serving, tensor=2)
  _check_against_engine(dataclasses.replace(job, model=model, serving=serving))


@pytest.mark.slow  # a Qwen3.5 engine's random init and state compile (~30 s on 2 loaded cores)
def test_planned_hybrid_server_is_what_the_engine_allocates():
  """A tiny Qwen3.5 (full attention and Gated DeltaNet layers) over tensor 2 with a page pool
  smaller than dense: K/V pages of the attention layers, state blocks of the others."""
  spec = tiny_model(ModelSpec(preset="qwen3.5-9b", param_dtype="bfloat16"), 2)
  spec = dataclasses.replace(spec, overrides={**spec.overrides, "vocab_size": 1024})
  engine = EngineConfig(
    max_concurrent_decodes=4, max_len=512, max_prefill_length=64, page_size=16, num_pages=100
  )
  _check_against_engine(
    ServeConfig(model=spec, serving=ServingConfig(port=9000, tensor=2, engine=engine))
  )
