"""The offline path: both stages from procedural extension chains, no model.

Stage 1 draws a chain's root generation, stage 2 walks the chain's extension tree (every extension
that may follow a stage is a branch). Each generation's TaskSpec becomes a `compose.Stage`; tasks
are built parents first so a child is derived from its parent's task exactly like an LLM-written
child (compose.child_task).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from tmax_jax.horizon import compose
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.procedural import chains, core, registry


def stage_from_spec(name: str, spec: core.TaskSpec, requirement: str) -> compose.Stage:
  """A procedural generation as a horizon stage (check.py = the family's hidden checker)."""
  return compose.Stage(
    name=name,
    instruction=spec.instruction.strip(),
    requirement=requirement,
    solve=core.bash_script(spec.solve),
    tests={"check.py": core.render_check(spec).encode()},
    seeds=_as_bytes(spec.files),
    setup=spec.setup,
    solution_files=_as_bytes(spec.solution_files),
  )


def _as_bytes(files) -> dict[str, bytes]:
  return {rel: d if isinstance(d, bytes) else d.encode() for rel, d in files.items()}


def node_id(chain: str, seed: int, level: int, path: tuple[str, ...]) -> str:
  return ".".join((f"{chain}-s{seed}-d{level}",) + path[1:])


@dataclasses.dataclass(frozen=True)
class ChainNode:
  """One task of a chain tree; `spec` is its own generation's TaskSpec (wrong solution included)."""

  path: tuple[str, ...]
  lineage: compose.Lineage
  task: fmt.Task
  spec: core.TaskSpec


def _lineage(
  chain: chains.ChainFamily, seed: int, level: int, path: tuple[str, ...]
) -> compose.Lineage:
  return compose.Lineage(
    id=node_id(chain.name, seed, level, path),
    root=node_id(chain.name, seed, level, path[:1]),
    generation=len(path) - 1,
    stage=path[-1],
    requirement=chains.requirement(chain, path[-1]),
    parent=node_id(chain.name, seed, level, path[:-1]) if len(path) > 1 else "",
    origin="procedural",
    goal=chain.goal,
    source={"chain": chain.name, "path": "/".join(path), "seed": seed, "level": level},
  )


def chain_tree(name: str, seed: int, level: int, max_generations: int = 3) -> Iterator[ChainNode]:
  """Every node of chain `name`'s tree up to `max_generations`, parents first."""
  chain = registry.get_chain(name)
  tasks: dict[tuple[str, ...], fmt.Task] = {}
  for path in chains.tree_paths(chain, max_generations):
    spec = chains.lineage_specs(chain, path, seed, level)[-1]
    line = _lineage(chain, seed, level, path)
    stage = stage_from_spec(path[-1], spec, line.requirement)
    meta = {
      "category": chain.root.domain,
      "difficulty": core.DIFFICULTY_NAMES[level],
      "task_complexity": spec.complexity,
      "language": spec.language,
    }
    if len(path) == 1:
      task = compose.root_task(
        stage,
        line,
        meta,
        agent_timeout_sec=spec.agent_timeout_sec,
        verifier_timeout_sec=spec.verifier_timeout_sec,
      )
    else:
      task = compose.child_task(tasks[path[:-1]], stage, line, metadata=meta)
    tasks[path] = task
    yield ChainNode(path, line, task, spec)
