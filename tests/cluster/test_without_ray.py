"""Single-host runs neither need nor load Ray: the library outside tmax_jax/cluster never imports
it, and launch/cluster.py without Ray says how to install it in one line (exit 2);
RunnerConfig.sandbox_hosts names the Ray sandbox hosts without loading Ray."""

import pathlib
import re
import subprocess
import sys

import pytest

from tmax_jax.errors import UserError
from tmax_jax.tasks.runner import RunnerConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Runs a script as if Ray were not installed (None in sys.modules: `import ray` raises
# ModuleNotFoundError, as it does without the package).
WITHOUT_RAY = "import runpy, sys; sys.modules['ray'] = None; sys.argv = sys.argv[1:]; "


def test_the_single_host_modules_do_not_import_ray():
  code = (
    "import sys; import tmax_jax.loop.rl, tmax_jax.loop.serve, tmax_jax.inference.router; "
    "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
  )
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip() == "[]"


def test_the_launcher_without_ray_is_one_line_and_exit_2():
  code = WITHOUT_RAY + "runpy.run_path(sys.argv[0], run_name='__main__')"
  out = subprocess.run(
    [sys.executable, "-c", code, "launch/cluster.py", "--replicas=2"],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 2, out.stderr[-2000:]
  assert out.stderr.strip().splitlines() == [
    "error: ray is not installed; tmax_jax.cluster needs it: pip install -e '.[cluster]' "
    "(or pip install ray==2.60.0)"
  ]


def test_runner_config_names_sandbox_hosts_without_loading_ray():
  code = (
    "import sys; from tmax_jax.tasks.runner import RunnerConfig; "
    "RunnerConfig(sandbox_hosts='ray', backend='podman'); "
    "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('tmax_jax.cluster')))"
  )
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
  "fields, error",
  [
    (dict(sandbox_hosts="k8s"), "RunnerConfig.sandbox_hosts='k8s'; expected '' (this process's "),
    (dict(sandbox_hosts="ray", backend="harbor:docker"), "backend='harbor:docker' is another"),
    (dict(host_max_starting=0), "RunnerConfig.host_max_starting=0, host_cooldown_s=300.0"),
    (dict(host_cooldown_s=-1.0), "host_cooldown_s=-1.0, host_lease_wait_s=600.0; expected >= 1"),
  ],
)
def test_bad_sandbox_hosts_settings_are_one_line_errors(fields, error):
  with pytest.raises(UserError, match=re.escape(error)):
    RunnerConfig(**fields)
