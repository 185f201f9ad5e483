"""Building the images sandboxes run: the base rootfs (base_rootfs: debootstrap, cached by its
definition's hash), the stand-ins a Dockerfile's FROM maps to (base_images), task images from a
Dockerfile (builder: one cached overlay layer per step, dockerfile: the parser, mirror: the
offline installers and harness files), their record (image.Image) and how it mounts (layers), the
podman storage they are imported into (podman_store) and the Apptainer definition (apptainer).

The runtime (tmax_jax.sandbox and its backends) reads what is built here through image and layers
only; nothing here imports a backend (import-linter contract in pyproject.toml). CLI:
`python3 -m tmax_jax.sandbox.images {base,build} ...` (__main__.py).

The face (`__all__`, tests/test_faces.py): public modules, each imported whole by those who build
(tasks, harbor) or read (the runtime: image, layers) an image; mirror.py is internal. No module is
imported here: the runtime must not load the builder by importing this package.
"""

__all__ = [
  # reading a built image (the runtime's side)
  "image",
  "layers",
  # building one
  "apptainer",
  "base_images",
  "base_rootfs",
  "builder",
  "dockerfile",
  "podman_store",
]
