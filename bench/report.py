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
from collections.abc import Callable

from tmax_jax import host_memory, json_io

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
    return tuple(t / o for o, t in zip(self.ours_s, self.theirs_s, strict=True))

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


class WorkerSide:
  """One side of a comparison, run in its own Python process: the other framework as its users
  run it, untouched by what importing tmax_jax does to this process (host_memory's glibc malloc
  settings, which speed up torch as well: docs/design/host-memory.md). `factory` ("module:function",
  importable in a fresh interpreter with this process's sys.path) builds the step callable there
  from `args`/`kwargs` (pickled). Calling the side runs one step there and returns the seconds
  the step took, measured there (use it with `compare(..., timed=(False, True))`); `value` is
  what the last step returned (if picklable). `env` entries are set in the worker's environment
  (e.g. {host_memory.ENV: "default"}). Close it (or use it as a context manager) when done."""

  def __init__(self, factory: str, *args, env: dict[str, str] | None = None, **kwargs):
    import multiprocessing

    self.factory, env = factory, dict(env or {})
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter, not a fork of this one
    self._conn, child = ctx.Pipe()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the spawned interpreter inherits the environment at start()
    try:
      self._proc = ctx.Process(
        target=_serve_side, args=(child, factory, args, kwargs), daemon=True, name=factory
      )
      self._proc.start()
    finally:
      for k, v in saved.items():
        if v is None:
          os.environ.pop(k, None)
        else:
          os.environ[k] = v
    child.close()
    self.value = None
    # Whether the worker still reads requests. After it reported an error it returns and exits:
    # sending it the stop request then races its exit (BrokenPipeError once its end is closed,
    # which is_alive() cannot rule out: the end closes before the process is reaped).
    self._serving = True
    self._cpu = self._receive()[0]

  def _receive(self):
    try:
      kind, *payload = self._conn.recv()
    except EOFError:
      self._serving = False  # the worker died without a word (killed, crashed interpreter)
      self.close()
      raise RuntimeError(f"worker side {self.factory} exited without an answer") from None
    if kind == "error":
      self._serving = False
      self.close()
      raise RuntimeError(f"worker side {self.factory} failed:\n{payload[0]}")
    return payload

  def __call__(self) -> float:
    self._conn.send("step")
    seconds, self.value, self._cpu = self._receive()
    return seconds

  def cpu_seconds(self) -> float:
    """CPU seconds the worker process has used so far (as of its last answer)."""
    return self._cpu

  def close(self) -> None:
    if self._serving:
      self._serving = False
      self._conn.send(None)
    self._proc.join(timeout=30)
    if self._proc.is_alive():
      self._proc.kill()
      self._proc.join()
    self._conn.close()

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


MALLOC_CHOICES = ("default", "tuned")  # the --theirs_malloc choices of the torch benches


def torch_side(factory: str, *args, malloc: str = "default", **kwargs) -> WorkerSide:
  """The torch side of a bench in its own process: with glibc malloc as torch users have it
  ("default"), or with the settings importing tmax_jax applies ("tuned", host_memory)."""
  if malloc not in MALLOC_CHOICES:
    raise ValueError(f"malloc={malloc!r}; expected one of {MALLOC_CHOICES}")
  env = {host_memory.ENV: "default" if malloc == "default" else "reuse"}
  return WorkerSide(factory, *args, env=env, **kwargs)


def torch_side_note(malloc: str) -> str:
  """The setup column's words for where and how the torch side ran."""
  how = "glibc malloc default" if malloc == "default" else "glibc malloc tuned as ours"
  return f"torch in its own process ({how})"


def _process_cpu_seconds() -> float:
  t = os.times()
  return t.user + t.system


def _serve_side(conn, factory: str, args, kwargs) -> None:
  """WorkerSide's process: build the step, then time one step per request until None."""
  host_memory.reuse_freed_memory()  # a fresh interpreter: as the env it was given says
  import importlib
  import traceback

  try:
    module, _, name = factory.partition(":")
    step = getattr(importlib.import_module(module), name)(*args, **kwargs)
    conn.send(("ready", _process_cpu_seconds()))
    while conn.recv() is not None:
      start = time.perf_counter()
      value = step()
      seconds = time.perf_counter() - start
      conn.send(("done", seconds, value, _process_cpu_seconds()))
  except Exception:  # reported to the parent, which raises
    conn.send(("error", traceback.format_exc()))


def compare(
  ours: Callable[[], object],
  theirs: Callable[[], object],
  *,
  pairs: int = MIN_PAIRS,
  warmup: int = 1,
  load_fn: Callable[[], float] = load_average,
  before_fn: Callable[[], float] = lambda: START_LOAD,
  timed: bool | tuple[bool, bool] = False,
  cpu_fns: tuple[Callable[[], float | None], Callable[[], float]] = (
    busy_cpu_seconds,
    own_cpu_seconds,
  ),
) -> Comparison:
  """Times `ours()` and `theirs()` side by side: `warmup` calls of each (compilation), then
  `pairs` pairs in alternated order. Each call must block until its result is ready.

  timed: each call returns the seconds to count itself (a side whose set-up must stay out of
  the measurement, e.g. HF decode time = time(n tokens) - time(1 token)); both sides must then
  measure the same amount of work. A pair (ours, theirs) says it per side (a WorkerSide times
  itself). A WorkerSide's CPU counts as this process's own for the busy-machine guard."""
  if pairs < MIN_PAIRS:
    raise ValueError(f"compare: pairs={pairs}; a side-by-side ratio needs >= {MIN_PAIRS} pairs")
  timed_ours, timed_theirs = timed if isinstance(timed, tuple) else (timed, timed)
  measure_ours, measure_theirs = _timer(timed_ours), _timer(timed_theirs)
  load_before = before_fn()
  busy_fn, own_process_fn = cpu_fns
  workers = [side for side in (ours, theirs) if isinstance(side, WorkerSide)]

  def own_fn():
    return own_process_fn() + sum(w.cpu_seconds() for w in workers)

  busy0, own0, wall0 = busy_fn(), own_fn(), time.perf_counter()
  for _ in range(warmup):
    ours()
    theirs()
  ours_s, theirs_s = [], []
  for i in range(pairs):
    if i % 2 == 0:
      ours_s.append(measure_ours(ours))
      theirs_s.append(measure_theirs(theirs))
    else:
      theirs_s.append(measure_theirs(theirs))
      ours_s.append(measure_ours(ours))
  busy1, own1, wall = busy_fn(), own_fn(), time.perf_counter() - wall0
  others = 0.0 if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - (own1 - own0))
  return Comparison(tuple(ours_s), tuple(theirs_s), load_before, load_fn(), others / wall)


def setup_text() -> str:
  """Versions and cores for a row's setup column."""
  import jax
  import torch

  return (
    f"jax {jax.__version__} / torch {torch.__version__}, {core_count()} CPUs, "
    f"torch threads {torch.get_num_threads()}"
  )


def utc_now() -> str:
  import datetime

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
  path: pathlib.Path | None,
  marker: str,
  heading: str,
  cells: list[str],
  c: Comparison,
  note: str = "",
) -> bool:
  """The side-by-side benches' row: | when (UTC) | *cells | ratio (min-max, pairs) | versions,
  cores, [note,] load before -> after |, through `record_row` (refused on a busy machine)."""
  setup = ", ".join(x for x in (setup_text(), note, c.load_text()) if x)
  row = "| " + " | ".join([utc_now(), *cells, c.ratio_text(), setup]) + " |"
  return record_row(path, marker, heading, row, loads=c.busy_readings)
