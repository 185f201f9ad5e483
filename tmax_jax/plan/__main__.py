"""python3 -m tmax_jax.plan --config=configs/X.py [--devices=8 --device_memory_gb=141] [--json]
python3 -m tmax_jax.plan --config=configs/X.py --tpu=v5p-16 | --gpu=h100 [--json]

Without a target: the memory plan on fake CPU devices (plan/memory.py) of an RL, SFT, eval
(policy=server) or serve job: a served eval plans the server it starts with address '' for the
model it names (model.preset / model.checkpoint). With --tpu (an accelerator
type such as v5p-16 or a topology such as v6e:4x4) or --gpu (nodes of 8 GPUs: h100, h200, h200x2):
every program of the job compiled by XLA:TPU / XLA:GPU for that target (plan/programs.py), per
program and per chip: HBM from the compiler, whether the job fits, FLOPs, bytes, roofline time and
MFU bound. The compile runs in the compiler venv (aot/toolchain.py), which this command re-executes
itself in.
"""

from __future__ import annotations

import json
import os
import sys
import time

import jax
from absl import flags
from ml_collections import config_flags

from tmax_jax import cli, jobs
from tmax_jax.aot import chips, targets, toolchain
from tmax_jax.config_dict import load_config_file
from tmax_jax.errors import UserError
from tmax_jax.loop import RLConfig, ServeConfig, SFTConfig
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.plan import memory, programs

GB = memory.GB


def _flag_values(argv: list[str]) -> dict[str, str]:
  return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def _device_count(argv: list[str]) -> int:
  """--devices=N, else the config's topology.devices (an override on the command line or the
  config file's own; 0 = neither names it)."""
  values = _flag_values(argv)
  if values.get("devices", "").isdigit() and int(values["devices"]):
    return int(values["devices"])
  if values.get("config.topology.devices", "").isdigit():
    return int(values["config.topology.devices"])
  if not os.path.isfile(values.get("config", "")):
    return 0  # absl's parse reports a missing --config or a malformed --devices
  topology = load_config_file(values["config"]).get("topology")
  return int(topology.devices) if topology is not None else 0


def _force_fake_devices(argv: list[str]) -> None:
  """The topology's devices must become that many fake CPU devices before jax initialises its
  backends."""
  n = _device_count(argv)
  if n:
    flag = f"--xla_force_host_platform_device_count={n}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _target(values: dict[str, str]) -> chips.Slice | chips.Node | None:
  """The --tpu slice or the --gpu nodes (aot/chips.py); None: neither (the memory plan)."""
  if values.get("tpu") and values.get("gpu"):
    raise UserError("--tpu and --gpu: compile for one target at a time")
  try:
    if values.get("tpu"):
      return chips.parse_slice(values["tpu"])
    return chips.parse_node(values["gpu"]) if values.get("gpu") else None
  except ValueError as err:
    raise UserError(f"--{'tpu' if values.get('tpu') else 'gpu'}: {err}") from None


def _into_compiler_venv(argv: list[str], target: chips.Slice | chips.Node) -> None:
  """A --tpu / --gpu plan outside the compiler venv re-executes itself there (the project's own
  interpreter never loads libtpu or the CUDA plugin); a missing or mismatched venv is a one-line
  error."""
  if toolchain.in_venv():
    return
  why = toolchain.unavailable(target.chip.platform)
  if why:
    raise UserError(why)
  python = str(toolchain.python())
  os.execve(python, [python, "-m", "tmax_jax.plan", *argv[1:]], toolchain.environ())


KINDS = (RLConfig, SFTConfig, EvalConfig, ServeConfig)


def _job(config_dict):
  job = jobs.job_config(config_dict)
  if not isinstance(job, KINDS):
    names = ", ".join(k.__name__ for k in KINDS)
    raise UserError(f"the plan takes {names} jobs, not a {type(job).__name__}")
  if isinstance(job, EvalConfig) and job.policy != "server":
    raise UserError(f"an eval of policy={job.policy!r} serves no model: nothing to plan")
  if isinstance(job, EvalConfig) and not (job.model.preset or job.model.checkpoint):
    raise UserError(
      f"the eval names no model to serve (model.preset and model.checkpoint are empty; it asks "
      f"the server at address={job.address!r}, planned by that server's own config): set "
      "--config.model.preset or --config.model.checkpoint to plan the server it starts with "
      "--config.address=''"
    )
  return job


def _memory_plan(f, job) -> None:
  topology = job.topology
  devices = f.devices or topology.devices
  memory_gb = f.device_memory_gb or topology.device_memory_gb
  processes = f.processes or topology.processes
  if not devices or not memory_gb:
    raise UserError(
      "--devices / --device_memory_gb not given and the config's topology names none "
      f"(topology.devices={topology.devices}, topology.device_memory_gb="
      f"{topology.device_memory_gb})"
    )
  if jax.device_count() != devices:
    raise UserError(
      f"--devices={devices} but jax sees {jax.device_count()} devices (run as "
      "python3 -m tmax_jax.plan so the fake devices are set up first)"
    )
  try:
    result = memory.plan_job(job, memory_gb, processes, f.bucket)
  except ValueError as err:  # a layout that does not fit the devices (the fields are named)
    raise UserError(f"--devices={devices} --processes={processes}: {err}") from None
  if topology.name and (devices, memory_gb) == (topology.devices, topology.device_memory_gb):
    result.notes.insert(0, f"topology {topology.name} (the config's)")
  if isinstance(job, EvalConfig) and job.address:
    result.notes.append(
      f"address={job.address!r}: the eval asks that server; planned: the one it starts with "
      "--config.address=''"
    )
  if f.json:
    print(
      json.dumps(
        {
          "trainer": result.trainer,
          "server": result.server,
          "peak": result.peak,
          "fits": result.fits,
          "device_bytes": result.device_bytes,
          "topology": topology.name,
          "notes": result.notes,
        }
      )
    )
  else:
    print(result.table())


def _progress(start: float):
  count = [0]

  def report(p: programs.Program) -> programs.Program:
    count[0] += 1
    print(
      f"plan: compiled {count[0]}: {p.name} in {p.compile_s:.1f} s "
      f"(elapsed {time.perf_counter() - start:.0f} s)",
      file=sys.stderr,
      flush=True,
    )
    return p

  return report


def _target_plan(target: chips.Slice | chips.Node, job, as_json: bool) -> None:
  devices = targets.devices(target)
  hosts = targets.hosts(devices)
  start = time.perf_counter()
  try:
    progs = programs.job_programs(job, devices, hosts, _progress(start))
  except ValueError as err:  # a layout that does not fit the target's chips
    raise UserError(f"{target.name} ({target.topology}): {err}") from None
  verdict = programs.verdict(job, progs, target.chip)
  if as_json:
    print(
      json.dumps(
        {
          "target": target.topology,
          "name": target.name,
          "chips": target.chips,
          "hosts": hosts,
          "chip": target.chip.name,
          "programs": [p.to_json(target.chip) for p in progs],
          **verdict,
        }
      )
    )
  else:
    print(programs.table(progs, target, verdict, hosts))


def main(argv) -> None:
  del argv
  f = flags.FLAGS
  target = _target({"tpu": f.tpu, "gpu": f.gpu})
  job = _job(f.config)
  if target is not None:
    _target_plan(target, job, f.json)
  else:
    _memory_plan(f, job)


if __name__ == "__main__":
  with cli.user_errors_exit(cli.wants_debug(sys.argv[1:])):  # reads the config file first
    target = _target(_flag_values(sys.argv))
    if target is not None:
      _into_compiler_venv(sys.argv, target)
    else:
      _force_fake_devices(sys.argv)  # before jax initialises its backends (first device use)
  config_flags.DEFINE_config_file("config", None, "job config (configs/*.py)", lock_config=True)
  flags.DEFINE_integer(
    "devices", 0, "devices of the topology (fake CPU devices here); 0 = config's topology"
  )
  flags.DEFINE_float(
    "device_memory_gb", 0.0, "memory of one device, GB (1e9 bytes); 0 = config's topology"
  )
  flags.DEFINE_integer("processes", 0, "hosts the devices are split over; 0 = topology's")
  flags.DEFINE_integer(
    "bucket", -1, "packed jobs: plan this bucket of train.packing (-1 = the worst one)"
  )
  flags.DEFINE_string(
    "tpu",
    "",
    "compile every program of the job for this TPU slice with XLA:TPU (v5p-16, v6e:4x4, ...) "
    "and report HBM, FLOPs and the roofline per chip",
  )
  flags.DEFINE_string(
    "gpu",
    "",
    "compile every program of the job for these GPU nodes of 8 with XLA:GPU (h100, h200, "
    "h200x2 = two nodes, ...) and report HBM, FLOPs and the roofline per GPU",
  )
  flags.DEFINE_bool("json", False, "print JSON instead of the table")
  flags.mark_flags_as_required(["config"])
  cli.run_absl(main)
