"""The bridge protocol, Harbor task names and views (validated by Harbor's own task loader)."""

import pathlib
import subprocess

import pytest

from tests.harbor.harbor_helpers import require_harbor, write_tasks
from tmax_jax.harbor import protocol, venv
from tmax_jax.harbor import sandbox as harbor_sandbox
from tmax_jax.harbor import tasks as harbor_tasks
from tmax_jax.sandbox.api import CommandResult, SandboxError
from tmax_jax.tasks import runner
from tmax_jax.tasks.format import load_task


def test_exec_script_runs_in_workdir_with_env(tmp_path):
  script = protocol.exec_script("echo $A $B; pwd", str(tmp_path), {"A": "x y", "B": "$HOME"})
  out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
  assert out.stdout == f"x y $HOME\n{tmp_path}\n"  # values are quoted, not expanded
  missing = protocol.exec_script("echo never", str(tmp_path / "nope"), None)
  assert subprocess.run(["bash", "-c", missing], capture_output=True).returncode == 1


def test_return_code_and_messages():
  assert protocol.return_code(CommandResult("", 3)) == 3
  assert protocol.return_code(CommandResult("", None, "timeout")) == protocol.KILLED_RC
  assert protocol.decode(protocol.encode({"id": 1, "ok": True}), "x") == {"id": 1, "ok": True}
  with pytest.raises(protocol.BridgeError, match="reply: not a JSON line"):
    protocol.decode(b"Traceback ...\n", "reply")
  with pytest.raises(protocol.BridgeError, match="expected a JSON object"):
    protocol.decode(b"[1]\n", "reply")


def test_backend_names():
  assert harbor_sandbox.is_harbor("harbor:podman") and not harbor_sandbox.is_harbor("podman")
  assert not harbor_sandbox.is_harbor(None)
  assert runner.trial_plugin("harbor:podman") is harbor_sandbox  # named, imported on first use
  assert runner.trial_plugin("podman") is None and runner.trial_plugin(None) is None
  with pytest.raises(SandboxError, match="unknown provider 'modal'"):
    runner.trial_plugin("modal:x")
  assert harbor_sandbox.environment_kind("harbor:a.b:C") == "a.b:C"
  with pytest.raises(SandboxError, match="name a Harbor environment"):
    harbor_sandbox.environment_kind("harbor:")


@pytest.mark.parametrize(
  "name, expected",
  [("line_tool-d0-s0", "tmax/line_tool-d0-s0"), ("org/x y", "org/x-y"), ("..", "tmax/task")],
)
def test_harbor_name(name, expected):
  assert harbor_tasks.harbor_name(name) == expected


def test_views_are_valid_harbor_tasks(tmp_path):
  """Our writer's task.toml is refused by Harbor 0.26 (bare name, author strings); the view of
  the same task is accepted, and names the image and network it is given."""
  require_harbor()
  write_tasks(tmp_path / "ours", levels=(0,))
  task = load_task(next((tmp_path / "ours").iterdir()))
  view = harbor_tasks.harbor_view(task, tmp_path / "view", "localhost/x:1", public_network=True)
  check = (
    "import sys; from harbor.models.task.task import Task; "
    "print(*(Task.is_valid_dir(p) for p in sys.argv[1:]))"
  )
  res = subprocess.run(
    [str(venv.bin_path("python")), "-c", check, str(task.path), str(view.path)],
    capture_output=True,
    text=True,
    env=venv.environ(),
    check=True,
  )
  assert res.stdout.split() == ["False", "True"]
  again = load_task(view.path)  # our reader takes the view too
  assert again.instruction == task.instruction
  assert again.config.environment.docker_image == "localhost/x:1"
  assert again.config.environment.allow_internet
  assert any("allow_internet false -> true" in n for n in view.notes)
  assert (view.path / "environment" / "docker-compose.yaml").read_text() == (
    harbor_tasks.INIT_COMPOSE
  )
  assert pathlib.Path(view.path / "solution" / "solve.sh").is_file()


def test_venv_side_imports_no_ml_stack():
  """The plugin, bridge and exporter run in the Harbor venv, where only Harbor and this package
  (no dependencies) are installed: they must not import jax or numpy."""
  require_harbor()
  check = (
    "import sys, tmax_jax.harbor.environment, tmax_jax.harbor.bridge, tmax_jax.harbor.export; "
    "print(sorted({m.split('.')[0] for m in sys.modules} & {'jax', 'numpy', 'torch', 'flax'}))"
  )
  res = subprocess.run(
    [str(venv.bin_path("python")), "-c", check],
    capture_output=True,
    text=True,
    env=venv.environ(),
    check=True,
  )
  assert res.stdout.strip() == "[]"
