"""The soak's fault injector (bench/chaos/faults.py) against sandboxes that end while it looks at
them: the 30-minute bubblewrap soak of 2026-12-05 died after 10 minutes on a cgroup listed by
live_sandboxes and removed by its sandbox before cgroup.procs was read."""

import os
import pathlib

from bench.chaos import faults


def _cgroups(tmp_path, monkeypatch, procs: dict[str, str | None]) -> pathlib.Path:
  """A pids parent with one directory per name; None: the cgroup went away (no cgroup.procs, as
  a removed cgroup reads)."""
  for name, text in procs.items():
    (tmp_path / name).mkdir()
    if text is not None:
      (tmp_path / name / "cgroup.procs").write_text(text)
  monkeypatch.setattr(faults, "_pids_parent", lambda: tmp_path)
  return tmp_path


def test_live_sandboxes_skips_a_cgroup_gone_since_the_listing(tmp_path, monkeypatch):
  _cgroups(tmp_path, monkeypatch, {"p1-a-1": f"{os.getpid()}\n", "p1-a-2": None, "p1-a-3": ""})
  assert faults.live_sandboxes("p1-a", "bubblewrap") == ["p1-a-1"]


def test_kill_and_lifetime_of_a_gone_sandbox(tmp_path, monkeypatch):
  _cgroups(tmp_path, monkeypatch, {"p1-a-2": None})
  assert faults.kill_sandbox("p1-a-2", "bubblewrap") == 0
  assert faults.lifetime_of("p1-a-2", "bubblewrap") == faults.GONE
  assert faults.lifetime_of("p1-a-9", "bubblewrap") == faults.GONE  # never existed
