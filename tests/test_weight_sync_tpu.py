"""The weight sync's cast compiles for a multi-host TPU slice whose trainer mesh takes its hosts
round robin.

On v5p:2x2x4 (16 chips, 4 hosts of 4) the topology-ordered fsdp mesh lists the chips as
[h0 h1 h2 h3 h0 h1 ...]. The sync's staging copy (replicated per host, split over each host's
trainer chips) used to be laid out host by host, so its one jit's output device order differed
from its arguments' and XLA refused it ("Received incompatible devices for jitted computation"):
found by `python3 -m tmax_jax.plan --tpu=v5p-32` on the 8B recipe, where a real 4-host run would
have failed at its first weight push. The compile runs in the compiler venv (aot/toolchain.py),
in a subprocess, on compile-only devices; no TPU is needed.
"""

import json
import subprocess

import pytest

toolchain = pytest.importorskip("tmax_jax.aot.toolchain")

SCRIPT = r"""
import json
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh
from tmax_jax.loop import placement
from tmax_jax.loop.config import MeshConfig
from tmax_jax.loop.weight_sync import WeightSync, _host_major, served_target
from tmax_jax.models import ModelConfig, registry
from tmax_jax.plan import memory

devices = topologies.get_topology_desc(platform="tpu", topology_name="v5p:2x2x4").devices
trainer = placement.build_mesh(MeshConfig(fsdp=16), devices, "mesh", "16 trainer devices")
host0 = [d for d in devices if d.process_index == 0]
server = Mesh(np.asarray(host0).reshape(1, 4), placement.SERVING_AXES)
cfg = ModelConfig(
  vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
  num_attention_heads=8, num_key_value_heads=4, head_dim=64, tie_word_embeddings=False,
)
served = cfg.with_dtypes(param_dtype="bfloat16")
params = memory._with(registry.abstract_params(cfg), registry.param_shardings(cfg, trainer))
sync = WeightSync(trainer, served_target(served, server))
sync._cast.lower(params).compile()
order = [d.process_index for d in np.asarray(trainer.devices).flat]
print(json.dumps({"hosts": order, "host_major": _host_major(list(np.asarray(trainer.devices).flat)),
                  "direct": sync._direct}))
"""


def test_weight_sync_compiles_for_a_round_robin_multi_host_trainer_mesh():
  reason = toolchain.unavailable("tpu")
  if reason:
    pytest.skip(reason)
  proc = subprocess.run(
    [str(toolchain.python()), "-c", SCRIPT],
    capture_output=True,
    text=True,
    env=toolchain.environ(),
    timeout=300,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert not report["direct"]  # the server is one host's chips: the staging path
  # the case this test is for: the trainer mesh takes the 4 hosts round robin
  assert report["host_major"] is False, report["hosts"]
  assert sorted(report["hosts"]) == sorted(list(range(4)) * 4)
