"""Top-level jobs: the RL loop, SFT on trajectories, evaluation, serving and the CPU demo.

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.loop`, import the names
below from here, and the public modules listed in `__all__` whole (evaluate/ and math_eval/ have
faces of their own); the step driver, replay, the task stream and the rollout batch are internal.
Every name loads its module on first use, so a job's config does not load the other jobs.
"""

from typing import TYPE_CHECKING

from tmax_jax import lazy_face

if TYPE_CHECKING:  # the lazy names' homes (the same as _HOMES), for mypy and the import graph
  from tmax_jax.loop.config import (
    DemoConfig,
    MeshConfig,
    ModelSpec,
    RLConfig,
    ServeConfig,
    ServingConfig,
    SFTConfig,
    TopologyConfig,
    node_server_config,
    with_family,
  )
  from tmax_jax.loop.demo import run_demo
  from tmax_jax.loop.preflight import check_inputs
  from tmax_jax.loop.rl import run_rl
  from tmax_jax.loop.serve import serve_forever
  from tmax_jax.loop.sft import run_sft
  from tmax_jax.loop.steps import checkpoint_config
  from tmax_jax.loop.weight_sync import WeightSync, served_target

_HOMES = {
  "DemoConfig": "config",
  "MeshConfig": "config",
  "ModelSpec": "config",
  "RLConfig": "config",
  "ServeConfig": "config",
  "ServingConfig": "config",
  "SFTConfig": "config",
  "TopologyConfig": "config",
  "node_server_config": "config",
  "with_family": "config",
  "run_demo": "demo",
  "check_inputs": "preflight",
  "run_rl": "rl",
  "serve_forever": "serve",
  "run_sft": "sft",
  "checkpoint_config": "steps",
  "WeightSync": "weight_sync",
  "served_target": "weight_sync",
}
__getattr__ = lazy_face(__name__, _HOMES)

__all__ = [
  # the jobs' configs
  "DemoConfig",
  "MeshConfig",
  "ModelSpec",
  "RLConfig",
  "SFTConfig",
  "ServeConfig",
  "ServingConfig",
  "TopologyConfig",
  "node_server_config",
  "with_family",
  # the jobs
  "check_inputs",
  "run_demo",
  "run_rl",
  "run_sft",
  "serve_forever",
  # pieces other placements reuse
  "WeightSync",
  "checkpoint_config",
  "served_target",
  # public modules, used whole
  "placement",  # which devices serve and which train
  "policy",  # load / serve the policy
  "serve",  # the serve job's server, started from its config
  # packages with their own faces
  "evaluate",
  "math_eval",
]
