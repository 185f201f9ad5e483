"""Harbor (the Terminal-Bench harness) and tmax_jax, both ways (README "Harbor").

Runs in the project's Python (3.11): venv (the Harbor venv), sandbox (`harbor:<type>` runner
backend through a bridge process), tasks and oci (Harbor views of tasks, our images in podman),
jobs (running Harbor, reading its results), trajectories (ATIF -> SFT records), run (serve a
model and run Harbor against it), agreement. Runs only in the Harbor venv (Python >= 3.12, imports
Harbor): environment (the plugin), bridge, export. protocol is shared by both sides.

The face (`__all__`, checked by tests/test_faces.py): the Harbor eval job's config and runner
(loaded on first use: nothing Harbor-side loads with the package), and the public modules listed
in `__all__` whole.
"""

from typing import TYPE_CHECKING

from tmax_jax import lazy_face

if TYPE_CHECKING:  # the lazy names' homes (the same as _HOMES), for mypy and the import graph
  from tmax_jax.harbor.run import HarborEvalConfig, run_harbor_eval

_HOMES = {"HarborEvalConfig": "run", "run_harbor_eval": "run"}
__getattr__ = lazy_face(__name__, _HOMES)

__all__ = [
  "HarborEvalConfig",
  "run_harbor_eval",
  # public modules, used whole
  "agreement",  # Harbor's oracle / nop agents against our runner's, per task
  "sandbox",  # the harbor:<type> trial backend (tasks/runner.py's TRIAL_PLUGINS)
  "tasks",  # Harbor views of our tasks
]
