"""EngineConfig.paged_kernel = "pallas": the server's decode program holds jax's Pallas paged
attention kernel (a Mosaic `tpu_custom_call`) under a TPU-topology compile, and the plan counts
its FLOPs analytically; the default and a CPU mesh keep the pure-JAX paged attention.

The TPU half compiles (XLA:TPU through libtpu, no TPU needed) in the compiler venv of
tmax_jax.aot.toolchain, in a subprocess, for compile-only v5p:2x2x1 devices, with the plan's own
program builder (plan/programs.server_programs: prefill + decode on a 2-chip tensor replica), as
tests/models/test_splash_tpu.py does for splash. The kernel is picked by the mesh's platform:
jax.default_backend() says "cpu" in both halves.
"""

import json
import os
import subprocess
import sys

import pytest

toolchain = pytest.importorskip("tmax_jax.aot.toolchain")

# One JSON line: per paged_kernel, the decode program's Mosaic calls, its FLOPs per chip and the
# analytic FLOPs of the kernel per chip. Tiny bf16 model (head_dim 128: the kernel's lane width).
SCRIPT = r"""
import json, sys, types
import jax
import numpy as np
from jax.sharding import Mesh
from tmax_jax.inference import decode
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.models import ModelConfig
from tmax_jax.plan import programs

platform, kernels = sys.argv[1], sys.argv[2].split(",")
if platform == "tpu":
  from jax.experimental import topologies
  devices = topologies.get_topology_desc(platform="tpu", topology_name="v5p:2x2x1").devices
else:
  devices = jax.devices()
replica = Mesh(np.asarray(devices[:2]), (decode.TENSOR,))
cfg = ModelConfig(
  vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
  num_attention_heads=4, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
).with_dtypes(param_dtype="bfloat16", compute_dtype="bfloat16")
report = {"default_backend": jax.default_backend()}
for kernel in kernels:
  engine = EngineConfig(
    max_concurrent_decodes=4, max_len=128, max_prefill_length=64, page_size=16, prefill_chunk=16,
    prefill_batch=2, decode_steps=2, paged_kernel=kernel,
  )
  progs = programs.server_programs(cfg, types.SimpleNamespace(engine=engine), replica, lambda p: p)
  dec = progs[-1]
  analytic = programs.mosaic_paged_decode_flops(cfg, 4, 128, 2) / 2
  report[kernel] = {"mosaic_calls": dec.mosaic_calls, "flops": dec.flops, "analytic": analytic}
print(json.dumps(report))
"""


def _report(python: str, platform: str, kernels: str, env: dict) -> dict:
  proc = subprocess.run(
    [python, "-c", SCRIPT, platform, kernels],
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_decode_holds_the_pallas_paged_kernel_under_a_tpu_topology_compile():
  reason = toolchain.unavailable("tpu")
  if reason:
    pytest.skip(reason)
  report = _report(str(toolchain.python()), "tpu", "pallas,jax", toolchain.environ())
  assert report["default_backend"] == "cpu"  # the host; the kernel choice follows the mesh
  pallas, plain = report["pallas"], report["jax"]
  assert pallas["mosaic_calls"] >= 1, report  # the kernel, in the scanned layer's body
  assert plain["mosaic_calls"] == 0, report  # the default: the pure-JAX paged attention
  # 2 layers x 2 steps x 4 * 4 slots * 128 keys * 4 heads * 128 / 2 chips
  assert pallas["analytic"] == 2 * 2 * 4 * 4 * 128 * 4 * 128 / 2
  assert pallas["flops"] >= pallas["analytic"] > 0, report  # counted in the decode's FLOPs


def test_pallas_option_keeps_the_pure_jax_path_on_a_cpu_mesh():
  report = _report(sys.executable, "cpu", "pallas", dict(os.environ))
  assert report["pallas"]["mosaic_calls"] == 0, report
