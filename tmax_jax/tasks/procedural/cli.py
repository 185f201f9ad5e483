"""Writes N procedural tasks to a directory of TB2 task dirs or to a parquet of task tarballs.

  python3 -m tmax_jax.tasks.procedural.cli --n 10000 --seed 0 --out DIR
  python3 -m tmax_jax.tasks.procedural.cli --n 10000 --seed 0 --out tasks.parquet

Task i uses family FAMILIES[i % F] (round-robin), difficulty level (i // F) % 3 and task seed
seed * 1_000_000 + i, so the output is a pure function of (n, seed, families, levels). The parquet
has columns path (task name) and task_binary (gzipped tar of the task directory, fixed mtimes); both
outputs are written to a temp path and renamed into place. A manifest JSONL (one line per task:
index, name, family, level, seed, sha256 of the tarball) lands next to the output.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import multiprocessing
import os
import pathlib
import shutil
import tarfile
import tempfile
import time

from tmax_jax import cli
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.procedural import core, registry


@dataclasses.dataclass(frozen=True)
class Plan:
  """Which task each index is: (index, family, level, task seed)."""

  index: int
  family: str
  level: int
  seed: int

  @property
  def name(self) -> str:
    return f"{self.index:06d}-{registry.task_name(self.family, self.seed, self.level)}"


def plan(n: int, seed: int, families: list[str] | None = None, levels=core.LEVELS) -> list[Plan]:
  fams = families or list(registry.FAMILIES)
  for f in fams:
    registry.get_family(f)
  return [
    Plan(i, fams[i % len(fams)], levels[(i // len(fams)) % len(levels)], seed * 1_000_000 + i)
    for i in range(n)
  ]


def task_tarball(task: fmt.Task, root: str) -> bytes:
  """The task dir as a deterministic gzipped tar (root/instruction.md, root/task.toml, ...)."""
  entries = {
    "instruction.md": (task.instruction.encode(), 0o644),
    "task.toml": (fmt.dumps_task_config(task.config).encode(), 0o644),
  }
  for sec in fmt.SECTIONS:
    for rel, data in getattr(task, sec).items():
      mode = 0o755 if rel.endswith(".sh") or f"{sec}/{rel}" in task.executables else 0o644
      entries[f"{sec}/{rel}"] = (data, mode)
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
    dirs = sorted({"/".join(p.split("/")[:k]) for p in entries for k in range(1, p.count("/") + 1)})
    for d in [""] + dirs:
      info = tarfile.TarInfo(f"{root}/{d}".rstrip("/"))
      info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
      tf.addfile(info)
    for rel in sorted(entries):
      data, mode = entries[rel]
      info = tarfile.TarInfo(f"{root}/{rel}")
      info.size, info.mode, info.mtime = len(data), mode, 0
      tf.addfile(info, io.BytesIO(data))
  return gzip.compress(buf.getvalue(), compresslevel=6, mtime=0)


def _build(p: Plan) -> tuple[Plan, fmt.Task]:
  return p, registry.build_task(p.family, p.seed, p.level)


def _manifest_line(p: Plan, blob: bytes) -> str:
  return json.dumps(
    {
      "index": p.index,
      "name": p.name,
      "family": p.family,
      "level": p.level,
      "seed": p.seed,
      "sha256": hashlib.sha256(blob).hexdigest(),
    }
  )


def generate(
  out: str | os.PathLike,
  n: int,
  seed: int = 0,
  *,
  families: list[str] | None = None,
  workers: int = 1,
  progress: bool = True,
  overwrite: bool = False,
) -> dict:
  """Writes the tasks; returns {"n", "seconds", "out", "manifest"}. out "*.parquet" -> parquet.
  An existing `out` raises FileExistsError before any work, unless `overwrite`."""
  out = pathlib.Path(out)
  if out.exists() and not overwrite:
    raise FileExistsError(f"{out} exists; pass --overwrite (overwrite=True) to replace it")
  plans = plan(n, seed, families)
  as_parquet = out.suffix == ".parquet"
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
  manifest_tmp = tmp / "manifest.jsonl"
  start = time.monotonic()
  paths, blobs = [], []
  try:
    with open(manifest_tmp, "w") as man:
      pool = multiprocessing.get_context("fork").Pool(workers) if workers > 1 else None
      it = pool.imap(_build, plans, chunksize=8) if pool else map(_build, plans)
      for p, task in cli.progress(it, total=n, disable=not progress, desc="tasks", unit="task"):
        blob = task_tarball(task, p.name)
        man.write(_manifest_line(p, blob) + "\n")
        if as_parquet:
          paths.append(p.name)
          blobs.append(blob)
        else:
          fmt.write_task(task, tmp / "tasks" / p.name)
      if pool:
        pool.close()
        pool.join()
    manifest = out.with_name(out.name + ".manifest.jsonl")
    if as_parquet:
      _write_parquet(tmp / "data.parquet", paths, blobs)
      os.replace(tmp / "data.parquet", out)
    else:
      (tmp / "tasks").mkdir(exist_ok=True)
      if out.exists():  # overwrite: the old directory goes with the temp dir
        os.replace(out, tmp / "replaced")
      os.replace(tmp / "tasks", out)
    os.replace(manifest_tmp, manifest)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return {"n": n, "seconds": time.monotonic() - start, "out": str(out), "manifest": str(manifest)}


def _write_parquet(path: pathlib.Path, paths: list[str], blobs: list[bytes]) -> None:
  import pyarrow as pa  # noqa: PLC0415  (not in the Harbor venv)
  import pyarrow.parquet as pq  # noqa: PLC0415  (not in the Harbor venv)

  table = pa.table(
    {"path": pa.array(paths, pa.string()), "task_binary": pa.array(blobs, pa.binary())}
  )
  pq.write_table(table, path, compression="zstd")


def main(argv: list[str] | None = None) -> int:
  ap = cli.ArgumentParser(description=cli.description(__doc__))
  ap.add_argument("--n", type=int, help="number of tasks")
  ap.add_argument(
    "--seed",
    type=int,
    default=0,
    help="the set's seed: task i is generated with seed SEED * 1000000 + i",
  )
  ap.add_argument("--out", help="a directory, or a file ending in .parquet")
  ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
  ap.add_argument("--families", default="", help="comma-separated family names (default: all)")
  ap.add_argument("--workers", type=int, default=1, help="generator processes")
  ap.add_argument("--list", action="store_true", help="print the families and exit")
  args = ap.parse_args(argv)
  if args.list:
    for row in registry.summary():
      print(json.dumps(row))
    return 0
  if args.n is None or not args.out:
    ap.error("--n and --out are required (unless --list)")
  fams = [f for f in args.families.split(",") if f] or None
  res = generate(
    args.out, args.n, args.seed, families=fams, workers=args.workers, overwrite=args.overwrite
  )
  print(json.dumps(res))
  return 0


if __name__ == "__main__":
  cli.run(main)
