"""Test-time installs prefetched at build time (the sandboxes are offline): the steps
tasks/environment.prefetch_steps writes from a task's test scripts, with and without the
benchmark's package cutoff (RunnerConfig.packages_before), and, in the slow suite, the TB1
DevEval task whose reference solution fails against today's packages and passes against those
of its benchmark's release (issue 45 point 9: markdown2 / beautifulsoup4 / lxml / pyquery
resolved at their newest give the sample's read time 217 s instead of 236 s)."""

import dataclasses
import pathlib

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.tasks import environment, tb1
from tmax_jax.tasks.format import load_task, write_task
from tmax_jax.tasks.runner import RunnerConfig, run_oracle, task_cutoff

TB1 = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "tb1-public-sample"
READTIME = TB1 / "deveval-python-readtime-implementation"
TEST_SH = """#!/bin/bash
pip install -r docs/requirements.txt
python3 -m pip install markdown2==2.4.0 --quiet
"""


def _task(tmp_path: pathlib.Path, source_format: str = ""):
  task = tmp_path / "t"
  (task / "tests").mkdir(parents=True)
  (task / "tests" / "test.sh").write_text(TEST_SH)
  (task / "instruction.md").write_text("do it\n")
  meta = f'source_format = "{source_format}"\n' if source_format else ""
  (task / "task.toml").write_text(f'version = "1.0"\n[metadata]\n{meta}')
  return load_task(task)


def test_installs_are_prefetched_with_the_images_pip_by_default(tmp_path):
  steps = environment.prefetch_steps(_task(tmp_path))
  assert len(steps) == 2, steps
  assert 'python3 -m pip install -q "$req"' in steps[0] and "docs/requirements.txt" in steps[0]
  assert steps[1].startswith(
    "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q markdown2==2.4.0"
  )
  assert not any("exclude-newer" in s for s in steps)


def test_a_cutoff_resolves_every_prefetched_install_before_it(tmp_path):
  task = _task(tmp_path, "terminal-bench-1")
  cutoff = task_cutoff(task, RunnerConfig(packages_before="release"))
  assert cutoff == "2025-05-01T00:00:00Z"
  steps = environment.prefetch_steps(task, cutoff)
  uv = "uv pip install -q --system --break-system-packages --python python3"
  assert all(f"{uv} --exclude-newer {cutoff}" in s for s in steps), steps
  assert '"$req"' in steps[0] and "markdown2==2.4.0" in steps[1]
  assert task_cutoff(task, RunnerConfig()) == ""  # the newest: the image's pip, as before


@pytest.mark.slow  # builds the DevEval stand-in's task image twice (network), ~1-3 min
@pytest.mark.timeout(1500)
def test_the_readtime_reference_passes_with_its_benchmarks_packages(tmp_path):
  if not READTIME.is_dir():
    pytest.skip(f"the TB1 sample is not at {TB1}")
  require_base_rootfs()
  task = write_task(tb1.convert_tb1(READTIME), tmp_path / "readtime")
  base = RunnerConfig(backend="bubblewrap", memory_mb=4096, min_verifier_timeout_s=0.0)
  dated = run_oracle(task, dataclasses.replace(base, packages_before="release"))
  assert dated.reward == 1.0, (dated.reason, dated.logs.get("test-stdout.txt", "")[-2000:])
  assert "--exclude-newer 2025-05-01T00:00:00Z" in dated.logs["environment.txt"]
