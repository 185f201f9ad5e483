"""The train state: params, optimizer state, step and RNG, as one pytree (what Orbax saves)."""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
  """params: model params (fp32 master copy); opt_state: optax state; step: int32 [] (steps taken,
  skipped ones included); rng: uint32 [2] raw key data (a plain array so Orbax can save it)."""

  params: Any
  opt_state: Any
  step: jax.Array
  rng: jax.Array

  def as_dict(self) -> dict:
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

  @classmethod
  def from_dict(cls, d: dict) -> "TrainState":
    return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls)})

  def key(self) -> jax.Array:
    return jax.random.wrap_key_data(self.rng)

  def replace(self, **changes) -> "TrainState":
    return dataclasses.replace(self, **changes)


def opt_state_shardings(
  optimizer: optax.GradientTransformation, params: Any, replicated: jax.sharding.Sharding
) -> Any:
  """Shardings of `optimizer.init(params)`: every param-shaped leaf (Adam's mu, nu) takes its
  param's sharding, the rest (step counts) is replicated. XLA does not propagate them itself:
  zeros_like depends on no input, so its outputs would land unsharded."""
  abstract = jax.eval_shape(optimizer.init, params)
  return optax.tree_map_params(
    optimizer, lambda _, p: p.sharding, abstract, params, transform_non_params=lambda _: replicated
  )


def create(
  params: Any,
  optimizer: optax.GradientTransformation,
  seed: int,
  replicated: jax.sharding.Sharding | None = None,
) -> TrainState:
  """Fresh state; the optimizer state takes the params' shardings (opt_state_shardings).
  `replicated` places step and RNG on the mesh (required in multi-process runs)."""
  out = None if replicated is None else opt_state_shardings(optimizer, params, replicated)
  opt_state = jax.jit(optimizer.init, out_shardings=out)(params)
  step = np.zeros((), np.int32)
  rng = np.asarray(jax.random.key_data(jax.random.key(seed)))
  if replicated is None:
    return TrainState(params, opt_state, jnp.asarray(step), jnp.asarray(rng))

  def put(x):
    return jax.make_array_from_callback(x.shape, replicated, lambda idx: x[idx])

  return TrainState(params, opt_state, put(step), put(rng))


@jax.jit
def all_finite(tree: Any) -> jax.Array:
  """True when every floating leaf of `tree` is finite: one jitted program (one reduction per
  leaf, fused), not one dispatch per leaf; on a mesh that is one collective instead of dozens."""
  leaves = [x for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
  if not leaves:
    return jnp.bool_(True)
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
