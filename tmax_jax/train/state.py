"""The train state: params, optimizer state, step and RNG, as one pytree (what Orbax saves)."""

import dataclasses
from typing import Any, Optional

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


def create(params: Any, optimizer: optax.GradientTransformation, seed: int,
           replicated: Optional[jax.sharding.Sharding] = None) -> TrainState:
  """Fresh state; the optimizer state inherits the params' shardings (optax init is elementwise).
  `replicated` places step and RNG on the mesh (required in multi-process runs)."""
  opt_state = jax.jit(optimizer.init)(params)
  step = np.zeros((), np.int32)
  rng = np.asarray(jax.random.key_data(jax.random.key(seed)))
  if replicated is None:
    return TrainState(params, opt_state, jnp.asarray(step), jnp.asarray(rng))
  put = lambda x: jax.make_array_from_callback(x.shape, replicated, lambda idx: x[idx])
  mesh_devices = replicated.device_set

  def on_mesh(x):  # optax puts scalars (step counts) on one device; replicate them on the mesh
    if x.sharding.device_set == mesh_devices:
      return x
    return put(np.asarray(jax.device_get(x)))

  return TrainState(params, jax.tree.map(on_mesh, opt_state), put(step), put(rng))


def all_finite(tree: Any) -> jax.Array:
  """True when every floating leaf of `tree` is finite (one fused reduction under jit)."""
  leaves = [x for x in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
  if not leaves:
    return jnp.bool_(True)
  return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))
