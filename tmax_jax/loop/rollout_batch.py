"""Rollout groups -> trainer trajectories: advantages per group, token masks, behaviour logprobs
and (when the server returned them) the behaviour's top-K ids and logprobs per generated token.

Each episode becomes one `train.batch.Trajectory` over its whole token sequence (prompt, generated
and observation tokens); only generated tokens carry loss weight, and every token of a response gets
the response's advantage (recipe.md). `rollout_inputs` states what this path fills, so an RL config
is checked against it before anything runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tmax_jax import rl
from tmax_jax.agents import Group
from tmax_jax.train import BatchInputs
from tmax_jax.train import batch as batch_lib


def rollout_inputs(top_logprobs: int) -> BatchInputs:
  """The batch fields the RL rollout path fills: the server's logprobs, group advantages, and the
  top-K fields when the episodes ask the server for `top_logprobs` > 0 alternatives per generated
  token (WorkerConfig.top_logprobs); no reference policy runs, so never `ref_logp`."""
  topk = rl.losses.TOPK_INPUTS if top_logprobs > 0 else ()
  return BatchInputs(
    fields=rl.losses.RL_INPUTS + topk,
    top_k=top_logprobs,
    source=f"the RL rollout path (worker.top_logprobs={top_logprobs})",
  )


def group_advantages(groups: Sequence[Group], estimator: str = "centered") -> list[np.ndarray]:
  """Per group, the [G] advantages of its episodes under the named estimator."""
  rewards = np.concatenate([g.rewards for g in groups])
  ids = np.concatenate([np.full(len(g.episodes), i) for i, g in enumerate(groups)])
  adv = np.asarray(rl.get("advantage", estimator)(rewards, ids))
  return np.split(adv, np.cumsum([len(g.episodes) for g in groups])[:-1])


def to_trajectories(
  groups: Sequence[Group], estimator: str = "centered"
) -> list[batch_lib.Trajectory]:
  """One trainer trajectory per episode with its group advantage."""
  out = []
  for group, adv in zip(groups, group_advantages(groups, estimator), strict=True):
    for episode, a in zip(group.episodes, adv, strict=True):
      traj = episode.trajectory
      arrays = traj.as_arrays()
      out.append(
        batch_lib.Trajectory(
          tokens=arrays["tokens"],
          loss_mask=arrays["loss_mask"].astype(np.float32),
          behaviour_logp=arrays["logprobs"],
          advantage=float(a),
          topk_ids=traj.topk_ids or None,
          topk_logp=traj.topk_logprobs or None,
        )
      )
  return out


def rollout_metrics(groups: Sequence[Group]) -> dict[str, float]:
  """Reward, pass rate, response length and turns over the episodes of a batch."""
  eps = [e for g in groups for e in g.episodes]
  if not eps:
    return {}
  rewards = np.asarray([e.reward for e in eps])
  return {
    "reward_mean": float(rewards.mean()),
    "pass_rate": float(np.mean(rewards >= 1.0)),
    "response_tokens_mean": float(np.mean([e.trajectory.num_generated for e in eps])),
    "sequence_tokens_mean": float(np.mean([len(e.trajectory.tokens) for e in eps])),
    "turns_mean": float(np.mean([e.num_turns for e in eps])),
    "tool_calls_mean": float(np.mean([e.num_tool_calls for e in eps])),
    "format_errors_mean": float(np.mean([e.num_format_errors for e in eps])),
    "submitted_fraction": float(np.mean([e.status == "submitted" for e in eps])),
  }
