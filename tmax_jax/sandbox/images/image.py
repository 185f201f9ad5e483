"""A built image's record: the base rootfs, its layers (bottom first) and the final config, as
images/builder.py writes it (`<store>/images/<id>.json`) and the runtimes mount it. Its own module
so that running a sandbox never imports the image builder."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

from tmax_jax.sandbox.images import layers


@dataclasses.dataclass(frozen=True)
class Image:
  """A built image: `base` rootfs dir + `layers` (ids, bottom first) + the final config."""

  id: str
  base: str
  layers: tuple[str, ...]
  env: tuple[tuple[str, str], ...]
  workdir: str
  user: str
  from_ref: str
  warnings: tuple[str, ...] = ()
  rewrites: tuple[str, ...] = ()
  steps: tuple[dict, ...] = ()  # [{line, cmd, layer, cached, seconds}]
  build_seconds: float = 0.0
  # The runtime-only instructions (CMD, ENTRYPOINT, HEALTHCHECK, EXPOSE, ...): their last text;
  # a pod's side services start from CMD/ENTRYPOINT (sandbox/backends/pod.py).
  runtime: tuple[tuple[str, str], ...] = ()

  def runtime_arg(self, cmd: str) -> str | None:
    return dict(self.runtime).get(cmd)

  @property
  def path(self) -> pathlib.Path:
    return layers.store() / "images" / f"{self.id}.json"

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), indent=1)

  @staticmethod
  def load(path: str | os.PathLike) -> Image:
    data = json.loads(pathlib.Path(path).read_text())
    data["env"] = tuple(tuple(kv) for kv in data["env"])
    data["runtime"] = tuple(tuple(kv) for kv in data.get("runtime", ()))
    for key in ("layers", "warnings", "rewrites", "steps"):
      data[key] = tuple(data.get(key, ()))
    return Image(**data)


def is_image_file(image: str) -> bool:
  return image.endswith(".json") and pathlib.Path(image).is_file()
