"""Shared by the CPU benches: timing (median and min after a warm-up) and appending a result row
to a markdown table in BENCHMARKS.md (the table's heading is written once, before its first row)."""

from __future__ import annotations

import pathlib
import statistics
import time


def time_it(fn, repeats: int) -> tuple[float, float]:
  """(median, min) seconds of `fn()` over `repeats` runs after one warm-up / compile call."""
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times), min(times)


def append_row(path: pathlib.Path, marker: str, heading: str, row: str) -> None:
  """Appends `row`; writes `heading` (markdown incl. the table header) first when `marker` (the
  bench's name) does not appear in the file yet."""
  new = not path.exists() or marker not in path.read_text()
  with open(path, "a") as f:
    if new:
      f.write(heading)
    f.write(row + "\n")
