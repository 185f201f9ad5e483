"""EngineConfig.paged_kernel = "pallas": the server's decode program holds jax's Pallas paged
attention kernel (a Mosaic `tpu_custom_call`) under a TPU-topology compile, and the plan counts
its FLOPs analytically; the default and a CPU mesh keep the pure-JAX paged attention.

The TPU half compiles (XLA:TPU through libtpu, no TPU needed) in the compiler venv of
tmax_jax.aot.toolchain, in a subprocess, for compile-only v5p:2x2x1 devices, with the plan's own
program builder (plan/programs.server_programs: prefill + decode on a 2-chip tensor replica), as
tests/models/test_splash_tpu.py does for splash. The kernel is picked by the mesh's platform:
jax.default_backend() says "cpu" in both halves.
"""

import types

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from tests.compiler_venv import compile_report
from tmax_jax.inference import decode
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.models import ModelConfig
from tmax_jax.plan import programs

# A tiny bf16 model (head_dim 128: the kernel's lane width) served by 4 slots on 2 chips.
MODEL = dict(
  vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
  num_attention_heads=4, num_key_value_heads=2, head_dim=128, tie_word_embeddings=False,
)  # fmt: skip
ENGINE = dict(
  max_concurrent_decodes=4, max_len=128, max_prefill_length=64, page_size=16, prefill_chunk=16,
  prefill_batch=2, decode_steps=2,
)  # fmt: skip


def decode_report(devices, kernels) -> dict:
  """Per paged_kernel: the plan's decode program on a 2-device tensor replica of `devices` (its
  Mosaic calls and FLOPs per device) and the kernel's analytic FLOPs per device."""
  model, engine = MODEL, ENGINE
  replica = Mesh(np.asarray(devices[:2]), (decode.TENSOR,))
  cfg = ModelConfig(**model).with_dtypes(param_dtype="bfloat16", compute_dtype="bfloat16")
  out = {}
  for kernel in kernels:
    serving = types.SimpleNamespace(engine=EngineConfig(**engine, paged_kernel=kernel))
    dec = programs.server_programs(cfg, serving, replica, lambda p: p)[-1]
    slots, steps = engine["max_concurrent_decodes"], engine["decode_steps"]
    analytic = programs.mosaic_paged_decode_flops(cfg, slots, engine["max_len"], steps) / 2
    out[kernel] = {"mosaic_calls": dec.mosaic_calls, "flops": dec.flops, "analytic": analytic}
  return out


# The venv's script: decode_report on v5p:2x2x1's compile-only chips, one JSON line.
SCRIPT = r"""
import json
import jax
from jax.experimental import topologies
from tests.models.test_pallas_paged_tpu import decode_report
devices = topologies.get_topology_desc(platform="tpu", topology_name="v5p:2x2x1").devices
report = decode_report(devices, ["pallas", "jax"])
print(json.dumps(dict(report, default_backend=jax.default_backend())))
"""


@pytest.mark.slow  # ~14 s on the loaded 2-core box (two XLA:TPU compiles of prefill + decode)
def test_decode_holds_the_pallas_paged_kernel_under_a_tpu_topology_compile():
  report = compile_report("tpu", SCRIPT)
  assert report["default_backend"] == "cpu"  # the host; the kernel choice follows the mesh
  pallas, plain = report["pallas"], report["jax"]
  assert pallas["mosaic_calls"] >= 1, report  # the kernel, in the scanned layer's body
  assert plain["mosaic_calls"] == 0, report  # the default: the pure-JAX paged attention
  # 2 layers x 2 steps x 4 * 4 slots * 128 keys * 4 heads * 128, over 2 chips
  assert pallas["analytic"] == 2 * 2 * 4 * 4 * 128 * 4 * 128 / 2
  # the kernel's analytic count stands for the pure-JAX path's attention matmuls: same roofline
  assert pallas["flops"] == plain["flops"], report


def test_pallas_option_keeps_the_pure_jax_path_on_a_cpu_mesh():
  report = decode_report(jax.devices(), ["pallas"])
  assert report["pallas"]["mosaic_calls"] == 0, report
