"""Running a sandbox never imports the image builder (review 2026-12-06, move 4): the runtime and
its backends read a built image's record from sandbox/image.py, not sandbox/build.py."""

import subprocess
import sys


def test_the_runtime_and_its_backends_import_no_builder():
  code = (
    "import sys\n"
    "import tmax_jax.sandbox.base, tmax_jax.sandbox.bubblewrap, tmax_jax.sandbox.podman\n"
    "import tmax_jax.sandbox.pod, tmax_jax.sandbox.apptainer\n"
    "print(sorted(m for m in sys.modules if m.startswith('tmax_jax.sandbox.')))\n"
  )
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  loaded = out.stdout
  assert "tmax_jax.sandbox.image'" in loaded, loaded  # the record is what they need
  for builder in ("tmax_jax.sandbox.build'", "tmax_jax.sandbox.dockerfile'", "mirror'"):
    assert builder not in loaded, loaded
