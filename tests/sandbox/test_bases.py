"""Stand-in bases (images/base_images.py, sandbox/bases/): the mapping, the known-deviation registry
and how a build failure names it (fast); and, in the slow suite, the steps tasks commonly run on
each stand-in built for real: `apt-get install python3-pip`, `pip install` of a package whose
dependencies upgrade typing_extensions, of an old sdist whose setup.py imports setuptools, and of
pinned releases (including ones that replace packages Debian pulled in). Every step below passes on
the real image the stand-in replaces (docs/design/task-images.md "Base images"), so it must pass
here."""

from __future__ import annotations

import io
import os
import pathlib
import tarfile

import pytest

from tests.conftest import require_base_rootfs
from tmax_jax.agents.worker import Trial
from tmax_jax.loop.evaluate.trials import trial_record
from tmax_jax.sandbox.api import SandboxError
from tmax_jax.sandbox.images import base_images, builder
from tmax_jax.tasks.format import AgentConfig, Task, TaskConfig, VerifierConfig, write_task
from tmax_jax.tasks.runner import RunnerConfig, run_noop


def test_every_recipe_resolves_and_every_deviation_names_real_bases():
  recipes = {p.parent.name for p in base_images.recipes_dir().glob("*/Dockerfile")}
  for name in recipes:
    base = base_images._load(name)  # its FROM chain resolves down to a debootstrap suite
    assert base.suite in ("bookworm", "trixie"), (name, base)
  for dev in base_images.deviations():
    assert dev.bases and set(dev.bases) <= recipes, dev
    assert dev.match and dev.what and dev.failure, dev


def test_ubuntu_and_tbench_references_map_to_the_pip_compatible_stand_ins():
  assert base_images.resolve("ubuntu:24.04").name == "ubuntu-24-04"
  assert base_images.resolve("ubuntu:22.04").name == "ubuntu-22-04"
  assert base_images.resolve("debian:trixie").name == "debian-trixie"
  tb = base_images.resolve("ghcr.io/laude-institute/t-bench/python-3-13:20250620")
  assert (tb.name, tb.suite, tb.workdir) == ("tbench-python-3-13", "trixie", "/app")
  # a recipe FROM another mapped image carries its COPY sources into the Apptainer %files
  files = base_images.recipe_files(
    base_images.resolve("ghcr.io/laude-institute/t-bench/ubuntu-24-04")
  )
  hook = base_images.recipes_dir() / "compat" / "pip-compat.sh"
  assert (hook, "/usr/local/lib/tmax/pip-compat.sh") in files


def test_a_failure_a_deviation_explains_is_named_and_others_are_left_alone():
  missing = SandboxError("line 3 RUN failed (exit 100):\nE: Unable to locate package ubuntu-dev")
  named = base_images.attribute_failure(missing, "tbench-ubuntu-24-04")
  assert isinstance(named, base_images.StandInBuildError)
  assert named.deviations == ("debian-for-ubuntu",) and "ubuntu-dev" in str(named)
  assert base_images.deviation_ids(f"build_failed: {named}") == ("debian-for-ubuntu",)
  # the same output on a stand-in without that deviation, or another failure: not attributed
  assert base_images.attribute_failure(missing, "debian-trixie") is missing
  other = SandboxError("line 3 RUN failed (exit 1):\nNo such file or directory: data.csv")
  assert base_images.attribute_failure(other, "tbench-ubuntu-24-04") is other
  assert base_images.deviation_ids("build_failed: line 3 RUN failed") == ()


def test_trial_record_of_a_build_failure_has_status_and_deviations():
  task = Task("x", TaskConfig())
  named = trial_record(task, 0, Trial(None, 0.0, "build_failed: [stand-in deviation: a, b] x"), 1)
  assert (named["status"], named["deviations"]) == ("build_failed", ["a", "b"])
  plain = trial_record(task, 0, Trial(None, 0.0, "build_failed: line 2 RUN failed"), 1)
  assert (plain["status"], plain["deviations"]) == ("build_failed", [])
  other = trial_record(task, 0, Trial(None, 0.0, "sandbox_error: x"), 1)
  assert (other["status"], other["deviations"]) == ("no_episode", [])


def _task(tmp_path: pathlib.Path, dockerfile_text: str) -> Task:
  config = TaskConfig(agent=AgentConfig(timeout_sec=60), verifier=VerifierConfig(timeout_sec=60))
  tests = {"test.sh": b"#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"}
  task = Task("x", config, environment={"Dockerfile": dockerfile_text.encode()}, tests=tests)
  return write_task(task, tmp_path / "task")


def test_a_task_build_failure_on_the_project_base_is_build_failed_without_deviation(tmp_path):
  require_base_rootfs()
  res = run_noop(_task(tmp_path, "FROM tmax-base:bookworm\nRUN exit 7\n"), RunnerConfig())
  assert res.reason.startswith("build_failed: ") and "exit 7" in res.reason, res.reason
  assert base_images.deviation_ids(res.reason) == ()


# ----------------------------------------------------------------------------------------------
# slow: the common steps on every stand-in, built for real

_SETUP_PY = (
  "from setuptools import setup\nsetup(name='tmaxold', version='0.1', py_modules=['tmaxold'])\n"
)
_CHECK_TE = (  # pydantic 2.12.5 needs typing_extensions >= 4.14.1 (newer than trixie's 4.13.2)
  "import importlib.metadata as m, pydantic; "
  "assert pydantic.VERSION == '2.12.5'; "
  "v = m.version('typing_extensions'); "
  "assert tuple(map(int, v.split('.')[:2])) >= (4, 14), v"
)
_CHECK_PINS = (
  "import importlib.metadata as m; "
  "assert [m.version(p) for p in ARGS] == VERSIONS, [m.version(p) for p in ARGS]"
)

# (FROM reference, the pip command tasks write on that image, pinned releases). The pins replace
# what the stand-in's apt-get install python3-pip brought (packaging, more-itertools on trixie's
# Ubuntu stand-ins); on debian:trixie the real image's packaging is Debian's and pip cannot
# replace it there either, so it is not pinned for that base.
_BREAK = "pip3 install --no-cache-dir --break-system-packages"
_CASES = {
  "tbench-ubuntu-24-04": (
    "ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624",
    _BREAK,
    ("six==1.16.0", "packaging==24.1", "more-itertools==10.5.0"),
  ),
  "ubuntu-24-04": (
    "ubuntu:24.04",
    _BREAK,
    ("six==1.16.0", "packaging==24.1", "more-itertools==10.5.0"),
  ),
  "debian-trixie": ("debian:trixie", _BREAK, ("six==1.16.0", "more-itertools==10.5.0")),
  "debian-bookworm": ("debian:bookworm", _BREAK, ("six==1.16.0", "packaging==24.1")),
  # jammy's pip 22.0 has no --break-system-packages (and needs none)
  "ubuntu-22-04": (
    "ubuntu:22.04",
    "pip3 install --no-cache-dir",
    ("six==1.16.0", "packaging==24.1"),
  ),
  "buildpack": ("buildpack-deps:jammy", "pip3 install --no-cache-dir", ("six==1.16.0",)),
  "python-3-13": ("python:3.13-slim", "pip install --no-cache-dir", ("six==1.16.0",)),
  "python-3-11": (
    "python:3.11",
    "pip install --no-cache-dir",
    ("six==1.16.0", "setuptools==70.0.0"),
  ),
  "tbench-python-3-13": (
    "ghcr.io/laude-institute/t-bench/python-3-13:20250620",
    "pip install --no-cache-dir",
    ("six==1.16.0",),
  ),
  "tbench-deveval": (
    "ghcr.io/laude-institute/t-bench/deveval:latest",
    "pip install --no-cache-dir",
    ("six==1.16.0", "packaging==24.1"),
  ),
}


def _old_sdist() -> bytes:
  """A setup.py-only sdist (no pyproject.toml), as old releases on PyPI are."""
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for name, text in (("setup.py", _SETUP_PY), ("tmaxold.py", "VALUE = 1\n")):
      data = text.encode()
      info = tarfile.TarInfo(f"tmaxold-0.1/{name}")
      info.size = len(data)
      tar.addfile(info, io.BytesIO(data))
  return buf.getvalue()


def _common_steps(ref: str, pip: str, pins: tuple[str, ...]) -> str:
  names = [p.split("==")[0] for p in pins]
  versions = [p.split("==")[1] for p in pins]
  check = _CHECK_PINS.replace("ARGS", repr(names)).replace("VERSIONS", repr(versions))
  # the python:* images' pip is pip's own: tasks upgrade it first (Debian's cannot be)
  upgrade = "pip install --no-cache-dir --upgrade pip" if pip.startswith("pip install") else ""
  return f"""FROM {ref}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y python3-pip && rm -rf /var/lib/apt/lists/*
RUN {upgrade or "true"}
RUN {pip} pydantic==2.12.5 && python3 -c "{_CHECK_TE}"
COPY tmaxold-0.1.tar.gz /tmp/
RUN {pip} /tmp/tmaxold-0.1.tar.gz && python3 -c "import tmaxold; assert tmaxold.VALUE == 1"
RUN {pip} {" ".join(pins)} && python3 -c "{check}"
"""


def _require_builds():
  if os.geteuid() != 0:
    pytest.skip("building stand-in bases needs root (overlayfs, chroot, debootstrap)")
  require_base_rootfs()


# CI builds the two stand-ins the failures happened on (the Ubuntu one builds ubuntu-24-04
# under it) and one python:* base; each of the others is ~2 min of apt/pip downloads and builds, so
# they are marked `full` (python3 -m pytest -m full: run for docs/design/task-images.md
# "Base images", not in CI).
_IN_CI = ("tbench-ubuntu-24-04", "python-3-13")


@pytest.mark.slow
@pytest.mark.parametrize(
  "name", [n if n in _IN_CI else pytest.param(n, marks=pytest.mark.full) for n in sorted(_CASES)]
)
def test_common_steps_pass_on_the_stand_in(name, tmp_path):
  _require_builds()
  ref, pip, pins = _CASES[name]
  assert base_images.resolve(ref).name == name and not base_images.resolve(ref).warning
  ctx = tmp_path / "ctx"
  ctx.mkdir()
  (ctx / "Dockerfile").write_text(_common_steps(ref, pip, pins))
  (ctx / "tmaxold-0.1.tar.gz").write_bytes(_old_sdist())
  try:
    builder.ensure_base(base_images.resolve(ref), quiet=True)
  except SandboxError as err:  # no network, no debootstrap: the stand-in cannot exist here
    pytest.skip(f"stand-in {name} cannot be built here: {str(err)[:300]}")
  image = builder.build_image(ctx, timeout_s=1800.0)  # a failed step raises, naming its output
  ran = [s["where"] for s in image.steps if s["line"]]  # line 0: the harness layer
  assert ran == [
    "line 3 RUN",
    "line 4 RUN",
    "line 5 RUN",
    "line 6 COPY",
    "line 7 RUN",
    "line 8 RUN",
  ]


@pytest.mark.slow
def test_an_ubuntu_only_package_fails_as_a_named_deviation(tmp_path):
  _require_builds()
  text = "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\n"
  text += "RUN apt-get update && apt-get install -y ubuntu-minimal\n"
  res = run_noop(_task(tmp_path, text), RunnerConfig())
  assert res.reason.startswith("build_failed: [stand-in deviation: debian-for-ubuntu]"), res.reason
  assert "Unable to locate package ubuntu-minimal" in res.reason
  task = Task("x", TaskConfig())
  rec = trial_record(task, 0, Trial(None, res.reward, res.reason), 1.0)
  assert (rec["status"], rec["deviations"]) == ("build_failed", ["debian-for-ubuntu"])
