"""Apptainer: exact command lines (the binary cannot be installed here); live tests where it is."""

from __future__ import annotations

import os

import pytest

from tmax_jax.sandbox import open_sandbox, resolve_backend
from tmax_jax.sandbox.api import EnvironmentSpec, Limits, SandboxError
from tmax_jax.sandbox.backends import apptainer


class _CommandLinesOnly(apptainer.ApptainerSandbox):
  """Builds the host dirs and argv without starting anything (no apptainer binary here)."""

  def _start_anchor(self):
    pass

  def _start_shell(self):
    pass

  def _stop_anchor(self):
    pass


@pytest.fixture
def dry(rootfs):
  sb = _CommandLinesOnly(
    EnvironmentSpec(image=str(rootfs), workdir="/app", limits=Limits(memory_mb=2048)),
    binary="/opt/apptainer/bin/apptainer",
  )
  yield sb
  sb.close()


def test_instance_start_command_line(dry, rootfs):
  args = dry.start_args()
  assert args[:9] == [
    "/opt/apptainer/bin/apptainer",
    "instance",
    "start",
    "--containall",
    "--cleanenv",
    "--writable-tmpfs",
    "--no-home",
    "--no-mount",
    "hostfs,cwd",
  ]
  assert args[9:12] == ["--net", "--network", "none"]
  binds = [args[i + 1] for i, a in enumerate(args) if a == "--bind"]
  assert binds == [f"{dry.binds[t]}:{t}:rw" for t in sorted(dry.binds)]
  assert {t for t in dry.binds} == {"/app", "/tmp", "/logs", "/tests", "/solution", "/home/agent"}
  assert args[-2:] == [str(rootfs.resolve()), dry.instance]
  if os.geteuid() == 0:
    i = args.index("--security")
    assert args[i : i + 6] == [
      "--security",
      "uid:1000,gid:1000",
      "--memory",
      "2048M",
      "--pids-limit",
      "512",
    ]


def test_exec_and_stop_command_lines(dry):
  argv = dry._enter(dry._inner(["bash", "-c", "true"]))
  i = argv.index("/opt/apptainer/bin/apptainer")
  assert argv[i : i + 6] == [
    "/opt/apptainer/bin/apptainer",
    "exec",
    "--cleanenv",
    "--pwd",
    "/app",
    f"instance://{dry.instance}",
  ]
  assert "prlimit" in argv[:i] and f"--as={2048 << 20}" in argv[:i]
  assert argv[-3:] == ["bash", "-c", "true"] and "/usr/bin/env" in argv and "-i" in argv
  assert dry.stop_args() == [
    "/opt/apptainer/bin/apptainer",
    "instance",
    "stop",
    "--signal",
    "KILL",
    dry.instance,
  ]


def test_network_allowed_drops_the_none_network(rootfs):
  sb = _CommandLinesOnly(EnvironmentSpec(image=str(rootfs), allow_network=True), binary="apptainer")
  try:
    assert "--network" not in sb.start_args()
  finally:
    sb.close()


def test_auto_picks_apptainer_only_when_present():
  expected = (
    "apptainer"
    if apptainer.apptainer_binary() and apptainer.apptainer_binary().endswith("apptainer")
    else "bubblewrap"
  )
  assert resolve_backend("auto") == expected
  with pytest.raises(SandboxError, match="unknown sandbox backend"):
    resolve_backend("docker")


@pytest.mark.skipif(
  apptainer.apptainer_binary() is None,
  reason="apptainer is not installed on this machine "
  "(not packaged for Debian 12; see shared/docs/machine.md)",
)
def test_live_apptainer_shell(rootfs):
  with open_sandbox(EnvironmentSpec(image=str(rootfs)), backend="apptainer") as sb:
    sb.run("cd /tmp && export X=1")
    assert sb.run("pwd; echo $X; id -u").output == "/tmp\n1\n1000\n"


def test_missing_binary_is_a_clear_error(rootfs):
  if apptainer.apptainer_binary() is not None:
    pytest.skip("apptainer is installed")
  with pytest.raises(SandboxError, match="apptainer backend unavailable"):
    open_sandbox(EnvironmentSpec(image=str(rootfs)), backend="apptainer")
