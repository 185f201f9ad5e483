"""The soak's fault plan (bench/chaos/soak.fault_plan): the first 30-minute soak of 2026-12-05
injected each process fault exactly once, because the once-each slots spread over the whole
window and left no time for the Poisson arrivals."""

import collections
import random

import pytest

from bench.chaos import soak


@pytest.mark.parametrize("seed", range(5))
def test_a_long_window_repeats_every_kind_after_each_had_its_turn(seed):
  plan = soak.fault_plan(random.Random(seed), 30 * 60.0, True, 60.0)
  times = [t for t, _ in plan]
  assert times == sorted(times) and times[-1] <= 30 * 60.0 - 60.0
  first = plan[: len(soak.PROCESS_KINDS)]
  assert {k for _, k in first} == set(soak.PROCESS_KINDS)  # each kind once, first
  assert first[-1][0] <= 10.0 + len(soak.PROCESS_KINDS) * 60.0
  # ~24 more arrivals in the ~24 minutes left (mean 60 s); far more than none
  assert len(plan) - len(first) >= 12


def test_a_short_window_still_has_every_kind_once_and_the_trainer_kill_early():
  for seed in range(20):
    plan = soak.fault_plan(random.Random(seed), 120.0, True, 60.0)
    counts = collections.Counter(k for _, k in plan)
    assert set(counts) == set(soak.PROCESS_KINDS) and max(counts.values()) == 1
    kill = next(t for t, k in plan if k == "trainer_kill")
    slot = (60.0 - 10.0) / len(soak.PROCESS_KINDS)  # the window's last minute has no faults
    assert kill < 10.0 + (len(soak.PROCESS_KINDS) // 2 + 1) * slot  # a slot of the first half


def test_no_faults_means_an_empty_plan():
  assert soak.fault_plan(random.Random(0), 30 * 60.0, False, 60.0) == []
