"""Group scheduling: zero-std filter, active sampling, staleness, error accounting, bounded work."""

import asyncio

import pytest

from tmax_jax import formats
from tmax_jax.agents.episode import EpisodeResult
from tmax_jax.agents.rollout import (
  GroupFailed,
  GroupScheduler,
  NoUsableGroups,
  RolloutConfig,
  TasksExhausted,
  cycle_tasks,
)


def _episode(reward: float, version: int) -> EpisodeResult:
  traj = formats.TokenTrajectory(eos_id=0)
  traj.add_prompt([1, 2])
  traj.add_generated([3, 4], [-0.1, -0.2], version)
  return EpisodeResult(traj, status="submitted", reward=reward)


def _run(coro):
  return asyncio.run(coro)


def test_zero_std_groups_are_replaced_by_active_sampling():
  # task t: sample i gets reward 1 iff i < t  -> task 0 (all 0) and task 4 (all 1) are zero-std
  async def run_episode(task, group, sample):
    await asyncio.sleep(0)
    return _episode(float(sample < task), version=0)

  async def main():
    cfg = RolloutConfig(group_size=4, prompts_per_batch=3, async_steps=1, max_groups_ahead=2)
    sched = GroupScheduler(iter([0, 4, 1, 0, 2, 3, 4]), run_episode, cfg)
    batch = await sched.next_batch(trainer_version=0)
    await sched.close()
    return batch, sched.stats

  batch, stats = _run(main())
  assert sorted(g.task for g in batch) == [1, 2, 3]
  assert all(not g.zero_std for g in batch)
  assert stats["groups_filtered_zero_std"] == 3
  assert stats["episodes_submitted"] == 4 * 6


def test_without_active_sampling_filtered_groups_leave_holes():
  async def run_episode(task, group, sample):
    return _episode(float(sample < task), version=0)

  async def main():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=2, active_sampling=False)
    sched = GroupScheduler(iter([0, 1, 1]), run_episode, cfg)
    batch = await sched.next_batch(0)
    await sched.close()
    return batch

  assert [g.task for g in _run(main())] == [1]


def test_stale_groups_are_dropped_and_counted():
  async def run_episode(task, group, sample):
    return _episode(float(sample % 2), version=task)  # task value = policy version that made it

  async def main():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=2, async_steps=2)
    sched = GroupScheduler(iter([1, 5, 3, 6]), run_episode, cfg)
    batch = await sched.next_batch(trainer_version=6)  # versions < 4 are stale
    await sched.close()
    return batch, sched.stats

  batch, stats = _run(main())
  assert [g.task for g in batch] == [5, 6]
  assert stats["groups_dropped_stale"] == 2


def test_failed_episodes_drop_the_group_loudly():
  async def run_episode(task, group, sample):
    if task == "bad" and sample == 1:
      raise ConnectionError("server gone")
    return _episode(float(sample), version=0)

  async def main():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=1)
    sched = GroupScheduler(iter(["bad", "good"]), run_episode, cfg)
    batch = await sched.next_batch(0)
    await sched.close()
    return batch, sched.stats

  batch, stats = _run(main())
  assert [g.task for g in batch] == ["good"]
  assert stats["groups_dropped_error"] == 1


def test_exhausted_tasks_raise_instead_of_hanging():
  async def run_episode(task, group, sample):
    return _episode(0.0, 0)

  async def main():
    sched = GroupScheduler(
      iter([0, 0]), run_episode, RolloutConfig(group_size=2, prompts_per_batch=1)
    )
    with pytest.raises(TasksExhausted):
      await asyncio.wait_for(sched.next_batch(0), timeout=10)
    await sched.close()

  _run(main())


def test_work_ahead_is_bounded():
  started = []

  async def run_episode(task, group, sample):
    started.append(task)
    return _episode(float(sample), version=0)

  async def main():
    cfg = RolloutConfig(group_size=1 + 1, prompts_per_batch=2, max_groups_ahead=3)
    sched = GroupScheduler(cycle_tasks(list(range(10)), seed=0), run_episode, cfg)
    await sched.next_batch(0)
    for _ in range(20):
      await asyncio.sleep(0)
    await sched.close()

  _run(main())
  assert len(started) <= 2 * (2 + 3 + 2)  # batch + ahead (+ the slots freed by this batch)


def test_starved_active_sampling_raises_no_usable_groups():
  async def run_episode(task, group, sample):
    return _episode(0.0, version=0)  # every group zero-std

  async def main():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=2, max_attempts_per_batch=5)
    sched = GroupScheduler(cycle_tasks(list(range(4)), seed=0), run_episode, cfg)
    with pytest.raises(NoUsableGroups, match="pulled 5 groups but only 0 were usable"):
      await asyncio.wait_for(sched.next_batch(0), timeout=10)
    await sched.close()
    return sched.stats

  assert _run(main())["groups_filtered_zero_std"] == 5


def test_indexed_groups_keep_their_index_and_are_counted_consumed():
  async def run_episode(task, group, sample):
    return _episode(float(sample < task), version=0)

  async def main():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=2, async_steps=1, max_groups_ahead=2)
    sched = GroupScheduler(
      iter([(10, 1), (12, 0), (14, 1), (16, 1)]), run_episode, cfg, indexed=True
    )
    batch = await sched.next_batch(0)
    await sched.close()
    return batch, sched.consumed

  batch, consumed = _run(main())
  assert sorted(g.index for g in batch) == [10, 14]
  assert sorted(consumed) == [10, 12, 14]  # 12 was dropped (zero std), still consumed


def test_ordered_batches_follow_draw_order_and_put_back_the_rest():
  """Completion order is reversed (later groups finish first); the batch is still the first
  usable groups in draw order, and the groups drawn beyond it are generated again next batch."""
  calls, served = [], {"version": 0}

  async def run_episode(task, group, sample):
    calls.append(group)
    await asyncio.sleep(0.01 * (10 - group))
    return _episode(float(sample < task), version=served["version"])

  async def main():
    cfg = RolloutConfig(
      group_size=2, prompts_per_batch=2, async_steps=0, max_groups_ahead=3, on_failure="rerun"
    )
    sched = GroupScheduler(
      enumerate([1, 0, 1, 1, 1, 1]), run_episode, cfg, indexed=True, ordered=True
    )
    first = await sched.next_batch(0)
    calls_first = sorted(set(calls))
    calls.clear()
    served["version"] = 1  # the trainer stepped and pushed its weights between the batches
    second = await sched.next_batch(1)
    await sched.close()
    return first, calls_first, sorted(set(calls)), second, sched.consumed

  first, calls_first, calls_second, second, consumed = _run(main())
  assert [g.index for g in first] == [0, 2] and [g.index for g in second] == [3, 4]
  assert calls_first == [0, 1, 2, 3, 4]  # 3 and 4 ran ahead, then were put back
  assert calls_second[:2] == [3, 4]
  assert consumed == [0, 1, 2, 3, 4]


def _flaky(failures: dict):
  """An episode runner whose (group, sample) episodes raise the first `failures[(g, s)]` times."""
  calls = []

  async def run_episode(task, group, sample):
    calls.append((group, sample))
    await asyncio.sleep(0.001 * (5 - group))  # later groups finish first
    if failures.get((group, sample), 0) > 0:
      failures[(group, sample)] -= 1
      raise ConnectionError(f"episode {group}/{sample}: sandbox backend went away")
    return _episode(float(sample < task), version=0)

  return run_episode, calls


def test_ordered_batches_rerun_a_failed_group_in_its_place():
  """A group whose episode failed is run again (same index, so the same seeds) and keeps its place:
  the batch is the one an unfailing run gets, where the unordered scheduler would replace it."""
  run_episode, calls = _flaky({(1, 0): 2})

  async def main(ordered):
    cfg = RolloutConfig(
      group_size=2, prompts_per_batch=3, async_steps=0, max_groups_ahead=2, on_failure="rerun"
    )
    sched = GroupScheduler(
      enumerate([1, 1, 1, 1, 1]), run_episode, cfg, indexed=True, ordered=ordered
    )
    batch = await sched.next_batch(0)
    await sched.close()
    return [g.index for g in batch], sched.stats, sched.consumed

  batch, stats, consumed = _run(main(ordered=True))
  assert batch == [0, 1, 2] and consumed == [0, 1, 2]
  assert stats["groups_retried_error"] == 2 and stats["groups_dropped_error"] == 0
  assert calls.count((1, 0)) == 3  # failed twice, then ran through
  run_episode, _ = _flaky({(1, 0): 1})

  async def unordered():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=3, async_steps=0, max_groups_ahead=0)
    sched = GroupScheduler(enumerate([1, 1, 1, 1, 1]), run_episode, cfg, indexed=True)
    batch = await sched.next_batch(0)
    await sched.close()
    return sorted(g.index for g in batch), sched.stats

  batch, stats = _run(unordered())
  assert len(batch) == 3 and 1 not in batch and stats["groups_dropped_error"] == 1


def test_ordered_batches_stop_when_a_group_keeps_failing():
  run_episode, calls = _flaky({(0, 1): 10})

  async def main():
    cfg = RolloutConfig(
      group_size=2, prompts_per_batch=2, async_steps=0, group_retries=1, on_failure="rerun"
    )
    sched = GroupScheduler(enumerate([1, 1, 1]), run_episode, cfg, indexed=True, ordered=True)
    try:
      await sched.next_batch(0)
    finally:
      await sched.close()

  with pytest.raises(GroupFailed, match=r"group 0 failed 2 times \(rollout.group_retries=1\)"):
    _run(main())
  assert calls.count((0, 1)) == 2


def test_ordered_rerun_finishes_after_the_task_stream_ended():
  """The last task's group fails once: its rerun completes the batch although the producer has
  already run out of tasks."""
  run_episode, _ = _flaky({(1, 1): 1})

  async def main():
    cfg = RolloutConfig(group_size=2, prompts_per_batch=2, async_steps=0, on_failure="rerun")
    sched = GroupScheduler(enumerate([1, 1]), run_episode, cfg, indexed=True, ordered=True)
    batch = await sched.next_batch(0)
    await sched.close()
    return [g.index for g in batch]

  assert _run(main()) == [0, 1]


class _Lost(RuntimeError):
  """A failure that names its kind, as the runner's infrastructure failures do."""

  kind = "sandbox_lost"


def _failing(failures: dict, error=_Lost):
  """Episodes (group, sample) raise `error` the first failures[(g, s)] times; reward = sample."""
  calls = []

  async def run_episode(task, group, sample):
    calls.append((group, sample))
    await asyncio.sleep(0)
    if failures.get((group, sample), 0) > 0:
      failures[(group, sample)] -= 1
      raise error(f"episode {group}/{sample}: the sandbox died")
    return _episode(float(sample), version=0)

  return run_episode, calls


async def _one_batch(cfg, run_episode, tasks, *, ordered=False):
  sched = GroupScheduler(enumerate(tasks), run_episode, cfg, indexed=True, ordered=ordered)
  try:
    batch = await sched.next_batch(0)
  finally:
    await sched.close()
  return batch, sched


def test_infrastructure_failures_are_never_scored_under_any_policy():
  """drop: the group goes; mask: its scored episodes stay, the failed one is gone; rerun: the
  group is generated again and trains once whole. Each counts the dropped episode by its kind and
  records it; no failed episode ever carries a reward into a batch."""
  base = dict(
    group_size=3, prompts_per_batch=1, async_steps=0, zero_std_filter=False, max_groups_ahead=0
  )
  outcomes = {}
  for policy in ("drop", "mask", "rerun"):
    run_episode, calls = _failing({(0, 1): 1})
    cfg = RolloutConfig(**base, on_failure=policy)
    batch, sched = _run(_one_batch(cfg, run_episode, ["t0", "t1"]))
    outcomes[policy] = (batch, sched, calls)
    assert sched.stats["episodes_dropped_sandbox_lost"] == 1
    failed = [r for r in sched.records if r["failures"]]
    assert [f["kind"] for f in failed[0]["failures"]] == ["sandbox_lost"]
    rec = failed[0]  # no episode of the attempt a failure belongs to carries a reward for it
    lost = [f["sample"] for f in rec["failures"] if f["attempt"] == rec["attempt"]]
    assert not set(lost) & {e["sample"] for e in rec["episodes"]}

  batch, sched, _ = outcomes["drop"]
  assert [g.index for g in batch] == [1] and sched.stats["groups_dropped_sandbox_lost"] == 1
  assert sched.records[0]["fate"] == "dropped_sandbox_lost" and sched.consumed[0] == 0
  batch, sched, _ = outcomes["mask"]
  assert [g.index for g in batch] == [0] and len(batch[0].episodes) == 2
  assert sorted(batch[0].rewards.tolist()) == [0.0, 2.0]  # samples 0 and 2; 1 failed
  assert sched.stats["groups_masked_sandbox_lost"] == 1 and sched.records[0]["fate"] == "masked"
  batch, sched, calls = outcomes["rerun"]
  assert [g.index for g in batch] == [0] and len(batch[0].episodes) == 3
  assert calls.count((0, 1)) == 2 and sched.stats["groups_retried_sandbox_lost"] == 1
  assert sched.records[0]["fate"] == "used" and sched.consumed == [0]


def test_a_group_that_keeps_failing_is_dropped_after_its_reruns():
  run_episode, calls = _failing({(0, 0): 10})
  cfg = RolloutConfig(
    group_size=2, prompts_per_batch=1, group_retries=2, on_failure="rerun", max_groups_ahead=0
  )
  batch, sched = _run(_one_batch(cfg, run_episode, ["a", "b"]))
  assert [g.index for g in batch] == [1] and calls.count((0, 0)) == 3
  assert sched.stats["groups_retried_sandbox_lost"] == 2
  assert sched.stats["groups_dropped_sandbox_lost"] == 1
  assert len(sched.records[0]["failures"]) == 3  # every attempt's failure is on the record


def test_mask_needs_two_scored_episodes_and_unretryable_failures_are_not_rerun():
  run_episode, _ = _failing({(0, 0): 1})  # group 0 keeps one of two episodes: no baseline
  cfg = RolloutConfig(group_size=2, prompts_per_batch=1, on_failure="mask", zero_std_filter=False)
  batch, sched = _run(_one_batch(cfg, run_episode, ["a", "b"]))
  assert [g.index for g in batch] == [1] and sched.stats["groups_dropped_sandbox_lost"] == 1

  class TooLong(ValueError):
    kind, retryable = "prompt_too_long", False

  run_episode, calls = _failing({(0, 0): 5}, TooLong)
  cfg = RolloutConfig(group_size=2, prompts_per_batch=1, on_failure="rerun")
  batch, sched = _run(_one_batch(cfg, run_episode, ["a", "b"]))
  assert [g.index for g in batch] == [1] and calls.count((0, 0)) == 1
  assert sched.stats["groups_dropped_prompt_too_long"] == 1


def test_ordered_batches_refuse_drop_and_mask():
  with pytest.raises(ValueError, match="rollout.on_failure must be 'rerun'"):
    GroupScheduler(iter([]), None, RolloutConfig(async_steps=0), ordered=True)
  with pytest.raises(ValueError, match="on_failure='skip'"):
    RolloutConfig(on_failure="skip")
