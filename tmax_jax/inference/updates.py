"""Versioned weight updates: the per-tensor wire stream, checked and restored into the served tree.

Wire protocol of `UpdateWeights` (client-streamed `UpdateWeightsRequest`s, rl_proto.py):
  1. one message with the `manifest`: every tensor's name ('/'-joined param path), shape and wire
     dtype (bfloat16 or float32), in the order the tensors follow. The server checks it against the
     served tree before any data moves and refuses a missing, unexpected or mis-shaped tensor by
     name;
  2. per tensor, in manifest order, chunks of its raw little-endian bytes (`tensor` = manifest
     index, `offset`, `data`); the tensor's first chunk carries its CRC-32 (`crc32`, "%08x").
     The checksum travels with the tensor rather than in the manifest so that the sender holds one
     tensor on the host at a time (a trainer streams straight from its device arrays).
The server (`TensorStreamAssembler`) keeps one tensor's bytes on the host, checks its checksum when
it is complete, casts it to the served dtype and places it with the served sharding; the old
weights keep serving until every tensor has arrived and checked, then the whole tree is swapped in
at once (between two decode steps). Any refusal names the tensor and leaves the served weights as
they were.

A push can instead name a path on the server: a `.msgpack` file (flax msgpack of the params tree)
or a Hugging Face checkpoint directory (read by models.hf_io).
"""

from __future__ import annotations

import dataclasses
import pathlib
import zlib
from collections.abc import Iterator
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from tmax_jax.models import ModelConfig, hf_io

CHUNK_BYTES = 2 << 20  # under gRPC's default 4 MiB message limit
WIRE_DTYPES = {"bfloat16": np.dtype(jnp.bfloat16), "float32": np.dtype(np.float32)}


class WeightUpdateError(ValueError):
  """A pushed weight tree does not fit the served model."""


@dataclasses.dataclass(frozen=True)
class TensorSpec:
  """One manifest entry: '/'-joined param path, shape and wire dtype name."""

  name: str
  shape: tuple[int, ...]
  dtype: str

  @property
  def nbytes(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64)) * WIRE_DTYPES[self.dtype].itemsize


def named_leaves(tree: Any) -> dict[str, Any]:
  """{'/'-joined path: leaf} in tree-flatten order (the order tensors are streamed in)."""
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(p, simple=True, separator="/"): leaf for p, leaf in flat}


def crc32(data) -> str:
  return f"{zlib.crc32(data) & 0xFFFFFFFF:08x}"


def wire_dtype(leaf: Any, dtype: str | None) -> str:
  """The wire dtype of `leaf`: `dtype` if given, else its own (which must be bf16 or fp32)."""
  name = dtype or np.dtype(leaf.dtype).name
  if name not in WIRE_DTYPES:
    raise WeightUpdateError(
      f"wire dtype {name!r} not supported; expected one of "
      f"{sorted(WIRE_DTYPES)} (pass dtype= to cast)"
    )
  return name


def manifest(params: Any, dtype: str | None = None) -> list[TensorSpec]:
  """The manifest of `params` (shapes/dtypes only: nothing is copied off the device)."""
  return [
    TensorSpec(name, tuple(int(d) for d in np.shape(leaf)), wire_dtype(leaf, dtype))
    for name, leaf in named_leaves(params).items()
  ]


def tensor_bytes(leaf: Any, spec: TensorSpec) -> tuple[memoryview, str]:
  """(raw bytes in the wire dtype, crc32) of one tensor, fetched from the device once."""
  host = np.ascontiguousarray(np.asarray(jax.device_get(leaf)).astype(WIRE_DTYPES[spec.dtype]))
  # bf16 has no buffer-protocol format; numpy's stubs give ndarray __buffer__ only on Python 3.12+
  view = memoryview(host.reshape(-1).view(np.uint8))  # type: ignore[arg-type]
  return view, crc32(view)


def chunks(data: memoryview, size: int = CHUNK_BYTES) -> Iterator[tuple[int, bytes]]:
  """(offset, bytes) slices of one tensor; an empty tensor still yields one (empty) chunk."""
  for offset in range(0, max(len(data), 1), size):
    yield offset, bytes(data[offset : offset + size])


def check_manifest(specs: list[TensorSpec], served: Any) -> None:
  """Refuses (WeightUpdateError naming the tensor) a manifest that does not fit `served`."""
  served_leaves = named_leaves(served)
  names = [s.name for s in specs]
  dup = sorted({n for n in names if names.count(n) > 1})
  missing = [n for n in served_leaves if n not in set(names)]
  extra = [n for n in names if n not in served_leaves]
  if dup or missing or extra:
    raise WeightUpdateError(
      f"weight update manifest does not match the served model: missing "
      f"{missing[:5]}, unexpected {extra[:5]}, duplicated {dup[:5]}"
    )
  for spec in specs:
    expected = tuple(served_leaves[spec.name].shape)
    if tuple(spec.shape) != expected:
      raise WeightUpdateError(
        f"weight update tensor {spec.name}: shape {tuple(spec.shape)}, expected {expected}"
      )
    if spec.dtype not in WIRE_DTYPES:
      raise WeightUpdateError(
        f"weight update tensor {spec.name}: dtype {spec.dtype!r}, expected "
        f"one of {sorted(WIRE_DTYPES)}"
      )


def place(value: np.ndarray, served_leaf: Any) -> jax.Array:
  """A host array cast to the served leaf's dtype, on the served leaf's sharding."""
  return jax.device_put(np.asarray(value).astype(served_leaf.dtype), served_leaf.sharding)


class TensorStreamAssembler:
  """Server side of the tensor stream: feed `start(manifest)`, then `chunk(...)`s, then `finish()`.

  Holds at most one tensor's bytes on the host; completed tensors are already on the device.
  """

  def __init__(self, served: Any):
    self._served = served
    self._leaves = named_leaves(served)
    self._specs: list[TensorSpec] | None = None
    self._done: dict[str, jax.Array] = {}
    self._current = -1  # manifest index of the tensor being received
    self._buf: bytearray | None = None
    self._filled, self._crc, self._expect_crc = 0, 0, ""

  def start(self, specs: list[TensorSpec]) -> None:
    if self._specs is not None:
      raise WeightUpdateError("weight update stream sent its manifest twice")
    check_manifest(specs, self._served)
    self._specs = specs

  def chunk(self, index: int, offset: int, data: bytes, checksum: str) -> None:
    """One chunk of tensor `index`; tensors arrive in manifest order, chunks in byte order."""
    if self._specs is None:
      raise WeightUpdateError("weight update stream: tensor data before the manifest")
    if not 0 <= index < len(self._specs):
      raise WeightUpdateError(
        f"weight update stream: tensor index {index} outside the manifest "
        f"of {len(self._specs)} tensors"
      )
    spec = self._specs[index]
    if index != self._current:
      if self._buf is not None:
        raise WeightUpdateError(
          f"weight update tensor {self._specs[self._current].name}: "
          f"incomplete ({self._filled} of {len(self._buf)} bytes) when "
          f"tensor {spec.name} started"
        )
      if index != len(self._done) or offset != 0 or not checksum:
        raise WeightUpdateError(
          f"weight update tensor {spec.name}: must start at offset 0 with "
          "its crc32, after the tensors before it in the manifest"
        )
      self._current, self._buf = index, bytearray(spec.nbytes)
      self._filled, self._crc, self._expect_crc = 0, 0, checksum
    buf = self._buf  # None: the tensor is complete, so any further chunk of it is one too many
    if buf is None or offset != self._filled or offset + len(data) > len(buf):
      raise WeightUpdateError(
        f"weight update tensor {spec.name}: chunk at offset {offset} "
        f"({len(data)} bytes) after {self._filled} of {spec.nbytes} bytes"
      )
    buf[offset : offset + len(data)] = data
    self._crc = zlib.crc32(data, self._crc)
    self._filled += len(data)
    if self._filled == len(buf):
      self._complete(spec, buf)

  def _complete(self, spec: TensorSpec, buf: bytearray) -> None:
    got = f"{self._crc & 0xFFFFFFFF:08x}"
    if got != self._expect_crc:
      raise WeightUpdateError(
        f"weight update tensor {spec.name}: checksum mismatch (crc32 {got}, "
        f"the sender said {self._expect_crc}); the served weights are "
        "unchanged"
      )
    value = np.frombuffer(buf, WIRE_DTYPES[spec.dtype]).reshape(spec.shape)
    self._done[spec.name] = place(value, self._leaves[spec.name])
    self._buf = None

  def finish(self) -> Any:
    """The complete new tree (same structure as the served one)."""
    if self._specs is None:
      raise WeightUpdateError("weight update stream is empty: no manifest, no path")
    if len(self._done) != len(self._specs):
      missing = [s.name for s in self._specs if s.name not in self._done]
      raise WeightUpdateError(
        f"weight update stream ended early: tensors {missing[:5]} "
        f"({len(missing)} in all) incomplete; the served weights are "
        "unchanged"
      )
    treedef = jax.tree_util.tree_structure(self._served)
    return jax.tree_util.tree_unflatten(treedef, [self._done[n] for n in self._leaves])


def check_tree(new: Any, served: Any) -> None:
  """Raises WeightUpdateError unless `new` has `served`'s leaves (paths and shapes)."""
  new_leaves, served_leaves = named_leaves(new), named_leaves(served)
  missing = sorted(set(served_leaves) - set(new_leaves))
  extra = sorted(set(new_leaves) - set(served_leaves))
  if missing or extra:
    raise WeightUpdateError(
      f"weight update tree mismatch: missing {missing[:5]}, unexpected {extra[:5]}"
    )
  for key, leaf in served_leaves.items():
    if tuple(np.shape(new_leaves[key])) != tuple(leaf.shape):
      raise WeightUpdateError(
        f"weight update tensor {key}: shape {np.shape(new_leaves[key])}, "
        f"expected {tuple(leaf.shape)}"
      )


def conform(new: Any, served: Any) -> Any:
  """`new` cast/placed like `served`; raises WeightUpdateError naming the first mismatching leaf."""
  check_tree(new, served)
  return jax.tree.map(place, new, served)


def from_path(path: str, served: Any, cfg: ModelConfig) -> Any:
  """A `.msgpack` file (flax msgpack of the params tree) or an HF checkpoint directory."""
  p = pathlib.Path(path)
  if p.is_dir():
    return conform(hf_io.load_params(p, cfg), served)
  if p.is_file():
    try:
      state = flax.serialization.msgpack_restore(p.read_bytes())
    except Exception as e:
      raise WeightUpdateError(f"weight update file {path}: not flax msgpack: {e}") from e
    return conform(state, served)
  raise WeightUpdateError(
    f"weight update path {path!r} is neither a .msgpack file nor an HF checkpoint directory"
  )
