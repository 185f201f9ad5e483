"""Versioned weight updates: serialisation of a param tree and checked restoration into the served one.

Wire format: flax msgpack (`flax.serialization.to_bytes`) of the `params` tree, streamed in chunks,
or a path to a `.msgpack` file or a Hugging Face checkpoint directory (read by models.hf_io).
A pushed tree must match the served one leaf for leaf (path and shape); dtypes are cast to the
served dtypes and leaves are placed with the served shardings.
"""

from __future__ import annotations

import pathlib
from typing import Any, Iterator

import flax.serialization
import jax
import numpy as np

from tmax_jax.models.config import ModelConfig

CHUNK_BYTES = 1 << 20  # under gRPC's default 4 MiB message limit


class WeightUpdateError(ValueError):
  """A pushed weight tree does not fit the served model."""


def to_bytes(params: Any) -> bytes:
  return flax.serialization.to_bytes(jax.device_get(params))


def chunks(blob: bytes, size: int = CHUNK_BYTES) -> Iterator[bytes]:
  for i in range(0, len(blob), size):
    yield blob[i:i + size]


def _paths(tree: Any) -> dict[str, Any]:
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(p): leaf for p, leaf in flat}


def conform(new: Any, served: Any) -> Any:
  """`new` cast/placed like `served`; raises WeightUpdateError naming the first mismatching leaf."""
  new_leaves, served_leaves = _paths(new), _paths(served)
  missing = sorted(set(served_leaves) - set(new_leaves))
  extra = sorted(set(new_leaves) - set(served_leaves))
  if missing or extra:
    raise WeightUpdateError(f"weight update tree mismatch: missing {missing[:5]}, unexpected "
                            f"{extra[:5]}")
  for key, leaf in served_leaves.items():
    if tuple(np.shape(new_leaves[key])) != tuple(leaf.shape):
      raise WeightUpdateError(f"weight update leaf {key}: shape {np.shape(new_leaves[key])}, "
                              f"expected {tuple(leaf.shape)}")

  def place(n, s):
    return jax.device_put(np.asarray(n).astype(s.dtype), s.sharding)

  return jax.tree.map(place, new, served)


def from_bytes(blob: bytes, served: Any) -> Any:
  try:
    state = flax.serialization.msgpack_restore(blob)
  except Exception as e:  # pylint: disable=broad-exception-caught
    raise WeightUpdateError(f"weight update payload is not flax msgpack: {e}") from e
  return conform(state, served)


def from_path(path: str, served: Any, cfg: ModelConfig) -> Any:
  """A `.msgpack` file or an HF checkpoint directory (config.json + safetensors)."""
  p = pathlib.Path(path)
  if p.is_dir():
    from tmax_jax.models import hf_io  # pylint: disable=import-outside-toplevel
    return conform(hf_io.load_params(p, cfg), served)
  if p.is_file():
    return from_bytes(p.read_bytes(), served)
  raise WeightUpdateError(f"weight update path {path!r} is neither a .msgpack file nor an HF "
                          "checkpoint directory")
