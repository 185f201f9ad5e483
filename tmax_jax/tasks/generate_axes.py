"""Writes N 9-axis samples as JSONL (atomically) and report the balance score.

  python3 -m tmax_jax.tasks.generate_axes --n 10000 --seed 0 --out axes.jsonl
Prints one JSON summary line: n, seed, seconds, domain balance score exp(H)/N, marginals.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
import time

from tmax_jax import cli
from tmax_jax.tasks.generator.axes import (
  balance_score,
  default_taxonomy,
  load_taxonomy,
  marginals,
  sample_axes,
)


def write_samples(
  n: int, seed: int, out: str | os.PathLike, taxonomy_path: str | None = None, progress: bool = True
) -> dict:
  """Writes samples 0..n-1 of `seed` to `out` (temp file + rename) -> a summary dict."""
  tx = load_taxonomy(taxonomy_path) if taxonomy_path else default_taxonomy()
  out = pathlib.Path(out)
  out.parent.mkdir(parents=True, exist_ok=True)
  start = time.perf_counter()
  samples = []
  fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      for i in cli.progress(
        range(n), desc="axes", unit="task", disable=not progress, mininterval=1.0
      ):
        s = sample_axes(seed, i, tx)
        samples.append(s)
        f.write(json.dumps(s.to_json(), sort_keys=True) + "\n")
    os.replace(tmp, out)
  except BaseException:
    pathlib.Path(tmp).unlink(missing_ok=True)
    raise
  seconds = time.perf_counter() - start
  return {
    "n": n,
    "seed": seed,
    "out": str(out),
    "seconds": round(seconds, 4),
    "domain_balance": round(balance_score((s.domain for s in samples), len(tx.domains)), 6),
    "marginals": {
      a: dict(sorted(marginals(samples, a).items(), key=lambda kv: str(kv[0])))
      for a in (
        "domain",
        "language",
        "task_complexity",
        "command_complexity",
        "fixture",
        "verifier",
        "primitive_skills",
      )
    },
  }


def main(argv: list[str] | None = None) -> int:
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--n", type=int, default=10000, help="number of axis samples")
  p.add_argument("--seed", type=int, default=0, help="sampling seed (sample i of a seed is fixed)")
  p.add_argument("--out", required=True, help="JSONL to write (one sample per line)")
  p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
  p.add_argument("--taxonomy", default=None, help="a taxonomy.json other than the shipped one")
  p.add_argument("--no_progress", action="store_true", help="no progress bar")
  args = p.parse_args(argv)
  if args.n < 0:
    p.error("--n must be >= 0")
  if pathlib.Path(args.out).exists() and not args.overwrite:
    raise FileExistsError(f"{args.out} exists; pass --overwrite to replace it")
  summary = write_samples(args.n, args.seed, args.out, args.taxonomy, progress=not args.no_progress)
  print(json.dumps(summary))
  return 0


if __name__ == "__main__":
  cli.run(main)
