"""Extension chains: procedural task families whose children build on the parent's results.

A chain family has a root generation (an ordinary procedural `Family`, registered with the others)
and extensions. An extension names the stages it can follow and builds its TaskSpec from the specs
of its whole lineage (root .. parent), so its new requirement depends on what the parent produced:
the photos imported, the backups written, the functions implemented. Each generation's spec holds
only that generation's delta (new seeds, build-time setup run after the parent's oracle, its own
oracle from the parent's final state, its own check and a plausible wrong solution); the horizon
layer (horizon/compose.py) stacks them into a task. A parent's checks must stay true after
every descendant's oracle (the goal still holds), so extensions only change the environment in
ways the ancestors' checks allow (documented per family).

Determinism: generation k of lineage (root, e1, .., ek) uses `family_rng("<root>/<e1>/../<ek>",
seed, level)`, so the root generation is the same task as its family built on its own.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Sequence

from tmax_jax.tasks.procedural import core

# A line of this text in an oracle splits it into separate tool calls when a scripted teacher
# drives it through the harness (explore / build / verify); bash reads it as a comment.
STEP_MARK = "# step"

ExtensionBuild = Callable[[random.Random, int, Sequence[core.TaskSpec]], core.TaskSpec]


@dataclasses.dataclass(frozen=True)
class Extension:
  """A child generator: `build(rng, level, lineage_specs)` where lineage_specs = root .. parent."""

  name: str
  after: tuple[str, ...]  # the stage names this extension may follow
  requirement: str
  build: ExtensionBuild


@dataclasses.dataclass(frozen=True)
class ChainFamily:
  name: str
  goal: str
  root: core.Family
  root_requirement: str
  extensions: tuple[Extension, ...]

  def children_of(self, stage: str) -> tuple[Extension, ...]:
    return tuple(e for e in self.extensions if stage in e.after)

  def extension(self, name: str) -> Extension:
    for e in self.extensions:
      if e.name == name:
        return e
    raise KeyError(
      f"chain {self.name}: unknown extension {name!r}; known: {[e.name for e in self.extensions]}"
    )


def patched(text: str, *edits: tuple[str, str]) -> str:
  """`text` with each (old, new) applied; `old` must occur exactly once (an oracle variant, a
  wrong solution or a tool's next version is an edit of a known text, never a silent no-op)."""
  for old, new in edits:
    if text.count(old) != 1:
      raise AssertionError(
        f"edit anchor found {text.count(old)} times, expected once: {old[:60]!r}"
      )
    text = text.replace(old, new)
  return text


def stage_rng(path: Sequence[str], seed: int, level: int) -> random.Random:
  return core.family_rng("/".join(path), seed, level)


def lineage_specs(
  chain: ChainFamily, path: Sequence[str], seed: int, level: int
) -> list[core.TaskSpec]:
  """The specs of every generation of `path` (root stage name first), built in order."""
  if not path or path[0] != chain.root.name:
    raise ValueError(
      f"chain {chain.name}: a path starts with the root {chain.root.name!r}, got {list(path)}"
    )
  specs = [chain.root.build(stage_rng(path[:1], seed, level), level)]
  for i in range(1, len(path)):
    ext = chain.extension(path[i])
    if path[i - 1] not in ext.after:
      raise ValueError(
        f"chain {chain.name}: {path[i]} cannot follow {path[i - 1]} (it follows {list(ext.after)})"
      )
    specs.append(ext.build(stage_rng(path[: i + 1], seed, level), level, specs))
  return specs


def tree_paths(chain: ChainFamily, max_generations: int) -> Iterator[tuple[str, ...]]:
  """Every path of the extension tree up to `max_generations` stages, parents before children."""
  frontier = [(chain.root.name,)]
  while frontier:
    path = frontier.pop(0)
    yield path
    if len(path) < max_generations:
      frontier += [path + (e.name,) for e in chain.children_of(path[-1])]


def requirement(chain: ChainFamily, stage: str) -> str:
  return chain.root_requirement if stage == chain.root.name else chain.extension(stage).requirement
