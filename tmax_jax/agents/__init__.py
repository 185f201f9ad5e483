"""Agent harnesses and rollout workers (see formats/ for the message formats).

The face (`__all__`, checked by tests/test_faces.py): outside `tmax_jax.agents`, import the names
below from here, and the public modules listed in `__all__` whole; the harnesses' internals
(shell, terminus), the episode loop and the group scheduler's module are reached through these
names. Every name loads its module on first use (episode workers import only what they run).
"""

from typing import TYPE_CHECKING

from tmax_jax import lazy_face

if TYPE_CHECKING:  # the lazy names' homes (the same as _HOMES), for mypy and the import graph
  from tmax_jax.agents.episode import (
    EpisodeConfig,
    GenerateFn,
    stop_token_ids,
    template_kwargs,
  )
  from tmax_jax.agents.oracle_data import write_jsonl
  from tmax_jax.agents.rollout import (
    Group,
    GroupScheduler,
    NoUsableGroups,
    RolloutConfig,
    cycle_tasks,
  )
  from tmax_jax.agents.scripted import ScriptedCompletion
  from tmax_jax.agents.terminus import action_text
  from tmax_jax.agents.worker import (
    EpisodeWorker,
    Trial,
    WorkerConfig,
    episode_seed,
    episodes_in_flight,
    request_timeout_s,
  )

_HOMES = {
  "EpisodeConfig": "episode",
  "GenerateFn": "episode",
  "stop_token_ids": "episode",
  "template_kwargs": "episode",
  "write_jsonl": "oracle_data",
  "Group": "rollout",
  "GroupScheduler": "rollout",
  "NoUsableGroups": "rollout",
  "RolloutConfig": "rollout",
  "cycle_tasks": "rollout",
  "ScriptedCompletion": "scripted",
  "action_text": "terminus",
  "EpisodeWorker": "worker",
  "Trial": "worker",
  "WorkerConfig": "worker",
  "episode_seed": "worker",
  "episodes_in_flight": "worker",
  "request_timeout_s": "worker",
}
__getattr__ = lazy_face(__name__, _HOMES)

__all__ = [
  # one episode
  "EpisodeConfig",
  "GenerateFn",
  "stop_token_ids",
  "template_kwargs",
  "action_text",
  # one scored episode in a sandbox
  "EpisodeWorker",
  "Trial",
  "WorkerConfig",
  "episode_seed",
  "episodes_in_flight",
  "request_timeout_s",
  # groups of rollouts
  "Group",
  "GroupScheduler",
  "NoUsableGroups",
  "RolloutConfig",
  "cycle_tasks",
  # scripted policies and oracle SFT data
  "ScriptedCompletion",
  "write_jsonl",
  # public modules, used whole
  "harnesses",  # the harness registry: the one place a harness name is resolved
  "oracle_data",  # SFT data from task oracles
  "scripted",  # scripted policies: the oracle and the do-nothing policy
  "worker",  # the one scored-episode path
]
