"""Shared by the benches: side-by-side timing with alternated sides, the load-average guard, and
appending a result row to a markdown table in BENCHMARKS.md.

Discipline (BENCHMARKS.md rows are only taken this way):
  * `compare(ours, theirs)` warms both sides up, then runs >= 5 pairs with the order alternated
    (ours-theirs, theirs-ours, ...), so drift of the machine hits both sides alike; the reported
    ratio is the median of the per-pair ratios theirs / ours (> 1: ours faster) with its min/max.
  * The machine must be quiet before and stay quiet during the measurement: `record_row` refuses
    to append a row when the 1-minute load average before the bench (read when the bench process
    imported this module, before its own set-up), or the CPU the *other*
    processes used during it (cores busy per /proc/stat minus this process's own CPU time),
    exceeds half the core count (it prints the row marked "not recorded: machine busy"). The load
    average after the bench is printed but not judged: a bench that keeps every core busy for a
    minute raises it to about the core count by itself. A ratio taken while tests or other jobs
    ran is noise, not a measurement.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import statistics
import time
from typing import Callable

from tmax_jax import json_io

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


# The 1-minute load when the bench process imported this module, before its own set-up (model
# builds, compiles) ran: a long set-up raises the load average by itself, so the load read at
# compare() time would count the bench against itself.
START_LOAD = load_average()


def busy_cpu_seconds() -> float | None:
  """CPU seconds all processes have used (Linux /proc/stat; None where it does not exist)."""
  try:
    with open("/proc/stat", encoding="ascii") as f:
      fields = [int(x) for x in f.readline().split()[1:]]
  except OSError:
    return None
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
  return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system


def core_count() -> int:
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@dataclasses.dataclass(frozen=True)
class Comparison:
  """Seconds per call of each side, pair by pair, and the load around the measurement."""

  ours_s: tuple[float, ...]
  theirs_s: tuple[float, ...]
  load_before: float
  load_after: float
  others_cores: float = 0.0  # mean cores the other processes kept busy during the measurement

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
  def busy_readings(self) -> tuple[float, ...]:
    """What the busy-machine guard judges: load before, other processes' cores during."""
    return (self.load_before, self.others_cores)

  def ratio_text(self) -> str:
    """E.g. '1.23x (1.10-1.31x, 5 pairs)'."""
    r = self.ratios
    return f"{self.ratio:.2f}x ({min(r):.2f}-{max(r):.2f}x, {len(r)} pairs)"

  def load_text(self) -> str:
    return (
      f"load {self.load_before:.2f} -> {self.load_after:.2f}, others {self.others_cores:.2f} cores"
    )

  def as_dict(self) -> dict:
    return {
      "ours_s": list(self.ours_s),
      "theirs_s": list(self.theirs_s),
      "ratios": list(self.ratios),
      "ratio_median": self.ratio,
      "ratio_min": min(self.ratios),
      "ratio_max": max(self.ratios),
      "ours_median_s": self.ours_median_s,
      "theirs_median_s": self.theirs_median_s,
      "load_before": self.load_before,
      "load_after": self.load_after,
      "others_cores": self.others_cores,
    }


def _timer(timed: bool) -> Callable[[Callable[[], object]], float]:
  def wall(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start

  return (lambda fn: float(fn())) if timed else wall


def compare(
  ours: Callable[[], object],
  theirs: Callable[[], object],
  *,
  pairs: int = MIN_PAIRS,
  warmup: int = 1,
  load_fn: Callable[[], float] = load_average,
  before_fn: Callable[[], float] = lambda: START_LOAD,
  timed: bool = False,
  cpu_fns: tuple[Callable[[], float | None], Callable[[], float]] = (
    busy_cpu_seconds,
    own_cpu_seconds,
  ),
) -> Comparison:
  """Times `ours()` and `theirs()` side by side: `warmup` calls of each (compilation), then
  `pairs` pairs in alternated order. Each call must block until its result is ready.

  timed: each call returns the seconds to count itself (a side whose set-up must stay out of
  the measurement, e.g. HF decode time = time(n tokens) - time(1 token)); both sides must then
  measure the same amount of work."""
  if pairs < MIN_PAIRS:
    raise ValueError(f"compare: pairs={pairs}; a side-by-side ratio needs >= {MIN_PAIRS} pairs")
  measure = _timer(timed)
  load_before = before_fn()
  busy_fn, own_fn = cpu_fns
  busy0, own0, wall0 = busy_fn(), own_fn(), time.perf_counter()
  for _ in range(warmup):
    ours()
    theirs()
  ours_s, theirs_s = [], []
  for i in range(pairs):
    if i % 2 == 0:
      ours_s.append(measure(ours))
      theirs_s.append(measure(theirs))
    else:
      theirs_s.append(measure(theirs))
      ours_s.append(measure(ours))
  busy1, own1, wall = busy_fn(), own_fn(), time.perf_counter() - wall0
  others = 0.0 if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - (own1 - own0))
  return Comparison(tuple(ours_s), tuple(theirs_s), load_before, load_fn(), others / wall)


def setup_text() -> str:
  """Versions and cores for a row's setup column."""
  import jax  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel

  return (
    f"jax {jax.__version__} / torch {torch.__version__}, {core_count()} CPUs, "
    f"torch threads {torch.get_num_threads()}"
  )


def utc_now() -> str:
  import datetime  # pylint: disable=import-outside-toplevel

  return f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}"


def machine_busy(load: float, cores: int | None = None) -> bool:
  """True when the 1-minute load average exceeds half the core count."""
  return load > (cores or core_count()) / 2


def append_row(path: pathlib.Path, marker: str, heading: str, row: str) -> None:
  """Adds `row` at the end of the first table after the `## ` heading line that contains `marker`
  (the bench's name); without such a section, appends `heading` (markdown incl. the table
  header) and the row at the end of the file. Written atomically. Callers go through
  `record_row`."""
  path = pathlib.Path(path)
  lines = path.read_text().splitlines(keepends=True) if path.exists() else []
  start = next(
    (i for i, line in enumerate(lines) if line.startswith("## ") and marker in line), None
  )
  if start is None:
    text = "".join(lines) + heading + row + "\n"
  else:
    i = start + 1
    while i < len(lines) and not lines[i].startswith("|"):
      i += 1
    while i < len(lines) and lines[i].startswith("|"):
      i += 1
    text = "".join(lines[:i] + [row + "\n"] + lines[i:])
  json_io.write_text_atomic(path, [text])


def record_row(
  path: pathlib.Path | None,
  marker: str,
  heading: str,
  row: str,
  *,
  loads: tuple[float, ...],
  cores: int | None = None,
) -> bool:
  """Prints `row` and appends it to `path` (when given) unless any of the `loads` readings (load
  average before, other processes' cores during: Comparison.busy_readings) says the machine was
  busy; then the row is printed marked 'not recorded: machine busy' and nothing
  is written. -> whether the row was written."""
  worst = max(loads)
  if machine_busy(worst, cores):
    print(
      f"{row} not recorded: machine busy (load or other processes' cores {worst:.2f} > "
      f"{(cores or core_count()) / 2:g})"
    )
    return False
  print(row)
  if path is None:
    return False
  append_row(path, marker, heading, row)
  return True


def record_comparison(
  path: pathlib.Path | None, marker: str, heading: str, cells: list[str], c: Comparison
) -> bool:
  """The side-by-side benches' row: | when (UTC) | *cells | ratio (min-max, pairs) | versions,
  cores, load before -> after |, through `record_row` (refused on a busy machine)."""
  row = (
    "| "
    + " | ".join([utc_now(), *cells, c.ratio_text(), f"{setup_text()}, {c.load_text()}"])
    + " |"
  )
  return record_row(path, marker, heading, row, loads=c.busy_readings)
