"""The one root of tmax_jax's caches (base rootfs and task images, the podman store, tokenizer
builds): $TMAX_JAX_CACHE, else /var/cache/tmax_jax as root (root's home is private, and sandboxes
run as unprivileged host uids that must traverse the image files), else ~/.cache/tmax_jax.
The only environment variable a user sets for the library's files: it is where the machine keeps
them, shared by every job, not part of one job's config."""

from __future__ import annotations

import os
import pathlib

ENV = "TMAX_JAX_CACHE"


def root() -> pathlib.Path:
  env = os.environ.get(ENV)
  if env:
    return pathlib.Path(env).expanduser()
  if os.geteuid() == 0:
    return pathlib.Path("/var/cache/tmax_jax")
  return pathlib.Path.home() / ".cache" / "tmax_jax"
