"""The accelerator compilers' venv: libtpu (XLA:TPU and Mosaic) beside the project's own jax.

`.ci/install` runs `python3 -m tmax_jax.aot.toolchain`, which creates <cache>/aot/venv once with
`--system-site-packages` (it sees this interpreter's jax, flax, ... and adds only the compiler) and
installs the libtpu that the installed jax pins in its `tpu` extra. The project's own interpreter
never sees libtpu, so ordinary commands initialise no TPU backend and import nothing more; only a
process started with `python()` and `environ()` (the plan's `--tpu`, the TPU-compile tests) can
compile for a TPU topology. A second run with the same pins returns at once. `--gpu` adds the CUDA
plugin at jax's version (the deviceless XLA:GPU compile; several GB, so not installed by default).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys

from tmax_jax import cache

PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]  # the checkout holding tmax_jax/
PLATFORMS = ("tpu", "gpu")
INSTALL = "python3 -m tmax_jax.aot.toolchain"


def venv_dir() -> pathlib.Path:
  return cache.root() / "aot" / "venv"


def python() -> pathlib.Path:
  return venv_dir() / "bin" / "python"


def _stamp_path() -> pathlib.Path:
  return venv_dir() / "tmax-stamp.json"


def requirements(platform: str) -> list[str]:
  """The compiler packages that pair with the installed jax: its `tpu` extra's libtpu pin; for
  GPU the CUDA 12 plugin and PJRT at jax's exact version."""
  jax_version = importlib.metadata.version("jax")
  if platform == "gpu":
    return [f"jax-cuda12-plugin[with-cuda]=={jax_version}", f"jax-cuda12-pjrt=={jax_version}"]
  if platform != "tpu":
    raise ValueError(f"platform {platform!r}; expected one of {list(PLATFORMS)}")
  for req in importlib.metadata.requires("jax") or ():
    m = re.match(r"libtpu\s*(==\s*[^;]+);\s*extra\s*==\s*\"tpu\"", req)
    if m:
      return [f"libtpu{m.group(1).replace(' ', '')}"]
  raise RuntimeError(f"jax {jax_version} names no libtpu in its `tpu` extra")


def _installed() -> dict:
  path = _stamp_path()
  return json.loads(path.read_text()) if path.is_file() else {}


def unavailable(platform: str) -> str | None:
  """None when the venv holds the `platform` compiler paired with this jax, else one line saying
  what is missing and the command that installs it."""
  if not python().exists() or not _stamp_path().is_file():
    return f"no {platform.upper()} compiler venv at {venv_dir()} (run: {INSTALL}" + (
      " --gpu)" if platform == "gpu" else ")"
    )
  have, want = _installed().get(platform), requirements(platform)
  if have != want:
    jax_version = importlib.metadata.version("jax")
    return (
      f"the compiler venv has {have or 'no ' + platform.upper() + ' compiler'}; jax "
      f"{jax_version} pairs with {want} (run: {INSTALL}" + (" --gpu)" if platform == "gpu" else ")")
    )
  return None


def _pip(*args: str) -> None:
  res = subprocess.run(
    [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
    capture_output=True,
    text=True,
    check=False,
  )
  if res.returncode != 0:
    raise RuntimeError(f"pip install {' '.join(args)} failed:\n{res.stdout}{res.stderr}"[-3000:])


def ensure(platforms: tuple[str, ...] = ("tpu",)) -> pathlib.Path:
  """Creates the venv and installs each platform's compiler where missing (idempotent, under a
  lock); returns the venv directory. Raises RuntimeError when pip fails."""
  if all(unavailable(p) is None for p in platforms):
    return venv_dir()
  venv_dir().parent.mkdir(parents=True, exist_ok=True)
  with open(venv_dir().parent / "venv.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not python().exists():
      subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv_dir())], check=True
      )
    stamp = _installed()
    for platform in platforms:
      if unavailable(platform) is not None:
        _pip(*requirements(platform))
        stamp[platform] = requirements(platform)
        tmp = _stamp_path().with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(stamp))
        tmp.rename(_stamp_path())
  return venv_dir()


def environ(extra: dict | None = None) -> dict[str, str]:
  """The environment of a compile process in the venv: JAX on CPU (the compilers run from
  topology descriptions, no device is opened), libtpu's metadata lookups answered so it prints no
  warnings, the GPU compile without autotuning (there is no GPU to time kernels on), this checkout
  first on PYTHONPATH. libtpu's one-process-per-machine lock is off: a compile opens no chip."""
  env = dict(os.environ)
  env["JAX_PLATFORMS"] = "cpu"
  env.setdefault("TPU_ACCELERATOR_TYPE", "v5p-8")
  env.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  env.setdefault("TPU_SKIP_MDS_QUERY", "1")
  env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # compiles in parallel (test workers)
  env["TF_CPP_MIN_LOG_LEVEL"] = env.get("TF_CPP_MIN_LOG_LEVEL", "3")
  flags = "--xla_gpu_autotune_level=0 --xla_gpu_enable_triton_gemm=false"
  if flags not in env.get("XLA_FLAGS", ""):
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
  if (PACKAGE_ROOT / "pyproject.toml").is_file():
    env["PYTHONPATH"] = os.pathsep.join(
      p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
    )
  env.pop("VIRTUAL_ENV", None)
  env.update(extra or {})
  return env


def in_venv() -> bool:
  """This interpreter is the compiler venv's (libtpu importable)."""
  return pathlib.Path(sys.prefix).resolve() == venv_dir().resolve()


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  platforms = ("tpu", "gpu") if "--gpu" in argv else ("tpu",)
  try:
    print(ensure(platforms))
  except RuntimeError as err:
    print(f"error: {err}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
