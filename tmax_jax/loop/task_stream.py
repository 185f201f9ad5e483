"""The RL run's task stream and its data position: which prompts have been consumed, exactly.

Global stream: element i of `cycle_tasks(tasks, seed)` (seeded shuffled epochs) is prompt i; its
index is also its group index (per-request sampling seeds derive from it). Process p of P draws the
indices i = p (mod P). Groups finish out of order, so the position is not a count: it is the set of
consumed indices, kept as a low watermark `next` (every index below it is consumed) plus the
consumed indices above it (`done`). A resumed run, with any number of processes, draws the indices
>= next that are not in `done`: nothing consumed is repeated and nothing in flight at the crash is
lost. A group counts as consumed when the scheduler took it into a batch decision (used, or dropped
by a filter); groups still in flight or waiting are not.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence

from tmax_jax.agents import cycle_tasks


@dataclasses.dataclass(frozen=True)
class Position:
  """Consumed prompt indices: all of [0, next) plus `done` (sorted, each >= next)."""

  next: int = 0
  done: tuple[int, ...] = ()

  def to_json(self) -> dict:
    return {"next": self.next, "done": list(self.done)}

  @classmethod
  def from_json(cls, data: dict) -> Position:
    """Also reads the older {"groups_consumed": n} checkpoints (the first n indices)."""
    if "next" not in data:
      return cls(int(data.get("groups_consumed", 0)))
    return cls(int(data["next"]), tuple(sorted(int(i) for i in data["done"])))

  def merged(self, consumed: Iterable[int]) -> Position:
    """This position plus newly consumed indices (the watermark moves over contiguous ones)."""
    done = set(self.done) | {int(i) for i in consumed if i >= self.next}
    nxt = self.next
    while nxt in done:
      done.discard(nxt)
      nxt += 1
    return Position(nxt, tuple(sorted(done)))

  @property
  def count(self) -> int:
    return self.next + len(self.done)


def indices(position: Position, process: int = 0, num_processes: int = 1) -> Iterator[int]:
  """The not yet consumed indices of `process`'s share, in increasing order."""
  done = set(position.done)
  first = position.next + (process - position.next) % num_processes
  return (i for i in itertools.count(first, num_processes) if i not in done)


def stream(
  tasks: Sequence, seed: int, position: Position, process: int = 0, num_processes: int = 1
) -> Iterator[tuple[int, object]]:
  """(index, task) pairs of `process`'s share of the run's task stream, resumed at `position`."""
  source = cycle_tasks(tasks, seed)
  current = -1
  task = None
  for i in indices(position, process, num_processes):
    while current < i:
      task, current = next(source), current + 1
    yield i, task
