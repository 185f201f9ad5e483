"""The weight sync's cast compiles for multi-host TPU slices whose trainer mesh mixes its hosts.

On v5p:2x2x4 (16 chips, 4 hosts of 4) the topology-ordered fsdp mesh lists the chips round robin
[h0 h1 h2 h3 h0 h1 ...]; on v5p:2x4x4 (32 chips, 8 hosts) the 27B's fsdp 2 x sequence 16 mesh
interleaves them in a mixed radix ([h0 h2 h4 h6 h0 h2 h4 h6 h1 h3 ...]). The sync's staging copy
(replicated per host, split over each host's trainer chips) must keep the trainer mesh's flat
order, or its one jit's outputs and arguments differ in device order and XLA refuses it
("Received incompatible devices for jitted computation"): the round-robin case was found by
`python3 -m tmax_jax.plan --tpu=v5p-32` on the 8B recipe, the mixed one by the 27B on v5p-64,
where a real run would have failed at its first weight push. The compile runs in the compiler
venv (aot/toolchain.py), in a subprocess, on compile-only devices; no TPU is needed.
"""

import pytest

from tests.compiler_venv import compile_report

SCRIPT = r"""
import json, sys
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh
from tmax_jax.loop import placement
from tmax_jax.loop.config import MeshConfig
from tmax_jax.loop.weight_sync import WeightSync, host_layout, served_target
from tmax_jax.models import ModelConfig, registry
from tmax_jax.plan import memory

topology, fsdp, sequence = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
devices = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
mesh_cfg = MeshConfig(fsdp=fsdp, sequence=sequence)
trainer = placement.build_mesh(mesh_cfg, devices, "mesh", f"{len(devices)} trainer devices")
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
print(json.dumps({"hosts": order, "layout": host_layout(order), "direct": sync._direct}))
"""


@pytest.mark.parametrize(
  "topology,fsdp,sequence,hosts,layout",
  [
    ("v5p:2x2x4", 16, 1, 4, "round robin"),
    pytest.param("v5p:2x4x4", 2, 16, 8, "mixed radix", marks=pytest.mark.slow),
  ],
)
def test_weight_sync_compiles_for_a_multi_host_trainer_mesh(
  topology, fsdp, sequence, hosts, layout
):
  report = compile_report("tpu", SCRIPT, topology, str(fsdp), str(sequence))
  assert not report["direct"]  # the server is one host's chips: the staging path
  n = len(report["hosts"])
  assert sorted(report["hosts"]) == sorted(list(range(hosts)) * (n // hosts))
  shape, is_host = report["layout"]
  if layout == "round robin":  # the case the first test is for: [h0 h1 h2 h3 h0 ...]
    assert shape == [n // hosts, hosts] and is_host == [False, True], report["hosts"]
  else:  # neither host by host nor round robin: one axis per bit of the flat index
    assert len(shape) > 2 and set(shape) == {2}, report["hosts"]
