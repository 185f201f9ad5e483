"""Base task images: the debootstrap rootfs (bubblewrap, podman) cached by the definition's hash.

`sandbox/` at the repository root holds the Apptainer definition (base.def), the rootfs builder
(build_rootfs.sh) and the package list both share (packages.txt). The rootfs is built once into
`<cache>/rootfs/<hash>` (cache: see cache_dir) where <hash> covers build_rootfs.sh and packages.txt,
so editing either rebuilds it; the build goes into a temp dir that is renamed into place only when
it succeeded.

CLI (run once by .ci/install before the tests):  python3 -m tmax_jax.sandbox [--force]
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

from tmax_jax import cache
from tmax_jax.sandbox.api import SandboxError

# The rootfs is a function of these two (base.def installs the same packages.txt for Apptainer).
DEFINITION_FILES = ("build_rootfs.sh", "packages.txt")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
COMPLETE_MARKER = ".tmax_rootfs_complete"


def sandbox_dir() -> pathlib.Path:
  """The directory of base.def / build_rootfs.sh / packages.txt (TMAX_SANDBOX_DIR overrides)."""
  env = os.environ.get("TMAX_SANDBOX_DIR")
  return pathlib.Path(env) if env else pathlib.Path(__file__).resolve().parents[3] / "sandbox"


def cache_dir() -> pathlib.Path:
  """Where images, layers and the podman store live: tmax_jax's cache root (tmax_jax/cache.py)."""
  return cache.root()


def read_packages(path: pathlib.Path | None = None) -> list[str]:
  """The package names of a package list (default packages.txt; comments and blanks dropped)."""
  path = path or sandbox_dir() / "packages.txt"
  lines = path.read_text().splitlines()
  return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]


def definition_hash(directory: pathlib.Path | None = None) -> str:
  """sha256 over the definition files (name + content), 16 hex chars."""
  directory = directory or sandbox_dir()
  digest = hashlib.sha256()
  for name in DEFINITION_FILES:
    path = directory / name
    if not path.is_file():
      raise SandboxError(
        f"image definition file {path} is missing (expected {', '.join(DEFINITION_FILES)})"
      )
    digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
  return digest.hexdigest()[:16]


def detect_mirror(apt_dir: pathlib.Path = pathlib.Path("/etc/apt")) -> str:
  """The Debian mirror apt uses on this host (debootstrap needs a reachable one)."""
  texts = []
  for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]:
    if path.is_file() and path.suffix in (".list", ".sources"):
      with contextlib.suppress(OSError):
        texts.append(path.read_text())
  for text in texts:
    # deb822 stanzas: URIs + Suites.
    for stanza in re.split(r"\n\s*\n", text):
      uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
      suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
      if (
        uris
        and suites
        and "bookworm" in suites.group(1).split()
        and "security" not in uris.group(1)
      ):
        return uris.group(1).rstrip("/")
    # one-line format: deb URI SUITE COMPONENTS.
    for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s", text, re.M):
      return m.group(1).rstrip("/")
  return DEFAULT_MIRROR


def rootfs_path(directory: pathlib.Path | None = None) -> pathlib.Path:
  """Where the rootfs of the current definition lives (built or not)."""
  return cache_dir() / "rootfs" / definition_hash(directory)


def is_built(path: pathlib.Path) -> bool:
  return (path / COMPLETE_MARKER).is_file()


def ensure_base_rootfs(
  *, force: bool = False, mirror: str | None = None, quiet: bool = False
) -> pathlib.Path:
  """Returns the base rootfs directory, building it first when the cache lacks it (minutes).

  Concurrent callers serialize on a file lock; the loser finds the finished build.
  """
  directory = sandbox_dir()
  return _ensure_rootfs(
    rootfs_path(directory),
    directory / "packages.txt",
    "bookworm",
    force=force,
    mirror=mirror,
    quiet=quiet,
  )


def debootstrap_path(suite: str) -> pathlib.Path:
  """The minimal rootfs of a Debian suite (sandbox/bases/minimal.txt), built or not."""
  digest = hashlib.sha256(suite.encode())
  for path in (sandbox_dir() / "build_rootfs.sh", sandbox_dir() / "bases" / "minimal.txt"):
    digest.update(path.read_bytes())
  return cache_dir() / "rootfs" / f"{suite}-{digest.hexdigest()[:16]}"


def ensure_debootstrap(suite: str, *, quiet: bool = True) -> pathlib.Path:
  """The `FROM debootstrap:<suite>` root of the base recipes (sandbox/bases/*/Dockerfile)."""
  if not re.fullmatch(r"[a-z]+", suite):
    raise SandboxError(
      f"debootstrap suite {suite!r}: expected a Debian codename (bookworm, trixie)"
    )
  return _ensure_rootfs(
    debootstrap_path(suite), sandbox_dir() / "bases" / "minimal.txt", suite, quiet=quiet
  )


def _ensure_rootfs(
  final: pathlib.Path,
  packages: pathlib.Path,
  suite: str,
  *,
  force: bool = False,
  mirror: str | None = None,
  quiet: bool = False,
) -> pathlib.Path:
  if is_built(final) and not force:
    return final
  final.parent.mkdir(parents=True, exist_ok=True)
  with open(final.parent / f"{final.name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if is_built(final) and not force:
      return final
    _build(sandbox_dir(), final, mirror or detect_mirror(), quiet, packages, suite)
  return final


def _build(
  directory: pathlib.Path,
  final: pathlib.Path,
  mirror: str,
  quiet: bool,
  packages: pathlib.Path,
  suite: str,
) -> None:
  if os.geteuid() != 0:
    raise SandboxError(
      f"building the rootfs {final} needs root (debootstrap + chroot); run as root once"
    )
  if shutil.which("debootstrap") is None:
    raise SandboxError("debootstrap is not installed (apt-get install debootstrap)")
  tmp = final.parent / f".build-{final.name}-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  log_path = final.parent / f"{final.name}.build.log"
  start = time.time()
  cmd = ["sh", str(directory / "build_rootfs.sh"), str(tmp), str(packages), mirror]
  try:
    with open(log_path, "w") as log:
      proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env={**os.environ, "SUITE": suite},
      )
      for line in proc.stdout:
        log.write(line)
        if not quiet and (
          line.startswith("[build_rootfs]") or line.startswith("I: Retrieving Release")
        ):
          print(line.rstrip(), file=sys.stderr, flush=True)
      rc = proc.wait()
    if rc != 0:
      tail = log_path.read_text(errors="replace")[-3000:]
      raise SandboxError(f"rootfs build failed (exit {rc}); log {log_path}:\n{tail}")
    (tmp / COMPLETE_MARKER).write_text(
      json.dumps({"hash": final.name, "mirror": mirror, "built_at": time.time()})
    )
    if final.exists():  # a forced rebuild replaces the old tree
      old = final.parent / f".old-{final.name}-{os.getpid()}"
      final.rename(old)
      shutil.rmtree(old, ignore_errors=True)
    tmp.rename(final)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  with open(final.parent / "builds.jsonl", "a") as metrics:
    metrics.write(
      json.dumps({"hash": final.name, "seconds": round(time.time() - start, 1), "mirror": mirror})
      + "\n"
    )


def prune_rootfs(keep: pathlib.Path) -> list[pathlib.Path]:
  """Deletes cached rootfs dirs (and leftovers of failed builds) other than `keep`."""
  removed = []
  for path in (cache_dir() / "rootfs").iterdir():
    if path.is_dir() and path.resolve() != keep.resolve():
      shutil.rmtree(path, ignore_errors=True)
      removed.append(path)
  return removed
