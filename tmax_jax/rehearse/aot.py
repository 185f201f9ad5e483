"""The rehearsal's programs compiled for a TPU slice or GPU nodes (the CI check that TPU and GPU
compilation work).

Each shipped RL / SFT / served-eval config is shrunk as the rehearsal shrinks it (shrink.py: tiny
dims of the same architecture, the config's mesh axes, dtype policy, packing, fp32 head, kernels),
a serve config is taken as shipped (it is already small), and every program of the job
(plan/programs.py) is compiled by XLA:TPU for `slice_name`. Two cuts keep it in CI's time, each
listed in the report: the vocabulary is cut to `VOCAB` (the head's shape, not its code path;
compile time grows with it) and a packed trainer compiles its longest bucket only (the buckets are
one program at other shapes; `python3 -m tmax_jax.plan --tpu=...` compiles them all). A program
whose lowered module equals one already compiled (the GRPO ablation's serving programs are the 9B
recipe's) is compiled once. Runs in the compiler venv (aot/toolchain.py); the target is a TPU slice
(chips.parse_slice, the default REHEARSAL_SLICE) or GPU nodes (chips.parse_node: `h100`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile

from tmax_jax import jobs
from tmax_jax.aot import chips, targets
from tmax_jax.config_dict import load_config_file
from tmax_jax.loop import ServeConfig
from tmax_jax.plan import programs
from tmax_jax.rehearse import run

VOCAB = 1024  # the compile check's vocabulary (the rehearsal keeps the real one: ~152k)
REHEARSAL_SLICE = "v6e:2x4"  # 8 chips: the rehearsal's 8 devices


def compile_job(path: str | pathlib.Path, target: chips.Slice | chips.Node | None = None) -> dict:
  """{config, job, skipped, programs: [Program.to_json]} of one config file's programs compiled
  for `target` (None: REHEARSAL_SLICE) at rehearsal size."""
  path = pathlib.Path(path)
  cd = load_config_file(str(path))
  name, cls, _ = jobs.job_of(cd)
  out = {"config": path.name, "job": name, "skipped": "", "programs": []}
  if cls is ServeConfig:
    cfg = jobs.job_config(cd)
  else:
    with tempfile.TemporaryDirectory() as tmp:
      _, rehearsal, skipped = run.plan(path.stem, cd, tmp)
    if rehearsal is None or (name == "eval" and rehearsal.cfg.policy != "server"):
      out["skipped"] = skipped or f"an eval of policy {rehearsal.cfg.policy!r} serves no model"
      return out
    cfg = rehearsal.cfg
  cfg = _cut(cfg)
  target = target or chips.parse_slice(REHEARSAL_SLICE)
  progs = programs.job_programs(cfg, targets.devices(target), processes=1)
  out["programs"] = [p.to_json(target.chip) for p in progs]
  mesh = getattr(cfg, "mesh", None)
  out["sequence"] = mesh.sequence if mesh is not None else 1  # > 1: ring attention, not splash
  out["verdict"] = programs.verdict(cfg, progs, target.chip)
  return out


def _cut(cfg):
  """The vocabulary cut to VOCAB; a packed trainer's buckets cut to its longest."""
  model = dataclasses.replace(
    cfg.model, overrides={**dict(cfg.model.overrides), "vocab_size": VOCAB}
  )
  cfg = dataclasses.replace(cfg, model=model)
  train = getattr(cfg, "train", None)
  if train is not None and train.packing.enabled and train.packing.row_lengths:
    longest = train.packing.row_lengths[-1]
    packing = dataclasses.replace(train.packing, row_lengths=(longest,))
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(train, packing=packing))
  return cfg
