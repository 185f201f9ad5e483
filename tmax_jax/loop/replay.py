"""Rollout batches recorded to disk and replayed (RLConfig.record_dir / replay_dir).

Recording: before step n trains, every process writes the rows it feeds as
`<dir>/step_<n>.process_<p>_of_<P>.npz` (temp file + rename, so a killed run never leaves a partial
file); a step skipped for lack of usable groups writes `step_<n>.skipped`. Replaying reads step n's
files of all processes, in process order, as the global batch, and feeds this process's rows of it:
a batch recorded by a 2-process run replays on 1 process (or 4) as the same global batch, so the
train state of a replay can be compared across meshes and process counts.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

import numpy as np

from tmax_jax.train.batch import PackedBatch, TrainBatch

FIELDS = tuple(f.name for f in dataclasses.fields(TrainBatch))


def _stem(step: int) -> str:
  return f"step_{step:06d}"


def _parts(batch) -> list[TrainBatch]:
  return list(batch.micro_batches) if isinstance(batch, PackedBatch) else [batch]


def record(directory: str, step: int, local, process: int, num_processes: int) -> None:
  """Writes this process's rows of step `step` (a TrainBatch or PackedBatch; None: skipped)."""
  out = pathlib.Path(directory)
  out.mkdir(parents=True, exist_ok=True)
  if local is None:
    if process == 0:
      (out / f"{_stem(step)}.skipped").touch()
    return
  path = out / f"{_stem(step)}.process_{process}_of_{num_processes}.npz"
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  arrays = {
    f"{i}/{k}": v
    for i, part in enumerate(_parts(local))
    for k, v in part.fields().items()
    if v is not None
  }
  arrays["packed"] = np.asarray(isinstance(local, PackedBatch))
  with open(tmp, "wb") as f:
    np.savez(f, **arrays)
  os.replace(tmp, path)


def _read(path: pathlib.Path) -> tuple[bool, list[dict]]:
  with np.load(path) as z:
    parts: dict[int, dict] = {}
    for key in z.files:
      if key != "packed":
        i, name = key.split("/", 1)
        parts.setdefault(int(i), {})[name] = z[key]
    return bool(z["packed"]), [parts[i] for i in sorted(parts)]


def load(directory: str, step: int):
  """The global batch of step `step` (TrainBatch or PackedBatch; None if it was skipped); every
  process's rows of each micro-batch, in process order. FileNotFoundError naming the directory and
  step when it was never recorded, ValueError for an incomplete set of files."""
  root = pathlib.Path(directory)
  if (root / f"{_stem(step)}.skipped").exists():
    return None
  files = sorted(root.glob(f"{_stem(step)}.process_*_of_*.npz"))
  if not files:
    raise FileNotFoundError(
      f"replay_dir {root}: no recorded batch for step {step} ({_stem(step)}.process_*.npz)"
    )
  total = int(files[0].stem.rsplit("_of_", 1)[1])
  order = sorted(files, key=lambda f: int(f.stem.split(".process_")[1].split("_of_")[0]))
  if len(order) != total:
    raise ValueError(f"replay_dir {root}: step {step} has {len(order)} of {total} process files")
  read = [_read(f) for f in order]
  packed, per_process = read[0][0], [parts for _, parts in read]
  if len({len(p) for p in per_process}) != 1:
    raise ValueError(
      f"replay_dir {root}: step {step}'s processes recorded different numbers of micro-batches"
    )
  batches = [
    TrainBatch(
      **{  # a field not recorded (an optional loss input) keeps TrainBatch's default, None
        k: np.concatenate([p[i][k] for p in per_process]) for k in FIELDS if k in per_process[0][i]
      }
    )
    for i in range(len(per_process[0]))
  ]
  return PackedBatch(tuple(batches)) if packed else batches[0]
