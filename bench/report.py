"""Shared by the benches: side-by-side timing with alternated sides, the load-average guard, and
appending a result row to a markdown table in BENCHMARKS.md.

Discipline (BENCHMARKS.md rows are only taken this way):
  * `compare(ours, theirs)` warms both sides up, then runs >= 5 pairs with the order alternated
    (ours-theirs, theirs-ours, ...), so drift of the machine hits both sides alike; the reported
    ratio is the median of the per-pair ratios theirs / ours (> 1: ours faster) with its min/max.
  * The 1-minute load average is read before and after; `record_row` refuses to append a row when
    either reading exceeds half the core count (it prints the row marked "not recorded: machine
    busy"). A ratio taken while tests or other jobs ran is noise, not a measurement.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import statistics
import time
from typing import Callable

MIN_PAIRS = 5


def time_it(fn, repeats: int) -> tuple[float, float]:
  """(median, min) seconds of `fn()` over `repeats` runs after one warm-up / compile call (for
  single-sided timings; side-by-side ratios use `compare`)."""
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times), min(times)


def load_average() -> float:
  """The 1-minute load average."""
  return os.getloadavg()[0]


def core_count() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@dataclasses.dataclass(frozen=True)
class Comparison:
  """Seconds per call of each side, pair by pair, and the load around the measurement."""

  ours_s: tuple[float, ...]
  theirs_s: tuple[float, ...]
  load_before: float
  load_after: float

  @property
  def ratios(self) -> tuple[float, ...]:
    """theirs / ours per pair (> 1: ours faster)."""
    return tuple(t / o for o, t in zip(self.ours_s, self.theirs_s))

  @property
  def ratio(self) -> float:
    return statistics.median(self.ratios)

  @property
  def ours_median_s(self) -> float:
    return statistics.median(self.ours_s)

  @property
  def theirs_median_s(self) -> float:
    return statistics.median(self.theirs_s)

  @property
  def max_load(self) -> float:
    return max(self.load_before, self.load_after)

  def ratio_text(self) -> str:
    """E.g. '1.23x (1.10-1.31x, 5 pairs)'."""
    r = self.ratios
    return f"{self.ratio:.2f}x ({min(r):.2f}-{max(r):.2f}x, {len(r)} pairs)"

  def load_text(self) -> str:
    return f"load {self.load_before:.2f} -> {self.load_after:.2f}"

  def as_dict(self) -> dict:
    return {"ours_s": list(self.ours_s), "theirs_s": list(self.theirs_s),
            "ratios": list(self.ratios), "ratio_median": self.ratio,
            "ratio_min": min(self.ratios), "ratio_max": max(self.ratios),
            "ours_median_s": self.ours_median_s, "theirs_median_s": self.theirs_median_s,
            "load_before": self.load_before, "load_after": self.load_after}


def _timed(fn: Callable[[], object]) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def compare(ours: Callable[[], object], theirs: Callable[[], object], *, pairs: int = MIN_PAIRS,
            warmup: int = 1, load_fn: Callable[[], float] = load_average) -> Comparison:
  """Times `ours()` and `theirs()` side by side: `warmup` calls of each (compilation), then
  `pairs` pairs in alternated order. Each call must block until its result is ready."""
  if pairs < MIN_PAIRS:
    raise ValueError(f"compare: pairs={pairs}; a side-by-side ratio needs >= {MIN_PAIRS} pairs")
  load_before = load_fn()
  for _ in range(warmup):
    ours()
    theirs()
  ours_s, theirs_s = [], []
  for i in range(pairs):
    if i % 2 == 0:
      ours_s.append(_timed(ours))
      theirs_s.append(_timed(theirs))
    else:
      theirs_s.append(_timed(theirs))
      ours_s.append(_timed(ours))
  return Comparison(tuple(ours_s), tuple(theirs_s), load_before, load_fn())


def machine_busy(load: float, cores: int | None = None) -> bool:
  """True when the 1-minute load average exceeds half the core count."""
  return load > (cores or core_count()) / 2


def append_row(path: pathlib.Path, marker: str, heading: str, row: str) -> None:
  """Appends `row`; writes `heading` (markdown incl. the table header) first when `marker` (the
  bench's name) does not appear in the file yet. Callers go through `record_row`."""
  path = pathlib.Path(path)
  new = not path.exists() or marker not in path.read_text()
  with open(path, "a") as f:
    if new:
      f.write(heading)
    f.write(row + "\n")


def record_row(path: pathlib.Path | None, marker: str, heading: str, row: str, *,
               loads: tuple[float, ...], cores: int | None = None) -> bool:
  """Prints `row` and appends it to `path` (when given) unless any of the `loads` readings says
  the machine was busy; then the row is printed marked 'not recorded: machine busy' and nothing
  is written. -> whether the row was written."""
  worst = max(loads)
  if machine_busy(worst, cores):
    print(f"{row} not recorded: machine busy (1-min load {worst:.2f} > "
          f"{(cores or core_count()) / 2:g})")
    return False
  print(row)
  if path is None:
    return False
  append_row(path, marker, heading, row)
  return True
