"""python3 -m tmax_jax.config show: every field of every job config with its value, default and
one-line meaning, overrides applied as the launchers apply them."""

import dataclasses
import pathlib
import subprocess
import sys

import pytest

from tmax_jax import cli, jobs
from tmax_jax import config as config_show
from tmax_jax.inference.server import free_port

ROOT = pathlib.Path(__file__).parents[1]


def _default(cls: type, name: str):
  return getattr(config_show.field_defaults(cls), name)


def _classes(cls, seen):
  if cls in seen:
    return
  seen.add(cls)
  for f in dataclasses.fields(cls):
    if dataclasses.is_dataclass(_default(cls, f.name)):
      _classes(type(_default(cls, f.name)), seen)


def test_every_field_of_every_job_config_has_a_meaning():
  seen = set()
  for _, cls, _, _ in jobs.JOBS:
    _classes(cls, seen)
  missing = [
    f"{cls.__module__}.{cls.__name__}.{f.name}"
    for cls in seen
    for f in dataclasses.fields(cls)
    if not dataclasses.is_dataclass(_default(cls, f.name))
    and not config_show.field_comments(cls).get(f.name)
  ]
  assert missing == [], missing


def test_show_prints_values_defaults_and_meanings_with_overrides():
  cmd = [
    sys.executable,
    "-m",
    "tmax_jax.config",
    "show",
    "configs/tmax_qwen3_5_9b.py",
    "--config.train.optimizer.warmup_ratio=0.1",
  ]
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  lines = {line.split(" = ")[0]: line for line in out.stdout.splitlines() if " = " in line}
  assert lines["train.optimizer.warmup_ratio"].startswith(
    "train.optimizer.warmup_ratio = 0.1   [default 0.0]   # warmup as a fraction"
  )
  assert "# dtype the params are stored in" in lines["model.param_dtype"]
  assert "[default" not in lines["rollout.group_size"] or "32" in lines["rollout.group_size"]
  assert lines["train.loss.hypers.grpo.clip_high"].startswith("train.loss.hypers.grpo.clip_high = ")


def test_show_without_a_file_prints_usage_and_exits_2():
  out = subprocess.run(
    [sys.executable, "-m", "tmax_jax.config"], cwd=ROOT, capture_output=True, text=True
  )
  assert out.returncode == 2 and out.stderr.startswith("error: expected `show CONFIG_FILE`")
  assert "usage: python3 -m tmax_jax.config show" in out.stderr


@pytest.mark.slow  # 11 s
def test_show_takes_every_job_and_the_one_error_path():
  """The Harbor eval config (a required field without default) shows; a missing file and a
  typo'd override are one short error with exit 2, no traceback."""
  run = lambda *a: subprocess.run(  # noqa: E731
    [sys.executable, "-m", "tmax_jax.config", "show", *a],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  out = run("configs/harbor_eval.py")
  assert out.returncode == 0 and out.stdout.startswith("# HarborEvalConfig"), out.stderr[-2000:]
  assert "tasks = 'TASKS'   [default '']" in out.stdout
  missing = run("configs/nope.py")
  assert missing.returncode == 2 and missing.stderr.startswith("error: configs/nope.py: no such")
  typo = run("configs/serve_tiny.py", "--config.serving.prot=1")
  assert typo.returncode == 2 and "did you mean config.serving.port?" in typo.stderr
  assert "Traceback" not in missing.stderr + typo.stderr


def test_every_launcher_help_lists_its_config_fields():
  """Each launcher's --help names its config's top-level fields (read from the config class's
  source, so --help loads no JAX) and points to `config show`."""
  for job, cls, launcher, _ in jobs.JOBS:
    fields = [f.name for f in dataclasses.fields(cls)]
    assert cli.config_sections(job) == fields, job
    out = subprocess.run(
      [sys.executable, launcher, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    text = " ".join(out.stdout.split())
    assert f"Top-level fields: {', '.join(fields)}." in text, launcher
    assert "python3 -m tmax_jax.config show FILE" in text, launcher


def test_show_stops_where_the_launcher_stops():
  """`config show` and the launcher resolve a config through the same two steps (jobs.resolve):
  an input the launcher refuses (here a server that does not answer) is the same one-line error
  from both, after show's table."""
  address = f"--config.address=127.0.0.1:{free_port()}"
  show = subprocess.run(
    [sys.executable, "-m", "tmax_jax.config", "show", "configs/eval_server.py", address],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  launch = subprocess.run(
    [sys.executable, "launch/eval.py", "--config=configs/eval_server.py", address],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert show.returncode == launch.returncode == 2, show.stderr[-2000:] + launch.stderr[-2000:]
  assert show.stdout.startswith("# EvalConfig") and "runs_per_task = " in show.stdout
  errors = [
    [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    for out in (show, launch)
  ]
  assert errors[0] == errors[1] and "nothing answers there" in errors[0][0], errors
  assert "Traceback" not in show.stderr + launch.stderr
