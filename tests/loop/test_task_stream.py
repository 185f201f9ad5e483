"""The data position of the RL loop: consumed prompt indices survive out-of-order completion, a
restart and a change of process count with no prompt lost or repeated."""

import itertools

from tmax_jax.agents.rollout import cycle_tasks
from tmax_jax.loop import task_stream
from tmax_jax.loop.task_stream import Position

TASKS = [f"t{i}" for i in range(5)]


def test_position_merges_out_of_order_consumption():
  p = Position().merged([0, 1, 3, 6])
  assert (p.next, p.done, p.count) == (2, (3, 6), 4)
  p = p.merged([2, 4])
  assert (p.next, p.done) == (5, (6,))
  assert Position.from_json(p.to_json()) == p
  assert Position.from_json({"groups_consumed": 7}) == Position(7)  # older checkpoints


def test_stream_shares_and_resume_cover_every_index_once():
  reference = list(itertools.islice(cycle_tasks(TASKS, 3), 40))
  # two processes draw alternate indices; each consumed some, out of order, when the run stopped
  shares = [
    list(itertools.islice(task_stream.stream(TASKS, 3, Position(), p, 2), 8)) for p in range(2)
  ]
  assert [i for i, _ in shares[0]] == list(range(0, 16, 2))
  assert all(task == reference[i] for share in shares for i, task in share)
  consumed = [0, 4, 2, 10, 1, 5, 7]  # 6, 8, 3 were in flight: not consumed
  position = Position().merged(consumed)
  # resumed on three processes: together they draw exactly the indices not consumed
  resumed = [
    list(itertools.islice(task_stream.stream(TASKS, 3, position, p, 3), 6)) for p in range(3)
  ]
  drawn = sorted(i for share in resumed for i, _ in share)
  assert not set(drawn) & set(consumed)
  assert set(range(20)) - set(consumed) <= set(drawn)
  assert len(drawn) == len(set(drawn))
  assert all(task == reference[i] for share in resumed for i, task in share)
