"""Running a sandbox never imports the image builder (review 2026-12-06, move 4): the runtime and
its backends read a built image's record from sandbox/images/image.py, never images/builder.py."""

import subprocess
import sys


def test_the_runtime_and_its_backends_import_no_builder():
  code = (
    "import sys\n"
    "import tmax_jax.sandbox.base, tmax_jax.sandbox.census, tmax_jax.sandbox.pool\n"
    "from tmax_jax.sandbox.backends import apptainer, bubblewrap, pod, podman\n"
    "print(sorted(m for m in sys.modules if m.startswith('tmax_jax.sandbox.')))\n"
  )
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  loaded = out.stdout
  assert "tmax_jax.sandbox.images.image'" in loaded, loaded  # the record is what they need
  for builder in (
    "tmax_jax.sandbox.images.builder'",
    "tmax_jax.sandbox.images.dockerfile'",
    "mirror'",
  ):
    assert builder not in loaded, loaded
