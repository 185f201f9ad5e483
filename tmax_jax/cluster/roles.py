"""What each node of a Ray cluster is for, said by the node itself as a Ray custom resource.

  ray start --head --resources='{"trainer": 1}'
  ray start --address=HEAD:6379 --resources='{"inference": 1}'
  ray start --address=HEAD:6379 --resources='{"sandbox": 1}'

The amount is how many of that kind of process the node takes (an inference node with 8 GPUs
serving 8 one-GPU replicas says {"inference": 8}; a sandbox node says {"sandbox": 1}: one sandbox
host, which runs all of the node's sandboxes); a job asks for its processes' share of it, so Ray
places each process only on a node of its role.
"""

from __future__ import annotations

import logging

import ray

from tmax_jax import cli
from tmax_jax.errors import UserError

TRAINER, INFERENCE, SANDBOX = "trainer", "inference", "sandbox"
ROLES = (TRAINER, INFERENCE, SANDBOX)


def connect(address: str) -> None:
  """Joins the running Ray cluster at `address` ("auto": the one started on this machine, or
  HOST:PORT of its head) as a driver; UserError when none answers there."""
  if not address:
    raise UserError("--address: expected 'auto' or HOST:PORT of a running Ray cluster's head")
  if address != "auto":  # Ray itself retries an address where nothing listens for minutes
    cli.check_reachable("--address", address)
  try:
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
  except (ConnectionError, ValueError, TimeoutError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise UserError(
      f"--address={address}: no Ray cluster answers there ({first}); start one with "
      f"`ray start --head --resources='{{\"{INFERENCE}\": 1}}'`"
    ) from e


def capacity(role: str) -> float:
  """How much of `role` the cluster's live nodes offer in all."""
  if role not in ROLES:
    raise ValueError(f"role {role!r}; expected one of {list(ROLES)}")
  return sum(n["Resources"].get(role, 0.0) for n in ray.nodes() if n["Alive"])


def require(role: str, amount: float, what: str) -> None:
  """UserError unless the live nodes offer `amount` of `role` in all (Ray would otherwise wait
  for such a node without a word); `what` names the setting that asks for it."""
  have = capacity(role)
  if have <= 0:
    raise UserError(
      f"no node of the Ray cluster offers the {role!r} resource; start one with "
      f"`ray start --address=HEAD:PORT --resources='{{\"{role}\": 1}}'`"
    )
  if have < amount:
    raise UserError(f"{what} needs {amount:g} {role!r} and the cluster's nodes offer {have:g}")
