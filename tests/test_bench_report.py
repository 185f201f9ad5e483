"""bench/report.py: alternated side-by-side timing and the busy-machine guard (fake load
readings)."""

import importlib.util
import pathlib
import sys
import time

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
_SPEC = importlib.util.spec_from_file_location("report", BENCH / "report.py")
report = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = report  # dataclasses look their module up while the class is built
_SPEC.loader.exec_module(report)
if str(BENCH) not in sys.path:  # a WorkerSide's process imports `report` by name, as benches do
  sys.path.append(str(BENCH))


def test_compare_alternates_sides_and_takes_median_ratio():
  calls = []
  loads = iter([0.25, 0.75])

  def ours():
    calls.append("o")
    time.sleep(0.002)

  def theirs():
    calls.append("t")
    time.sleep(0.006)

  c = report.compare(
    ours, theirs, pairs=6, load_fn=lambda: next(loads), before_fn=lambda: next(loads)
  )
  # warm-up o t, then pairs alternate their order: o t | t o | o t | t o ...
  assert calls == ["o", "t"] + ["o", "t", "t", "o"] * 3
  assert len(c.ours_s) == len(c.theirs_s) == 6
  assert c.ratio == sorted(c.ratios)[2] / 2 + sorted(c.ratios)[3] / 2  # median of 6
  assert 1.5 < c.ratio < 6  # theirs sleeps 3x longer
  assert (c.load_before, c.load_after) == (0.25, 0.75)
  assert "6 pairs" in c.ratio_text()


def test_other_processes_cpu_during_the_measurement_counts_as_busy(tmp_path):
  """The guard judges the load before and the CPU *others* used during the bench (all busy CPU
  minus our own), not the load after, which a bench busying every core raises by itself."""

  def compare(busy_s, own_s):  # the readings before and after, of all busy CPU and of our own
    busy, own = iter(busy_s), iter(own_s)
    return report.compare(
      lambda: time.sleep(0.01),
      lambda: time.sleep(0.01),
      load_fn=lambda: 0.1,
      before_fn=lambda: 0.1,
      cpu_fns=(lambda: next(busy), lambda: next(own)),
    )

  c = compare([100.0, 100.0 + 2.0], [10.0, 10.0 + 1.9])  # others: 0.1 CPU s
  assert 0.1 / 0.3 < c.others_cores < 0.1 / 0.1  # 0.1 CPU s over the ~0.1-0.3 s wall
  assert c.busy_readings == (0.1, c.others_cores)
  md = tmp_path / "BENCHMARKS.md"
  assert report.record_comparison(md, "m", "## m\n", ["x"], c) == (c.others_cores <= 1)
  c = compare([100.0, 100.0 + 5.0], [10.0, 10.0 + 0.2])  # others: 4.8 CPU s
  assert c.others_cores > 4.8 / 0.5 and not report.record_comparison(md, "m", "## m\n", ["y"], c)
  assert "| y |" not in (md.read_text() if md.exists() else "")


def test_load_before_is_read_before_the_bench_set_up_ran(monkeypatch):
  """A long set-up (model build, compiles) raises the load average by itself: the guard's load
  before is the one at the bench process's start, not the one when compare() begins."""
  monkeypatch.setattr(report, "START_LOAD", 0.2)
  c = report.compare(lambda: None, lambda: None, load_fn=lambda: 1.9)
  assert (c.load_before, c.load_after) == (0.2, 1.9)


def test_compare_needs_five_pairs():
  with pytest.raises(ValueError, match=">= 5 pairs"):
    report.compare(lambda: None, lambda: None, pairs=4)


def test_record_row_refuses_a_busy_machine(tmp_path, capsys):
  out = tmp_path / "BENCHMARKS.md"
  assert not report.record_row(out, "m", "## m\n", "| row |", loads=(0.4, 1.3), cores=2)
  assert not out.exists()
  assert "not recorded: machine busy" in capsys.readouterr().out
  assert report.record_row(out, "m", "## m\n", "| row |", loads=(0.4, 0.9), cores=2)
  assert report.record_row(out, "m", "## m\n", "| row2 |", loads=(0.1, 0.2), cores=2)
  assert out.read_text() == "## m\n| row |\n| row2 |\n"


def test_rows_land_in_their_own_section(tmp_path):
  out = tmp_path / "BENCHMARKS.md"
  out.write_text(
    "## a (bench/a.py)\n\ntext\n\n| h |\n|---|\n| a1 |\n\n## b (bench/b.py)\n"
    "\n| h |\n|---|\n| b1 |\n"
  )
  report.append_row(out, "bench/a.py", "## a (bench/a.py)\n| h |\n", "| a2 |")
  report.append_row(out, "bench/b.py", "## b\n", "| b2 |")
  report.append_row(out, "bench/c.py", "\n## c (bench/c.py)\n| h |\n", "| c1 |")
  assert out.read_text() == (
    "## a (bench/a.py)\n\ntext\n\n| h |\n|---|\n| a1 |\n| a2 |\n\n"
    "## b (bench/b.py)\n\n| h |\n|---|\n| b1 |\n| b2 |\n"
    "\n## c (bench/c.py)\n| h |\n| c1 |\n"
  )


def test_worker_side_times_its_own_steps_in_its_own_process():
  """A WorkerSide runs the step in a fresh interpreter with its env, times it there, and its CPU
  counts as ours for the busy-machine guard (a busy worker is not 'other processes')."""
  import functools
  import os

  env = {"TMAX_TEST_SIDE": "worker"}
  with report.WorkerSide("functools:partial", os.getenv, "TMAX_TEST_SIDE", env=env) as side:
    assert side() < 0.5 and side.value == "worker"  # the worker saw the env entry
  assert "TMAX_TEST_SIDE" not in os.environ  # ...and this process's env is as it was

  with report.WorkerSide("functools:partial", sum, range(3_000_000)) as busy:
    spin = functools.partial(sum, range(3_000_000))

    def all_busy():  # a machine where only this process and its worker run (xdist may not be)
      return report.own_cpu_seconds() + busy.cpu_seconds()

    c = report.compare(
      spin, busy, pairs=5, timed=(False, True), cpu_fns=(all_busy, report.own_cpu_seconds)
    )
    assert busy.value == sum(range(3_000_000))
    assert busy.cpu_seconds() > 0
  assert 0.2 < c.ratio < 5  # the same work on both sides
  assert c.others_cores < 0.05  # the worker's CPU is ours, not another process's


def test_worker_side_reports_the_failure_of_its_step():
  with pytest.raises(RuntimeError, match="ZeroDivisionError"):
    report.WorkerSide("operator:truediv", 1, 0)  # the factory itself raises in the worker
  with (
    report.WorkerSide("functools:partial", divmod, 1, 0) as side,
    pytest.raises(RuntimeError, match="ZeroDivisionError"),
  ):
    side()


def failing_step_that_lingers(linger_s: float):
  """A WorkerSide factory (run in the worker): its step raises, and the worker then closes its
  end of the pipe and stays alive `linger_s` more seconds, which widens to a certain hit the
  window in which the worker's end is closed but its process not yet reaped."""
  import atexit
  import os

  def linger():
    os.closerange(3, 4096)
    time.sleep(linger_s)

  atexit.register(linger)
  return lambda: 1 / 0


def test_worker_side_failure_races_no_stop_request_into_the_closed_pipe():
  # The flake of issue 34: the parent sent its stop request after the worker had reported its
  # error and closed its end (BrokenPipeError). A worker that reported an error reads nothing more.
  with report.WorkerSide(f"{__name__}:failing_step_that_lingers", 1.0) as side:
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
      side()
    assert not side._proc.is_alive()


def test_torch_side_leaves_malloc_as_torch_users_have_it():
  import os

  from tmax_jax import host_memory

  with report.torch_side("functools:partial", os.getenv, host_memory.ENV) as side:
    side()
    assert side.value == "default"
  assert "default" in report.torch_side_note("default")
  with pytest.raises(ValueError, match="malloc="):
    report.torch_side("functools:partial", os.getenv, "X", malloc="jemalloc")
