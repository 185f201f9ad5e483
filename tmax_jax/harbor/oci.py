"""Our built images (base rootfs + overlay layers, sandbox/images/builder.py) as layered OCI images.

Harbor's docker and podman environments start `image:` names, so a task image of ours is pulled
into podman's storage from an OCI image layout (`podman pull oci:<dir>:<tag>`): one OCI layer per
layer of ours (the base rootfs is the first), so thirty task images share their base and common
steps in podman's storage as they do in ours, and an import writes only the layers podman does not
have. Overlay whiteouts become OCI ones (a 0/0 character device -> `.wh.<name>`, an opaque
directory -> `.wh..wh..opq`). Layers are uncompressed tars; their digests are kept under
<cache>/harbor/oci/layers by layer id (layers are immutable, so a digest never changes), the tars
themselves only while an import needs them: podman reuses a layer it holds by digest, so a tar is
written only for a layer podman lacks.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pathlib
import re
import shutil
import stat
import tarfile

from tmax_jax import json_io
from tmax_jax.sandbox import SandboxError
from tmax_jax.sandbox.images import base_rootfs, layers, podman_store
from tmax_jax.sandbox.images.image import Image

LAYER_MEDIA = "application/vnd.oci.image.layer.v1.tar"
_MISSING = re.compile(r"reading blob (sha256:[0-9a-f]{64})")
OPAQUE_XATTRS = ("trusted.overlay.opaque", "user.overlay.opaque")


def layout_dir() -> pathlib.Path:
  return base_rootfs.cache_dir() / "harbor" / "oci"


def _is_whiteout(st: os.stat_result) -> bool:
  return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _opaque(path: pathlib.Path) -> bool:
  for name in OPAQUE_XATTRS:
    try:
      if os.getxattr(path, name, follow_symlinks=False) == b"y":
        return True
    except OSError:
      continue
  return False


def _write_layer(root: pathlib.Path, out, overlay: bool) -> None:
  """A tar of `root` (sorted, so the same tree gives the same bytes); overlay: convert whiteouts."""
  skip = {base_rootfs.COMPLETE_MARKER} if not overlay else set()
  with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
    for dirpath, dirnames, filenames in os.walk(root):
      dirnames.sort()
      here = pathlib.Path(dirpath)
      rel_dir = here.relative_to(root)
      if overlay and rel_dir.parts and _opaque(here):
        info = tarfile.TarInfo(str(rel_dir / ".wh..wh..opq"))
        tar.addfile(info)
      for name in sorted(dirnames + filenames):
        path, rel = here / name, str(rel_dir / name)
        if name in skip and not rel_dir.parts:
          continue
        st = os.lstat(path)
        if overlay and _is_whiteout(st):
          tar.addfile(tarfile.TarInfo(str(rel_dir / f".wh.{name}")))
        elif stat.S_ISSOCK(st.st_mode):
          continue  # tar has no sockets; nothing in an image needs one
        elif stat.S_ISREG(st.st_mode):
          with open(path, "rb") as fh:
            tar.addfile(tar.gettarinfo(str(path), rel), fh)
        else:
          tar.addfile(tar.gettarinfo(str(path), rel))


def _blob_path(digest: str) -> pathlib.Path:
  return layout_dir() / "blobs" / "sha256" / digest.split(":")[1]


def layer_blob(key: str, root: pathlib.Path, overlay: bool, write: bool = False) -> dict:
  """{digest, size} of the layer tar of `root` (cached by key). The tar is written into the
  layout when it was never made, or when `write` and it is not there (it is dropped after each
  import: podman reuses a layer it holds by digest without reading the tar)."""
  index = layout_dir() / "layers" / f"{key}.json"
  if index.is_file():
    entry = json.loads(index.read_text())
    if not write or _blob_path(entry["digest"]).is_file():
      return entry
  blobs = layout_dir() / "blobs" / "sha256"
  blobs.mkdir(parents=True, exist_ok=True)
  tmp = blobs / f".tmp-{key}-{os.getpid()}"
  digest = hashlib.sha256()
  with open(tmp, "wb") as fh:
    _write_layer(root, _Hashing(fh, digest), overlay)
  entry = {"digest": f"sha256:{digest.hexdigest()}", "size": tmp.stat().st_size}
  tmp.rename(blobs / digest.hexdigest())
  json_io.write_json_atomic(index, entry)
  return entry


class _Hashing:
  """A write-only file object that hashes what passes through it."""

  def __init__(self, fh, digest):
    self.fh, self.digest = fh, digest

  def write(self, data) -> int:
    self.digest.update(data)
    return self.fh.write(data)

  def tell(self) -> int:
    return self.fh.tell()


def _blob(doc: dict) -> dict:
  data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
  digest = hashlib.sha256(data).hexdigest()
  path = layout_dir() / "blobs" / "sha256" / digest
  if not path.is_file():
    json_io.write_text_atomic(path, [data.decode()])
  return {"digest": f"sha256:{digest}", "size": len(data)}


def import_image(image: Image, name: str, env: dict[str, str], workdir: str) -> str:
  """Pulls `image` (ours) into the project's podman storage as `name` (see the module docstring)."""
  layout_dir().mkdir(parents=True, exist_ok=True)
  with open(layout_dir() / "import.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if podman_store.image_exists(name):
      return name
    try:
      image_id = _pull(image, env, workdir)
    finally:
      shutil.rmtree(layout_dir() / "blobs", ignore_errors=True)
    podman_store.run_podman(["tag", image_id, name])
    # The pull also names it after the layout's path; that name would move to every next import.
    podman_store.run_podman(["untag", image_id, f"localhost{layout_dir()}:latest"], check=False)
  return name


def _layers(image: Image) -> list[tuple[str, pathlib.Path, bool]]:
  """(cache key, root, is an overlay diff) of the image's OCI layers, bottom first."""
  base = pathlib.Path(image.base)
  out = [(f"base-{base.name}", base, False)]
  for lid in image.layers:
    diff = layers.layer_path(lid) / "diff"
    if any(diff.iterdir()):
      out.append((lid, diff, True))
  return out


def _pull(image: Image, env: dict[str, str], workdir: str) -> str:
  """Writes the image's manifest and pulls it; -> its id. A layer podman does not hold is read
  from its tar, which is written when podman asks for it (its digest names it)."""
  parts = _layers(image)
  blobs = [layer_blob(key, root, overlay) for key, root, overlay in parts]
  config = _blob(
    {
      "architecture": "amd64",
      "os": "linux",
      "config": {"Env": [f"{k}={v}" for k, v in env.items()], "WorkingDir": workdir},
      "rootfs": {"type": "layers", "diff_ids": [b["digest"] for b in blobs]},
    }
  )
  manifest = _blob(
    {
      "schemaVersion": 2,
      "mediaType": "application/vnd.oci.image.manifest.v1+json",
      "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
      "layers": [{"mediaType": LAYER_MEDIA, **b} for b in blobs],
    }
  )
  json_io.write_json_atomic(layout_dir() / "oci-layout", {"imageLayoutVersion": "1.0.0"})
  _add_to_index(manifest, image.id)
  for _ in range(len(parts) + 1):
    res = podman_store.run_podman(["pull", "-q", f"oci:{layout_dir()}:{image.id}"], check=False)
    if res.returncode == 0:
      return res.stdout.decode().split()[-1]
    missing = _MISSING.search(res.stderr.decode(errors="replace"))
    wanted = [
      p for p, b in zip(parts, blobs, strict=True) if missing and b["digest"] == missing.group(1)
    ]
    if not wanted:
      break
    layer_blob(*wanted[0], write=True)
  raise SandboxError(
    f"podman pull of image {image.id} failed: {res.stderr.decode(errors='replace')[-1500:]}"
  )


def _add_to_index(manifest: dict, tag: str) -> None:
  path = layout_dir() / "index.json"
  index = json.loads(path.read_text()) if path.is_file() else {"schemaVersion": 2, "manifests": []}
  index["manifests"] = [
    m
    for m in index["manifests"]
    if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != tag
  ]
  index["manifests"].append(
    {
      "mediaType": "application/vnd.oci.image.manifest.v1+json",
      **manifest,
      "annotations": {"org.opencontainers.image.ref.name": tag},
    }
  )
  json_io.write_json_atomic(path, index)
