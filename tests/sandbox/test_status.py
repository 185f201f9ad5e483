"""status.classify: every rule from evidence to a command status (pure, no sandbox)."""

from __future__ import annotations

import pytest

from tmax_jax.sandbox import status
from tmax_jax.sandbox.api import Limits

Z = {"oom_kill": 0, "pids_max_hits": 0}


def ev(kind="done", rc=0, why="done", after=None, tail=b""):
  return status.Evidence(kind, rc, why, Z, after or Z, b"", tail)


@pytest.mark.parametrize(
  "evidence,expected",
  [
    (ev(), "ok"),
    (ev(rc=1, tail=b"plain failure"), "ok"),
    (ev(kind="eof", rc=None), "crashed"),
    (ev(kind="deadline", rc=None), "timeout"),
    (ev(rc=137, after={"oom_kill": 1, "pids_max_hits": 0}), "oom"),
    (ev(rc=1, tail=b"MemoryError"), "oom"),
    (ev(rc=0, tail=b"MemoryError printed by a passing test"), "ok"),
    (ev(rc=None, why="cancel"), "output_limit"),
    (ev(rc=1, after={"oom_kill": 0, "pids_max_hits": 3}), "limit_reset"),
    (ev(rc=1, tail=b"bash: fork: retry: Resource temporarily unavailable"), "limit_reset"),
    (ev(rc=None, why="timeout"), "timeout"),
    (ev(rc=128 + 25), "limit"),
    (ev(rc=1, tail=b"write error: No space left on device"), "limit"),
  ],
)
def test_classify(evidence, expected):
  state, note = status.classify(evidence, Limits(memory_mb=123))
  assert state == expected
  assert (note == "") == (expected == "ok")
  if expected == "oom":
    assert "123 MB" in note


def test_oom_wins_over_a_timeout_and_killed_rules():
  both = ev(rc=None, why="timeout", after={"oom_kill": 2, "pids_max_hits": 0})
  assert status.classify(both, Limits())[0] == "oom"
  assert status.was_killed("done", "done", "oom", 137) and not status.was_killed(
    "done", "done", "oom", 1
  )
  assert status.was_killed("eof", "done", "crashed", None)
