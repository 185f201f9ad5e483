"""Which typed job config a launch config file (`configs/*.py`) describes, told by its sections,
so tools that take any config (the memory plan, `tmax_jax.config show`, the rehearsal) build the
right dataclass without being told."""

from __future__ import annotations

import ml_collections

from tmax_jax.config_dict import from_config_dict
from tmax_jax.harbor import HarborEvalConfig
from tmax_jax.loop import DemoConfig, RLConfig, ServeConfig, SFTConfig, check_inputs
from tmax_jax.loop.evaluate import EvalConfig
from tmax_jax.loop.math_eval import MathEvalConfig

# (job, its config class, its launcher, a top-level field only that class has)
JOBS = (
  ("demo", DemoConfig, "launch/demo.py", "seeds"),
  ("rl", RLConfig, "launch/train_rl.py", "rollout"),
  ("sft", SFTConfig, "launch/train_sft.py", "trajectories"),
  ("eval", EvalConfig, "launch/eval.py", "runs_per_task"),
  ("serve", ServeConfig, "launch/serve.py", "ready_file"),
  ("harbor", HarborEvalConfig, "launch/harbor_eval.py", "n_concurrent"),
  ("math_eval", MathEvalConfig, "launch/math_eval.py", "samples_per_problem"),
)


def job_of(cd: ml_collections.ConfigDict) -> tuple[str, type, str]:
  """-> (job name, config class, launcher) of a config file's ConfigDict."""
  for name, cls, launcher, marker in JOBS:
    if marker in cd:
      return name, cls, launcher
  raise ValueError(
    f"a config with top-level fields {sorted(cd)} is none of the jobs "
    f"{[name for name, *_ in JOBS]} (each is told by one of {[j[3] for j in JOBS]})"
  )


def job_class(job: str) -> type:
  return next(cls for name, cls, *_ in JOBS if name == job)


def job_config(cd: ml_collections.ConfigDict, job: str | None = None, root: str = "config"):
  """The typed, validated job config of a config file's ConfigDict (`job`: the launcher's own
  job; None: told by its sections). `root` names the flag in errors (--serve.a.b: "serve")."""
  return from_config_dict(job_class(job) if job else job_of(cd)[1], cd, root)


def resolve(cd: ml_collections.ConfigDict, job: str | None = None, root: str = "config"):
  """The job config a launcher runs: typed and validated (job_config), then every input and server
  it names checked (loop/preflight.check_inputs). Every launcher and `python3 -m tmax_jax.config
  show` go through these two steps."""
  cfg = job_config(cd, job, root)
  check_inputs(cfg, root)
  return cfg
