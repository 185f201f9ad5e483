"""python3 -m tmax_jax.rehearse --config=configs/X.py [--config.a.b=...] [--steps=2] [--out=DIR]

Runs the shipped config X as shipped except for size on 8 fake CPU devices (tmax_jax/rehearse).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

from absl import flags, logging
from ml_collections import config_flags

from tmax_jax import cli
from tmax_jax.rehearse import DEVICE_FLAGS, default_xla_cache


def use_fake_devices() -> None:
  """The fake devices must exist before jax initialises its backends (at the first device use):
  the rehearsal's flags replace the environment's flags of the same name; its others are kept."""
  ours = {f.split("=")[0]: f for f in DEVICE_FLAGS.split()}
  kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=")[0] not in ours]
  os.environ["XLA_FLAGS"] = " ".join([*kept, *ours.values()])
  os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main(argv) -> None:
  del argv
  from tmax_jax.rehearse import run  # noqa: PLC0415  (loads JAX; --help answers without it)

  f = flags.FLAGS
  if f.xla_cache:
    run.use_compilation_cache(f.xla_cache)
  name = pathlib.Path(f["config"].config_filename).stem
  out = pathlib.Path(f.out or f"runs/rehearse/{name}")
  job, rehearsal, skipped = run.plan(name, f.config, out, f.steps)
  if rehearsal is None:
    print(f"{name}: skipped: {skipped}")
    return
  print(rehearsal.table(), flush=True)
  report = run.rehearse(rehearsal, out)
  print(json.dumps({k: v for k, v in report.items() if k.endswith("_s")}, indent=1))
  print(f"rehearsal of {name} ({job}): ok in {report['total_s']:.0f} s; report {out / run.REPORT}")


if __name__ == "__main__":
  use_fake_devices()
  config_flags.DEFINE_config_file("config", None, "job config (configs/*.py)", lock_config=True)
  flags.DEFINE_integer("steps", 2, "optimizer steps of the first RL / SFT run (then +1 resumed)")
  flags.DEFINE_string("out", "", "output directory (default runs/rehearse/<config name>)")
  flags.DEFINE_string(
    "xla_cache",
    default_xla_cache(),
    "persistent XLA compilation cache ('' = none): the resume run and rehearsals of configs "
    "with the same programs reuse compiled executables",
  )
  flags.mark_flags_as_required(["config"])
  sys.exit(cli.run_absl(main, verbosity=logging.INFO))
