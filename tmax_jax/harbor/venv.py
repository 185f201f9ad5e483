"""The Harbor venv: Harbor (Python >= 3.12) next to the project's own Python 3.11.

`.ci/install` runs `python3 -m tmax_jax.harbor.venv`, which creates <cache>/harbor/venv once from a
Python 3.12 (pyenv's or the system's), installs the pinned Harbor and podman-compose into it, and
this package with `--no-deps` (the plugin imports only tasks/ and sandbox/, never jax), so
`<venv>/bin/harbor run -e tmax_jax.harbor.environment:TmaxEnvironment ...` works. A second run
with the same pins returns at once. Processes started in it get `environ()`: the venv first on
PATH (podman-compose), this checkout first on PYTHONPATH, podman pointed at the project's storage
and containers.conf (runc, explicit ulimits: machine.md), Harbor's telemetry and LiteLLM's model
price download off (no network here).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys

from tmax_jax.sandbox.images import base_rootfs, podman_store

REQUIREMENTS = ("harbor==0.26.0", "podman-compose==1.6.0")
PYTHONS = ("3.12", "3.13")  # Harbor needs >= 3.12
PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]  # the checkout holding tmax_jax/


def venv_dir() -> pathlib.Path:
  return base_rootfs.cache_dir() / "harbor" / "venv"


def bin_path(name: str) -> pathlib.Path:
  """A console script (harbor, podman-compose) or the interpreter (python) of the venv."""
  return venv_dir() / "bin" / name


def _stamp() -> dict:
  return {"requirements": list(REQUIREMENTS), "project": str(PACKAGE_ROOT)}


def unavailable() -> str | None:
  """None when the venv is installed with the current pins, else why Harbor cannot run."""
  stamp = venv_dir() / "tmax-stamp.json"
  if not bin_path("python").exists() or not stamp.is_file():
    return f"no Harbor venv at {venv_dir()} (python3 -m tmax_jax.harbor.venv creates it)"
  have = json.loads(stamp.read_text())
  if have.get("requirements") != list(REQUIREMENTS):
    return f"the Harbor venv has {have.get('requirements')}, expected {list(REQUIREMENTS)}"
  return None


def _installed_project() -> str | None:
  stamp = venv_dir() / "tmax-stamp.json"
  return json.loads(stamp.read_text()).get("project") if stamp.is_file() else None


def find_python() -> str | None:
  """A Python >= 3.12 interpreter: on PATH, else one of pyenv's versions."""
  for version in PYTHONS:
    found = shutil.which(f"python{version}")
    if found and _runs(found):
      return found
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    for candidate in sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}")):
      if _runs(candidate):
        return candidate
  return None


def _runs(python: str) -> bool:
  res = subprocess.run([python, "-c", "import venv"], capture_output=True, check=False)
  return res.returncode == 0


def _pip(*args: str) -> None:
  res = subprocess.run(
    [str(bin_path("python")), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
    capture_output=True,
    text=True,
    check=False,
  )
  if res.returncode != 0:
    raise RuntimeError(f"pip install {' '.join(args)} failed:\n{res.stdout}{res.stderr}"[-3000:])


def ensure() -> pathlib.Path:
  """Creates or updates the venv (idempotent, under a lock); returns its directory. Raises
  RuntimeError naming what is missing (no Python >= 3.12, a failed pip install)."""
  if unavailable() is None and _installed_project() == str(PACKAGE_ROOT):
    return venv_dir()
  venv_dir().parent.mkdir(parents=True, exist_ok=True)
  with open(venv_dir().parent / "venv.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if unavailable() is None:  # only the checkout the editable install points at changes
      if _installed_project() != str(PACKAGE_ROOT):
        _pip("--no-deps", "-e", str(PACKAGE_ROOT))
        (venv_dir() / "tmax-stamp.json").write_text(json.dumps(_stamp()))
      return venv_dir()
    if not bin_path("python").exists():
      python = find_python()
      if python is None:
        raise RuntimeError(
          f"Harbor needs Python >= 3.12; none of python{'/python'.join(PYTHONS)} on PATH or in "
          "pyenv (e.g. `pyenv install 3.12`)"
        )
      subprocess.run([python, "-m", "venv", str(venv_dir())], check=True)
    _pip(*REQUIREMENTS)
    _pip("--no-deps", "-e", str(PACKAGE_ROOT))
    (venv_dir() / "tmax-stamp.json").write_text(json.dumps(_stamp()))
  return venv_dir()


def storage_conf() -> pathlib.Path:
  """A containers storage.conf naming the storage the podman backend uses (images/podman_store.py),
  so Harbor's podman environment sees the task images imported there (harbor/oci.py)."""
  argv = podman_store.podman_cmd()
  root, runroot = argv[argv.index("--root") + 1], argv[argv.index("--runroot") + 1]
  text = f'[storage]\ndriver = "overlay"\ngraphroot = "{root}"\nrunroot = "{runroot}"\n'
  path = podman_store.podman_dir() / "storage.conf"
  if not path.is_file() or path.read_text() != text:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.rename(path)
  return path


def environ(extra: dict | None = None) -> dict[str, str]:
  """The environment of a process in the Harbor venv (the module docstring says what is set)."""
  env = dict(os.environ)
  env["PATH"] = f"{venv_dir() / 'bin'}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}"
  if (PACKAGE_ROOT / "pyproject.toml").is_file():  # a checkout: its tmax_jax, not another one's
    env["PYTHONPATH"] = os.pathsep.join(
      p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
  env["CONTAINERS_CONF"] = str(podman_store.containers_conf())
  env["CONTAINERS_STORAGE_CONF"] = str(storage_conf())
  env["HARBOR_TELEMETRY"] = "0"
  env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
  env.pop("VIRTUAL_ENV", None)
  env.update(extra or {})
  return env


def main() -> int:
  try:
    path = ensure()
  except RuntimeError as err:
    if find_python() is None:  # no 3.12 here: Harbor's uses are skipped
      print(f"Harbor venv skipped: {err}", file=sys.stderr)
      return 0
    print(f"error: {err}", file=sys.stderr)
    return 1
  print(path)
  return 0


if __name__ == "__main__":
  sys.exit(main())
