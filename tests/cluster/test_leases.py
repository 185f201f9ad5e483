"""Leasing sandbox hosts (tmax_jax/cluster/leases.py) without Ray: the least-loaded host first,
at most max_starting sandboxes starting per host, a failed host takes none while it cools down,
a lease that finds no host fails after its wait, saying why per host."""

import threading

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[cluster]')")

from tmax_jax.cluster.leases import LeasePolicy, Leases  # noqa: E402
from tmax_jax.sandbox.api import SandboxError  # noqa: E402


class Clock:
  def __init__(self):
    self.now = 100.0

  def __call__(self) -> float:
    return self.now


def test_the_least_loaded_host_takes_the_next_sandbox():
  leases = Leases(3, LeasePolicy(max_starting=8))
  order = [leases.acquire() for _ in range(3)]
  assert order == [0, 1, 2]  # a tie goes to the lowest index
  for host in order:
    leases.started(host)
  leases.release(1, was_open=True)  # host 1 now holds the fewest
  assert leases.acquire() == 1
  assert leases.acquire() == 0  # one each again: the lowest index
  assert [(x.open, x.starting) for x in leases.loads()] == [(1, 1), (0, 1), (1, 0)]


def test_open_and_starting_sandboxes_both_count_as_load():
  leases = Leases(2, LeasePolicy(max_starting=8))
  a = leases.acquire()
  leases.started(a)  # host 0: one open
  assert leases.acquire() == 1  # host 1: one starting
  assert leases.acquire() == 0  # 1 vs 1: the lowest index
  assert [(x.open, x.starting) for x in leases.loads()] == [(1, 1), (0, 1)]


def test_a_host_takes_at_most_max_starting_sandboxes_still_starting():
  leases = Leases(2, LeasePolicy(max_starting=2, wait_s=0))
  got = [leases.acquire() for _ in range(4)]
  assert sorted(got) == [0, 0, 1, 1]
  with pytest.raises(SandboxError, match=r"host 0: 2 starting \(cap 2\); host 1: 2 starting"):
    leases.acquire()
  leases.started(0)  # one of host 0's is up: it may start another
  assert leases.acquire() == 0


def test_a_lease_waits_for_a_start_to_end():
  leases = Leases(1, LeasePolicy(max_starting=1, wait_s=30))
  leases.acquire()
  got = []
  waiter = threading.Thread(target=lambda: got.append(leases.acquire()))
  waiter.start()
  waiter.join(0.3)
  assert waiter.is_alive() and not got  # host 0 is at its cap
  leases.release(0, was_open=False)  # that start failed: the slot is free
  waiter.join(10)
  assert got == [0]


def test_a_failed_host_cools_down_then_takes_sandboxes_again():
  clock = Clock()
  leases = Leases(2, LeasePolicy(max_starting=8, cooldown_s=300, wait_s=0), clock=clock)
  assert LeasePolicy().cooldown_s == 300  # the paper's
  leases.fail(0)
  assert leases.cooling(0) and not leases.cooling(1)
  assert [leases.acquire() for _ in range(3)] == [1, 1, 1]  # host 0 is out, however idle
  clock.now += 299
  assert leases.acquire() == 1
  clock.now += 1
  assert not leases.cooling(0)
  assert leases.acquire() == 0  # back, and the least loaded


def test_every_host_cooling_down_fails_the_lease_saying_so():
  clock = Clock()
  leases = Leases(2, LeasePolicy(cooldown_s=300, wait_s=0), clock=clock)
  leases.fail(0)
  clock.now += 100
  leases.fail(1)
  with pytest.raises(
    SandboxError, match=r"host 0: cooling down 200 s more; host 1: cooling down 300"
  ):
    leases.acquire()


def test_bad_policies_and_no_hosts_are_refused():
  with pytest.raises(ValueError, match="max_starting=0"):
    LeasePolicy(max_starting=0)
  with pytest.raises(ValueError, match="cooldown_s=-1"):
    LeasePolicy(cooldown_s=-1)
  with pytest.raises(SandboxError, match="no sandbox host"):
    Leases(0)
