"""Context parallelism: one row's tokens split over the `sequence` mesh axis.

Activations' logical `length` axis maps to the `sequence` mesh axis (config rules), so per-token
work (projections, MLP, norms, the head) is split by XLA's partitioner on its own. Only the token
mixers need to talk across shards; they run their local part under `shard_map` over this one axis
(the other mesh axes stay automatic): full attention as ring attention (attention/ring.py), the
Gated DeltaNet rule by passing chunk states across shards (gated_delta.py), the per-token head in
logprobs.py so it never gathers the whole row. Shard i holds tokens [i*T/S, (i+1)*T/S).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.sharding import PartitionSpec as P

AXIS = "sequence"
TOKENS = P(None, AXIS)  # [B, T, ...] split on T


def size() -> int:
  """Devices on the `sequence` axis of the mesh being traced under (1 without one)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or AXIS not in mesh.axis_names:
    return 1
  return int(mesh.shape[AXIS])


def splits(t: int) -> bool:
  """Whether a length-t axis is split over a `sequence` axis > 1 here. Lengths it does not divide
  (parameter init's dummy inputs, a decode step) run unsplit: correct, just not parallel."""
  n = size()
  return n > 1 and t % n == 0


def check_divisible(t: int, what: str) -> int:
  """-> the shard count; raises ValueError when T does not split evenly over it."""
  n = size()
  if t % n:
    raise ValueError(
      f"{what}: sequence length {t} is not divisible by the mesh's sequence axis "
      f"({n} devices); pad seq_len to a multiple of {n}"
    )
  return n


def shard_tokens(fn: Callable, in_specs, out_specs) -> Callable:
  """`fn` on each sequence shard (manual over `sequence` only; the other axes stay automatic)."""
  return jax.shard_map(
    fn, in_specs=in_specs, out_specs=out_specs, axis_names={AXIS}, check_vma=False
  )
