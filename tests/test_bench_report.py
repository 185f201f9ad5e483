"""bench/report.py: alternated side-by-side timing and the busy-machine guard (fake load
readings)."""

import importlib.util
import pathlib
import sys
import time

import pytest

_SPEC = importlib.util.spec_from_file_location(
  "bench_report", pathlib.Path(__file__).resolve().parents[1] / "bench" / "report.py"
)
report = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = report  # dataclasses look their module up while the class is built
_SPEC.loader.exec_module(report)


def test_compare_alternates_sides_and_takes_median_ratio():
  calls = []
  loads = iter([0.25, 0.75])

  def ours():
    calls.append("o")
    time.sleep(0.002)

  def theirs():
    calls.append("t")
    time.sleep(0.006)

  c = report.compare(ours, theirs, pairs=6, load_fn=lambda: next(loads))
  # warm-up o t, then pairs alternate their order: o t | t o | o t | t o ...
  assert calls == ["o", "t"] + ["o", "t", "t", "o"] * 3
  assert len(c.ours_s) == len(c.theirs_s) == 6
  assert c.ratio == sorted(c.ratios)[2] / 2 + sorted(c.ratios)[3] / 2  # median of 6
  assert 1.5 < c.ratio < 6  # theirs sleeps 3x longer
  assert (c.load_before, c.load_after) == (0.25, 0.75)
  assert "6 pairs" in c.ratio_text()


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
