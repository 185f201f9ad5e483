"""TerminalHorizon-style long-horizon task synthesis (recipe.md): stage 1 builds executable task
environments from professional workflows and audits what the environment already did for the agent;
stage 2 extends accepted tasks into parent -> child chains; `collect` turns teacher episodes on them
into SFT records. It sits above agents/ (it runs episodes) and tasks/ (it writes tasks).

The face (`__all__`, checked by tests/test_faces.py): the teacher's endpoint policy, which the
evaluation and the pipeline reuse; it loads on first use.
"""

from typing import TYPE_CHECKING

from tmax_jax import lazy_face

if TYPE_CHECKING:  # the lazy names' homes (the same as _HOMES), for mypy and the import graph
  from tmax_jax.horizon.teacher import EndpointPolicy, ToolSpec, Usage

_HOMES = {"EndpointPolicy": "teacher", "ToolSpec": "teacher", "Usage": "teacher"}
__getattr__ = lazy_face(__name__, _HOMES)

__all__ = ["EndpointPolicy", "ToolSpec", "Usage"]
