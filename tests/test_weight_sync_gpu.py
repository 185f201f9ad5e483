"""The weight sync's staging programs compiled by XLA:GPU for nodes of 8 H200s: grouped, each
group's temp stays within the largest served leaf, where one program of every leaf had gathers
of many at once.
  * the 27B recipe's own layout (4 nodes, fsdp 4 x sequence 8, the bf16 server on node 0),
    cut to one layer per stack and a 2048 vocabulary: the partitioner has no collective for
    this reshard and gathers every leaf whole; pinned to the trainer's sharding, the gathers
    move bf16 (half the unpinned groups' temp), and the sync takes the pin;
  * a dense model at fsdp 16 over 2 nodes: the partitioner all-to-alls the cast values itself;
    the pin would force whole gathers, and the sync keeps the unpinned programs.
The compile runs in the compiler venv (aot/toolchain.py), in a subprocess, on compile-only
devices; no GPU is needed.
"""

import pytest

from tests.compiler_venv import compile_report

SCRIPT = r"""
import json, math, sys
import jax
import numpy as np
from jax.sharding import Mesh
from tmax_jax import jobs
from tmax_jax.aot import chips, targets
from tmax_jax.config_dict import load_config_file
from tmax_jax.loop import placement, policy
from tmax_jax.loop.config import MeshConfig
from tmax_jax.loop.weight_sync import WeightSync, served_target
from tmax_jax.models import ModelConfig, registry
from tmax_jax.plan import memory, programs

if sys.argv[1] == "27b":
  devices = targets.devices(chips.parse_node("h200x4"))
  job = jobs.job_config(load_config_file("configs/tmax_qwen3_6_27b.py"))
  cfg = programs.compilable_here(policy.model_config(job.model), "gpu")
  cfg = memory.with_layers(cfg, memory.layer_period(cfg)).replace(vocab_size=2048)
  trainer, server = memory._meshes(job, devices, targets.hosts(devices))
  served = policy.served_config(cfg, job.serving)
else:
  devices = targets.devices(chips.parse_node("h200x2"))
  trainer = placement.build_mesh(MeshConfig(fsdp=16), devices, "mesh", "16 trainer devices")
  host0 = [d for d in devices if d.process_index == 0]
  server = Mesh(np.asarray(host0).reshape(1, 8), placement.SERVING_AXES)
  cfg = ModelConfig(
    vocab_size=2048, hidden_size=512, intermediate_size=2048, num_hidden_layers=4,
    num_attention_heads=8, num_key_value_heads=8, head_dim=64, tie_word_embeddings=False,
  )
  served = cfg.with_dtypes(param_dtype="bfloat16")
params = memory._with(registry.abstract_params(cfg), registry.param_shardings(cfg, trainer))
target = served_target(served, server)
report = {"bound": max(math.prod(t.shape) * t.dtype.itemsize for t in jax.tree.leaves(target))}
for label, group_bytes, try_pin in (
  ("chosen", None, True), ("unpinned", None, False), ("one program", 1 << 60, False)
):
  sync = WeightSync(trainer, target, group_bytes=group_bytes)
  sync._cast._try_pin = try_pin
  report[label] = [c.memory_analysis().temp_size_in_bytes for c in sync.lower(params).compile()]
print(json.dumps(report))
"""


def _compile(layout: str) -> dict:
  return compile_report("gpu", SCRIPT, layout)


@pytest.mark.slow
def test_the_27b_layout_gathers_bf16_one_group_at_a_time():
  r = _compile("27b")
  chosen, unpinned, (whole,) = r["chosen"], r["unpinned"], r["one program"]
  # one group's leaves gathered whole at most (+ a few hundred bytes of the program's scalars)
  assert len(chosen) > 1 and max(chosen) <= r["bound"] + 2**20, r
  assert max(chosen) < 0.6 * max(unpinned), r  # the pin: bf16 gathers, not fp32
  assert whole > 10 * max(chosen), r  # one program: many whole leaves live at once


@pytest.mark.slow
def test_a_reshard_the_partitioner_can_do_keeps_its_own_programs():
  r = _compile("dense")
  chosen, (whole,) = r["chosen"], r["one program"]
  assert chosen == r["unpinned"], r  # all-to-alls of the cast values: no whole gathers forced
  assert len(chosen) > 1 and max(chosen) < whole, r
