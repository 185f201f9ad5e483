"""A server replica's programs compile for a v6e slice whose hosts hold non-consecutive chip ids.

On v6e:4x4 libtpu numbers host 0's four chips 0, 1, 4, 5, and XLA:TPU refuses a program over them
("Unexpected device_id 4 [0:2] in replica group (0,1,2,3) :: target has 4 device_id"): found by
`python3 -m tmax_jax.plan --tpu=v6e-64` on the 9B RL, whose colocated server's prefill failed after
the trainer compiled. The plan compiles the server's programs on the same chips of a one-host slice
(v6e:2x2, ids 0..3: aot/targets.one_host_chips); the weight sync, one program over every
trainer chip, still writes into host 0's own chips, which XLA:TPU takes. Runs in the compiler
venv (aot/toolchain.py), in a subprocess, on compile-only devices; no TPU is needed.
"""

import pytest

from tests.compiler_venv import compile_report
from tests.test_weight_sync_tpu import SCRIPT as SYNC_SCRIPT

SCRIPT = r"""
import dataclasses, json
from tmax_jax import jobs
from tmax_jax.aot import chips, targets
from tmax_jax.config_dict import load_config_file
from tmax_jax.plan import programs

cfg = jobs.job_config(load_config_file("configs/serve_tiny.py"))
model = dataclasses.replace(cfg.model, overrides={**cfg.model.overrides, "num_key_value_heads": 4})
cfg = dataclasses.replace(cfg, model=model, serving=dataclasses.replace(cfg.serving, tensor=4))
devices = targets.tpu_devices(chips.parse_slice("v6e:4x4"))
host0 = [d for d in devices if d.process_index == 0]
twins = targets.one_host_chips(host0)
progs = programs.job_programs(cfg, devices, targets.hosts(devices))
host0_of = lambda t: [d for d in targets.tpu_devices(chips.parse_slice(t)) if d.process_index == 0]
v5p, v6e_8x8 = host0_of("v5p:2x2x4"), host0_of("v6e:8x8")
print(json.dumps({
  "v5p_kept": targets.one_host_chips(v5p) == v5p,  # ids 0..3: compiled where they are
  "v6e_8x8": [[d.id for d in v6e_8x8], [d.id for d in targets.one_host_chips(v6e_8x8)]],
  "host0": [d.id for d in host0],
  "twins": [d.id for d in twins],
  "same_places": [list(a.coords) for a in host0] == [list(b.coords) for b in twins],
  "programs": [p.to_json() for p in progs],
}))
"""


@pytest.mark.slow  # ~10 s alone, 30 s on a loaded box: two XLA:TPU compiles
def test_server_programs_compile_over_a_v6e_host_with_non_consecutive_ids():
  report = compile_report("tpu", SCRIPT)
  assert report["host0"] == [0, 1, 4, 5]  # the case the test is for
  assert sorted(report["twins"]) == [0, 1, 2, 3] and report["same_places"], report
  assert report["v6e_8x8"] == [[0, 1, 8, 9], [0, 1, 2, 3]] and report["v5p_kept"], report
  names = [p["name"] for p in report["programs"]]
  assert names[0].startswith("prefill") and names[1].startswith("decode"), names
  for p in report["programs"]:
    assert p["side"] == "server" and p["devices"] == 4, p
    assert 0 < p["memory"]["total"] < 32e9 and p["flops"] > 0, p


@pytest.mark.slow  # ~11 s: an XLA:TPU compile over 64 chips
def test_weight_sync_compiles_to_a_v6e_host_with_non_consecutive_ids():
  """The sync stays compiled over the trainer's chips into host 0's own (0, 1, 8, 9 on v6e:8x8):
  one program over all 64 chips, which XLA:TPU takes. The 9B's v6e-64 layout, fsdp 4 x sequence
  16, lists the chips host by host."""
  report = compile_report("tpu", SYNC_SCRIPT, "v6e:8x8", "4", "16")
  assert not report["direct"] and report["hosts"] == [h for h in range(16) for _ in range(4)]
  assert report["layout"] == [[16, 4], [True, False]], report["layout"]
