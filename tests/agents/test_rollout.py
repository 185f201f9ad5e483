"""Group scheduling: zero-std filter, active sampling, staleness, error accounting, bounded work."""

import asyncio

import pytest

from tmax_jax.agents import formats
from tmax_jax.agents.episode import EpisodeResult
from tmax_jax.agents.rollout import (GroupScheduler, NoUsableGroups, RolloutConfig,
                                     TasksExhausted, cycle_tasks)


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
    sched = GroupScheduler(iter([0, 0]), run_episode, RolloutConfig(group_size=2, prompts_per_batch=1))
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
