"""Hugging Face checkpoints in and out: one generic loader and one saver driven by a family's
declarative key map.

Loading memory-maps safetensors (one file or a sharded `model.safetensors.index.json`; keys under
`model.` or `model.language_model.`) and builds each parameter directly in its target sharding with
`jax.make_array_from_callback`: each device's callback reads only its own block, one layer at a
time, so no host or device ever holds the whole model. Saving writes safetensors + config.json +
generation_config.json (+ tokenizer files) into a hidden temp directory that is renamed into place
only when complete.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shutil
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import jax
import ml_dtypes
import numpy as np
from jax.experimental import multihost_utils

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.models import registry
from tmax_jax.models.config import ModelConfig

_ST_DTYPES = {
  "F64": np.dtype(np.float64),
  "F32": np.dtype(np.float32),
  "F16": np.dtype(np.float16),
  "BF16": np.dtype(ml_dtypes.bfloat16),
  "I64": np.dtype(np.int64),
  "I32": np.dtype(np.int32),
  "I16": np.dtype(np.int16),
  "I8": np.dtype(np.int8),
  "U8": np.dtype(np.uint8),
  "BOOL": np.dtype(np.bool_),
}
_ST_NAMES = {v: k for k, v in _ST_DTYPES.items()}
_PREFIX_ALIASES = (("model.language_model.", "model."),)
SAFETENSORS_INDEX = "model.safetensors.index.json"


class CheckpointError(UserError):
  """A checkpoint is missing a tensor, has a mis-shaped one, or is unreadable (the message says
  which key, in which file, and what was expected)."""


@dataclasses.dataclass(frozen=True)
class KeyRule:
  """One HF tensor kind <-> one param path.

  hf: HF key; "{i}" stands for the layer index. param: "/"-separated param path. When `hf` has "{i}"
  and `param` does not, the param is stacked over layers (leading axis) in the order of `layers`
  (default: all layers 0..L-1). in_axes > 0 marks an HF linear weight [out, in]: the param's first
  `in_axes` axes are the input and the rest the output. hf_ndim: rank of the HF tensor for plain
  reshapes (trailing param axes are merged); default 2 for linear weights, else 1.
  """

  hf: str
  param: str
  in_axes: int = 0
  hf_ndim: int | None = None
  layers: tuple[int, ...] | None = None

  def hf_shape(self, param_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The HF tensor shape that corresponds to one (per-layer) param of `param_shape`."""
    if self.in_axes:
      return (math.prod(param_shape[self.in_axes :]), math.prod(param_shape[: self.in_axes]))
    ndim = self.hf_ndim or 1
    return tuple(param_shape[: ndim - 1]) + (math.prod(param_shape[ndim - 1 :]),)

  def to_param(self, arr: np.ndarray, param_shape: tuple[int, ...]) -> np.ndarray:
    if self.in_axes:
      arr = arr.T
    return arr.reshape(param_shape)

  def to_hf(self, arr: np.ndarray) -> np.ndarray:
    if self.in_axes:
      n_in = math.prod(arr.shape[: self.in_axes])
      return np.ascontiguousarray(arr.reshape(n_in, -1).T)
    return arr.reshape(self.hf_shape(arr.shape))


# ------------------------------------------------------------------------------ safetensors files


@dataclasses.dataclass(frozen=True)
class _TensorRef:
  file: pathlib.Path
  key: str  # the key as stored in the file
  dtype: np.dtype
  shape: tuple[int, ...]
  start: int  # absolute byte offset in the file
  end: int


def _read_header(path: pathlib.Path) -> tuple[dict, int]:
  with open(path, "rb") as f:
    raw = f.read(8)
    if len(raw) != 8:
      raise CheckpointError(f"{path}: not a safetensors file (truncated header)")
    (n,) = struct.unpack("<Q", raw)
    try:
      return json.loads(f.read(n)), 8 + n
    except json.JSONDecodeError as e:
      raise CheckpointError(f"{path}: corrupt safetensors header: {e}") from e


def _canonical(key: str) -> str:
  for prefix, canon in _PREFIX_ALIASES:
    if key.startswith(prefix):
      return canon + key[len(prefix) :]
  return key


def index_checkpoint(ckpt_dir: str | pathlib.Path) -> dict[str, _TensorRef]:
  """Canonical key (`model.language_model.` -> `model.`) -> where its bytes are."""
  ckpt = pathlib.Path(ckpt_dir)
  index = ckpt / SAFETENSORS_INDEX
  if index.exists():
    files = sorted({ckpt / f for f in json.loads(index.read_text())["weight_map"].values()})
  else:
    files = sorted(ckpt.glob("*.safetensors"))
  if not files:
    raise CheckpointError(f"{ckpt}: no *.safetensors files and no {SAFETENSORS_INDEX}")
  refs: dict[str, _TensorRef] = {}
  for file in files:
    header, base = _read_header(file)
    for key, meta in header.items():
      if key == "__metadata__":
        continue
      if meta["dtype"] not in _ST_DTYPES:
        raise CheckpointError(f"{file}: tensor {key} has unsupported dtype {meta['dtype']}")
      start, end = meta["data_offsets"]
      refs[_canonical(key)] = _TensorRef(
        file, key, _ST_DTYPES[meta["dtype"]], tuple(meta["shape"]), base + start, base + end
      )
  return refs


def _read(ref: _TensorRef) -> np.ndarray:
  count = math.prod(ref.shape)
  arr = np.memmap(ref.file, dtype=ref.dtype, mode="r", offset=ref.start, shape=(count,))
  return arr.reshape(ref.shape)


def write_safetensors(
  path: pathlib.Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None
) -> None:
  """Plain safetensors writer (numpy, bf16 via ml_dtypes); tensors are written in key order."""
  header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
  offset = 0
  for key in sorted(tensors):
    arr = tensors[key]
    header[key] = {
      "dtype": _ST_NAMES[arr.dtype],
      "shape": list(arr.shape),
      "data_offsets": [offset, offset + arr.nbytes],
    }
    offset += arr.nbytes
  blob = json.dumps(header, separators=(",", ":")).encode()
  blob += b" " * (-len(blob) % 8)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    for key in sorted(tensors):
      f.write(np.ascontiguousarray(tensors[key]).tobytes())
    f.flush()
    os.fsync(f.fileno())


# ---------------------------------------------------------------------------------------- loading


@dataclasses.dataclass(frozen=True)
class _Entry:
  """One param leaf and the HF keys (one per stacked layer, or one) it is made of."""

  rule: KeyRule
  path: tuple[str, ...]
  hf_keys: tuple[str, ...]
  stacked: bool


def _expand(rules: list[KeyRule], num_layers: int) -> Iterator[_Entry]:
  for rule in rules:
    layer_ids = rule.layers if rule.layers is not None else tuple(range(num_layers))
    if "{i}" not in rule.hf:
      yield _Entry(rule, tuple(rule.param.split("/")), (rule.hf,), False)
    elif "{i}" in rule.param:
      for i in layer_ids:
        yield _Entry(rule, tuple(rule.param.format(i=i).split("/")), (rule.hf.format(i=i),), False)
    else:
      yield _Entry(
        rule, tuple(rule.param.split("/")), tuple(rule.hf.format(i=i) for i in layer_ids), True
      )


def _get(tree: Any, path: tuple[str, ...]) -> Any:
  for p in path:
    tree = tree[p]
  return tree


def _set(tree: dict, path: tuple[str, ...], value: Any) -> None:
  for p in path[:-1]:
    tree = tree.setdefault(p, {})
  tree[path[-1]] = value


def _check_entry(entry: _Entry, refs: dict[str, _TensorRef], shape: tuple[int, ...]) -> None:
  layer_shape = shape[1:] if entry.stacked else shape
  if entry.stacked and shape[0] != len(entry.hf_keys):
    raise CheckpointError(
      f"param {'/'.join(entry.path)} has {shape[0]} layers but the key map "
      f"lists {len(entry.hf_keys)}"
    )
  want = entry.rule.hf_shape(layer_shape)
  for key in entry.hf_keys:
    if key not in refs:
      raise CheckpointError(f"checkpoint is missing tensor {key} (expected shape {list(want)})")
    if refs[key].shape != want:
      raise CheckpointError(
        f"{refs[key].file.name}: tensor {key} has shape {list(refs[key].shape)}, "
        f"expected {list(want)}"
      )


def _flat_range(sizes: tuple[int, ...], slices: tuple[slice, ...]) -> slice | None:
  """The contiguous range of the row-major flattening of `sizes` that `slices` selects, or None
  when the selection is not one contiguous block (e.g. a slice of a minor axis only)."""
  ranges = [s.indices(n)[:2] for s, n in zip(slices, sizes, strict=True)]
  partial = [i for i, (a, b) in enumerate(ranges) if (a, b) != (0, sizes[i])]
  if not partial:
    return slice(0, math.prod(sizes))
  k = partial[0]
  if any(i != k for i in partial) or math.prod(sizes[:k]) != 1:
    return None
  inner = math.prod(sizes[k + 1 :])
  return slice(ranges[k][0] * inner, ranges[k][1] * inner)


def _read_shard(
  rule: KeyRule, ref: _TensorRef, shape: tuple[int, ...], index: tuple[slice, ...]
) -> np.ndarray:
  """Param-layout block `index` of one HF tensor, reading only that block when it is contiguous
  in the HF layout (the usual case: fsdp/tensor shard whole heads or rows)."""
  full = _read(ref)
  out_shape = tuple(len(range(*sl.indices(n))) for sl, n in zip(index, shape, strict=True))
  if rule.in_axes:
    n = rule.in_axes
    rows = _flat_range(shape[n:], index[n:])  # HF [out, in]
    cols = _flat_range(shape[:n], index[:n])
    if rows is not None and cols is not None:
      return np.asarray(full[rows, cols]).T.reshape(out_shape)
  else:
    ndim = rule.hf_ndim or 1
    tail = _flat_range(shape[ndim - 1 :], index[ndim - 1 :])
    if tail is not None:
      return np.asarray(full[tuple(index[: ndim - 1]) + (tail,)]).reshape(out_shape)
  return rule.to_param(np.asarray(full), shape)[index]


def _leaf_array(
  entry: _Entry, refs: dict[str, _TensorRef], abstract: jax.ShapeDtypeStruct, sharding: Any
) -> jax.Array:
  """Build one param; each device's callback reads only its own block, one layer at a time, so
  host memory holds at most one shard plus one HF tensor's block."""
  layer_shape = abstract.shape[1:] if entry.stacked else abstract.shape

  def shard(index: tuple[slice, ...] | None) -> np.ndarray:
    given = tuple(index or ())  # jax's callback type allows None (a 0-d array's index)
    index = given + (slice(None),) * (len(abstract.shape) - len(given))
    if not entry.stacked:
      return _read_shard(entry.rule, refs[entry.hf_keys[0]], layer_shape, index).astype(
        abstract.dtype
      )
    keys = entry.hf_keys[index[0]]
    return np.stack(
      [
        _read_shard(entry.rule, refs[k], layer_shape, index[1:]).astype(abstract.dtype)
        for k in keys
      ]
    )

  if sharding is None:
    return jax.numpy.asarray(shard(()))
  return jax.make_array_from_callback(abstract.shape, sharding, shard)


def load_params(ckpt_dir: str | pathlib.Path, cfg: ModelConfig, shardings: Any = None) -> Any:
  """Read `ckpt_dir` into the param tree of `cfg` (param dtype), placed in `shardings` (a tree of
  jax.sharding.Sharding matching the params, e.g. registry.param_shardings) or the default device.
  Raises CheckpointError naming the key for a missing or mis-shaped tensor."""
  refs = index_checkpoint(ckpt_dir)
  abstract = registry.abstract_params(cfg)
  entries = list(_expand(registry.family_for(cfg.model_type).key_map(cfg), cfg.num_hidden_layers))
  covered = {e.path for e in entries}
  for path, _ in jax.tree_util.tree_flatten_with_path(abstract)[0]:
    names = tuple(p.key for p in path)
    if names not in covered:
      raise CheckpointError(f"key map of {cfg.model_type} has no rule for param {'/'.join(names)}")
  for entry in entries:
    _check_entry(entry, refs, _get(abstract, entry.path).shape)
  params: dict = {}
  bar = cli.progress(
    entries, desc="load checkpoint", unit="tensor", disable=jax.process_index() > 0
  )
  for entry in bar:
    sharding = None if shardings is None else _get(shardings, entry.path)
    _set(params, entry.path, _leaf_array(entry, refs, _get(abstract, entry.path), sharding))
  return params


def load_pretrained(
  ckpt_dir: str | pathlib.Path, mesh: jax.sharding.Mesh | None = None, **overrides
) -> tuple[ModelConfig, Any]:
  """config.json + safetensors -> (ModelConfig, params), sharded over `mesh` by the config's
  logical-axis rules when given. `overrides` replace config fields (dtypes=..., scan_layers=...)."""
  cfg = registry.from_hf_config(ckpt_dir, **overrides)
  shardings = None
  if mesh is not None:
    shardings = registry.param_shardings(cfg, mesh)
  return cfg, load_params(ckpt_dir, cfg, shardings)


# ----------------------------------------------------------------------------------------- saving

_SKIP_TOKENIZER_FILES = ("config.json", "generation_config.json", SAFETENSORS_INDEX)


def _host(x: jax.Array) -> np.ndarray:
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    x = multihost_utils.process_allgather(x, tiled=True)
  return np.asarray(jax.device_get(x))


def _param(params: Any, entry: _Entry, abstract: Any) -> Any:
  """The leaf for `entry`, checked against the shape `cfg` implies."""
  name = "/".join(entry.path)
  try:
    leaf = _get(params, entry.path)
  except (KeyError, TypeError) as e:
    raise CheckpointError(f"params lack {name} (needed for {entry.hf_keys[0]})") from e
  want = _get(abstract, entry.path).shape
  if tuple(leaf.shape) != tuple(want):
    raise CheckpointError(f"param {name} has shape {list(leaf.shape)}, expected {list(want)}")
  return leaf


def hf_tensors(
  params: Any, cfg: ModelConfig, dtype: Any = None
) -> Iterator[tuple[str, np.ndarray]]:
  """(HF key, tensor) pairs for `params`, in key-map order, one host tensor at a time."""
  abstract = registry.abstract_params(cfg)
  for entry in _expand(registry.family_for(cfg.model_type).key_map(cfg), cfg.num_hidden_layers):
    leaf = _host(_param(params, entry, abstract))
    if dtype is not None:
      leaf = leaf.astype(dtype)
    layers = leaf if entry.stacked else leaf[None]
    for key, arr in zip(entry.hf_keys, layers, strict=True):
      yield key, entry.rule.to_hf(arr)


def _plan_shards(params: Any, cfg: ModelConfig, dtype: Any, max_bytes: int) -> list[list[str]]:
  """Group HF keys into files of at most ~max_bytes, from shapes alone (nothing is gathered)."""
  groups: list[list[str]] = [[]]
  size = 0
  abstract = registry.abstract_params(cfg)
  for entry in _expand(registry.family_for(cfg.model_type).key_map(cfg), cfg.num_hidden_layers):
    leaf = _param(params, entry, abstract)
    itemsize = np.dtype(dtype or leaf.dtype).itemsize
    per_key = leaf.size // len(entry.hf_keys) * itemsize
    for key in entry.hf_keys:
      if size and size + per_key > max_bytes:
        groups.append([])
        size = 0
      groups[-1].append(key)
      size += per_key
  return groups


def _write_weights(
  tmp: pathlib.Path, params: Any, cfg: ModelConfig, dtype: Any, max_bytes: int
) -> None:
  groups = _plan_shards(params, cfg, dtype, max_bytes)
  names = (
    ["model.safetensors"]
    if len(groups) == 1
    else [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
  )
  file_of = {key: names[g] for g, keys in enumerate(groups) for key in keys}
  pending: dict[str, dict[str, np.ndarray]] = {n: {} for n in names}
  want = {n: len(keys) for n, keys in zip(names, groups, strict=True)}
  total = 0
  tensors = cli.progress(
    hf_tensors(params, cfg, dtype), total=len(file_of), desc="export checkpoint", unit="tensor"
  )
  for key, arr in tensors:
    name = file_of[key]
    pending[name][key] = arr
    total += arr.nbytes
    if len(pending[name]) == want[name]:  # the key map groups a file's keys together
      write_safetensors(tmp / name, pending.pop(name))
  if len(names) > 1:
    index = {"metadata": {"total_size": total}, "weight_map": file_of}
    (tmp / SAFETENSORS_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True))


def save_pretrained(
  out_dir: str | pathlib.Path,
  params: Any,
  cfg: ModelConfig,
  *,
  tokenizer_dir: str | pathlib.Path | None = None,
  dtype: Any = None,
  generation_config: dict | None = None,
  overwrite: bool = False,
  max_shard_bytes: int = 4 << 30,
) -> pathlib.Path:
  """Write an HF checkpoint directory that `AutoModelForCausalLM.from_pretrained` loads.

  dtype: tensor dtype on disk (default: each param's dtype). Everything is written into a hidden
  sibling temp dir, then renamed to `out_dir`; on any error the temp dir is removed, and a killed
  process leaves only a hidden `.<name>.tmp-*` dir, never `out_dir`. In multi-host runs every
  process must call this (gathers are collective); only process 0 writes.
  """
  out = pathlib.Path(out_dir)
  if out.exists() and not overwrite:
    raise FileExistsError(f"{out} exists (pass overwrite=True to replace it)")
  family = registry.family_for(cfg.model_type)
  hf_config = family.to_hf(cfg)
  if dtype is not None:
    hf_config["torch_dtype"] = hf_config["dtype"] = np.dtype(dtype).name
  writer = jax.process_index() == 0
  tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
  if writer:
    tmp.mkdir(parents=True)
  try:
    if not writer:
      for _ in hf_tensors(params, cfg, dtype):  # take part in the gathers
        pass
      return out
    _write_weights(tmp, params, cfg, dtype, max_shard_bytes)
    gen = {
      k: hf_config[k]
      for k in ("bos_token_id", "eos_token_id", "pad_token_id")
      if hf_config.get(k) is not None
    }
    gen.update(family.generation_defaults)
    gen.update(generation_config or {})
    (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2))
    if tokenizer_dir is not None:
      for f in sorted(pathlib.Path(tokenizer_dir).iterdir()):
        if f.is_file() and f.name not in _SKIP_TOKENIZER_FILES and f.suffix != ".safetensors":
          shutil.copy2(f, tmp / f.name)
    (tmp / "config.json").write_text(json.dumps(hf_config, indent=2))  # last: marks completeness
    _swap_into_place(tmp, out)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return out


def _swap_into_place(tmp: pathlib.Path, out: pathlib.Path) -> None:
  if not out.exists():
    os.rename(tmp, out)
    return
  trash = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
  os.rename(out, trash)
  os.rename(tmp, out)
  shutil.rmtree(trash, ignore_errors=True)
