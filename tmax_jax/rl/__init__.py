"""Pure RL maths registered by name: policy losses, advantage estimators, loss aggregation."""

from tmax_jax.rl import advantages, aggregation, losses
from tmax_jax.rl.losses import PolicyInputs, PolicyTerms
from tmax_jax.rl.registry import Entry, entry, get, names, register

__all__ = [
  "advantages",
  "aggregation",
  "losses",
  "PolicyInputs",
  "PolicyTerms",
  "Entry",
  "entry",
  "get",
  "names",
  "register",
]
