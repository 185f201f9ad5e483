"""TerminalHorizon task layout: a task is a chain of generations (stages) under one goal.

Generation n's task directory (TB2/Harbor):

  environment/Dockerfile                 FROM tmax-base, COPY stages/, one RUN per build step
  environment/stages/g<i>/seeds/...      files generation i adds to /workspace (i = 0..n)
  environment/stages/g<i>/setup.sh       build-time changes of generation i (new data, user edits)
  environment/stages/g<i>/solution/...   the oracle of generation i (i < n only)
  tests/g<i>/check.py | test_*.py        generation i's checks; the child KEEPS every ancestor's
  tests/test.sh                          runs all generations' checks; reward.json {reward, g0..gn}
  solution/solve.sh                      generation n's oracle, run from the parent's final state

The child starts from the parent's final state: its Dockerfile replays, in order, every ancestor's
seeds + setup and then that ancestor's oracle (solve.sh) at build time, then its own seeds and
setup. So the child environment = the parent environment after the parent's oracle, rebuilt from
source (nothing is snapshotted, so a child stays a plain reproducible task). Each stage's files are
COPYed on their own, right before the RUN that uses them, so a child's image shares its parent's
layers (the image builder caches layers by content) and siblings share their ancestors' oracle
layers; they go to /tmp/horizon/g<i>/ and RUN lines move them, which also works with the legacy
fixed-image translation that places every COPY first. The last RUN removes /tmp/horizon so the
agent never sees an ancestor's oracle. An oracle must not need `/solution/...` paths at build time.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from tmax_jax.tasks import format as fmt

WORKDIR = "/workspace"
BASE_IMAGE = "tmax-base:bookworm"
STAGING = "/tmp/horizon"
_GEN_DIR = re.compile(r"^g(\d+)/")
CHECK_TIMEOUT_S = 300

TEST_SH = """#!/bin/bash
# TerminalHorizon verifier: the checks of EVERY generation of the lineage must pass (the parent's
# goal still holds after the child's work). Writes reward.json {"reward": 0|1, "g0": 0|1, ...}.
mkdir -p /logs/verifier
cd /workspace || exit 1
all=1
parts=""
for g in $(ls -d /tests/g*/ | sort -V); do
  name=$(basename "$g"); ok=1; ran=0
  if [ -f "$g/check.py" ]; then
    ran=1; timeout {timeout} python3 -I -B "$g/check.py" || ok=0
  fi
  if compgen -G "$g/test_*.py" > /dev/null; then
    ran=1
    timeout {timeout} python3 -I -B -m pytest -q -p no:cacheprovider --rootdir "$g" "$g" || ok=0
  fi
  [ "$ran" = 1 ] || { echo "FAIL: $g has neither check.py nor test_*.py"; ok=0; }
  echo "generation $name: $ok"
  [ "$ok" = 1 ] || all=0
  parts="$parts, \\"$name\\": $ok"
done
echo "{\\"reward\\": $all$parts}" > /logs/verifier/reward.json
"""


@dataclasses.dataclass(frozen=True)
class Stage:
  """One generation's own work, on top of its parent's final state.

  instruction: the full text the agent reads for this generation. requirement: one line naming what
  this generation adds (lineage listings, prompts). seeds: files added to /workspace (relative
  paths) before `setup`, a bash body run at build time (new data, the user's edits). solve: this
  generation's oracle (a complete bash script). tests: this generation's checks (`check.py`, exit 0
  = pass, and/or pytest `test_*.py`), run from /workspace.
  """

  name: str
  instruction: str
  requirement: str
  solve: str
  tests: Mapping[str, bytes]
  seeds: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
  setup: str = ""
  solution_files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if not self.tests or not any(
      k == "check.py" or re.fullmatch(r"test_[\w-]+\.py", k) for k in self.tests
    ):
      raise ValueError(
        f"stage {self.name}: tests must contain check.py or test_*.py, got {sorted(self.tests)}"
      )
    for group in ("tests", "seeds", "solution_files"):
      for rel in getattr(self, group):
        if rel.startswith("/") or ".." in rel.split("/") or not rel:
          raise ValueError(
            f"stage {self.name}: {group} path {rel!r} must stay inside its directory"
          )


@dataclasses.dataclass(frozen=True)
class Lineage:
  """Where a task sits in its tree; stored as task.toml [metadata] horizon = {...}."""

  id: str
  root: str
  generation: int
  stage: str
  requirement: str
  parent: str = ""  # "" for a root (stage 1 task)
  origin: str = "procedural"  # procedural | llm
  goal: str = ""
  source: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict:
    return {
      k: (dict(v) if isinstance(v, Mapping) else v) for k, v in dataclasses.asdict(self).items()
    }

  @classmethod
  def from_json(cls, data: Mapping[str, Any], where: str = "metadata.horizon") -> Lineage:
    names = {f.name for f in dataclasses.fields(cls)}
    missing = sorted({"id", "root", "generation", "stage", "requirement"} - set(data))
    unknown = sorted(set(data) - names)
    if missing or unknown:
      raise ValueError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    return cls(**dict(data))


def lineage_of(task: fmt.Task) -> Lineage:
  """The task's lineage record (raises ValueError when it is not a horizon task)."""
  data = task.config.metadata.get("horizon")
  if not isinstance(data, Mapping):
    raise ValueError(
      f"{task.path or task.name}: task.toml has no [metadata] horizon table; "
      "not a TerminalHorizon task"
    )
  return Lineage.from_json(data, f"{task.path or task.name}/task.toml: metadata.horizon")


def _script(body: str) -> bytes:
  return ("#!/bin/bash\nset -e\ncd " + WORKDIR + "\n" + body.strip("\n") + "\n").encode()


def dockerfile(environment: Mapping[str, bytes], generations: int) -> str:
  """Replays generations 0..n-1 (seeds, setup, oracle) and generation n (seeds, setup)."""
  lines = [f"FROM {BASE_IMAGE}", f"WORKDIR {WORKDIR}"]
  for i in range(generations):
    src, g = f"stages/g{i}", f"{STAGING}/g{i}"
    lines.append(f"COPY {src}/setup.sh {g}/setup.sh")
    copy = ""
    if any(rel.startswith(f"{src}/seeds/") for rel in environment):
      lines.append(f"COPY {src}/seeds/ {g}/seeds/")
      copy = f"cp -a {g}/seeds/. {WORKDIR}/ && "
    lines.append(f"RUN {copy}bash {g}/setup.sh")
    if i < generations - 1:  # the parent's oracle: the child starts from its final state
      lines += [f"COPY {src}/solution/ {g}/solution/", f"RUN bash {g}/solution/solve.sh"]
  lines.append(f"RUN rm -rf {STAGING}")
  return "\n".join(lines) + "\n"


def _stage_env(i: int, stage: Stage) -> dict[str, bytes]:
  out = {f"stages/g{i}/setup.sh": _script(stage.setup)}
  out.update({f"stages/g{i}/seeds/{rel}": bytes(d) for rel, d in stage.seeds.items()})
  return out


def _config(
  lineage: Lineage,
  instruction: str,
  metadata: Mapping[str, Any],
  agent_timeout_sec: float,
  verifier_timeout_sec: float,
) -> fmt.TaskConfig:
  return fmt.TaskConfig(
    task=fmt.TaskInfo(
      name=lineage.id, description=lineage.requirement[:200], authors=("tmax_jax TerminalHorizon",)
    ),
    metadata={**metadata, "horizon": lineage.to_json()},
    verifier=fmt.VerifierConfig(timeout_sec=verifier_timeout_sec),
    agent=fmt.AgentConfig(timeout_sec=agent_timeout_sec),
    environment=fmt.EnvironmentConfig(
      build_timeout_sec=600.0,
      docker_image=BASE_IMAGE,
      memory_mb=2048,
      storage_mb=4096,
      allow_internet=False,
      workdir=WORKDIR,
    ),
  )


def _tests(stage_tests: Mapping[str, bytes], i: int, inherited: Mapping[str, bytes]) -> dict:
  out = {rel: bytes(d) for rel, d in inherited.items() if rel != "test.sh"}
  out.update({f"g{i}/{rel}": bytes(d) for rel, d in stage_tests.items()})
  out["test.sh"] = TEST_SH.replace("{timeout}", str(CHECK_TIMEOUT_S)).encode()
  return out


def root_task(
  stage: Stage,
  lineage: Lineage,
  metadata: Mapping[str, Any] | None = None,
  *,
  agent_timeout_sec: float = 1800.0,
  verifier_timeout_sec: float = 600.0,
) -> fmt.Task:
  """Generation 0 (a stage-1 task) in the horizon layout."""
  if lineage.generation != 0 or lineage.parent:
    raise ValueError(
      f"root_task: {lineage.id} has generation {lineage.generation} and parent "
      f"{lineage.parent!r}; a root has generation 0 and no parent"
    )
  env = _stage_env(0, stage)
  env["Dockerfile"] = dockerfile(env, 1).encode()
  return fmt.Task(
    instruction=stage.instruction.strip() + "\n",
    config=_config(
      lineage, stage.instruction, metadata or {}, agent_timeout_sec, verifier_timeout_sec
    ),
    environment=env,
    tests=_tests(stage.tests, 0, {}),
    solution={"solve.sh": stage.solve.encode(), **stage.solution_files},
  )


def generations(task: fmt.Task) -> int:
  """Number of generations whose checks the task carries (= its generation + 1)."""
  gens = {int(m.group(1)) for rel in task.tests if (m := _GEN_DIR.match(rel))}
  if gens != set(range(len(gens))):
    raise ValueError(
      f"{task.path or task.name}: tests/ has generations {sorted(gens)}; expected "
      "g0..gN without gaps"
    )
  return len(gens)


def child_task(
  parent: fmt.Task, stage: Stage, lineage: Lineage, *, metadata: Mapping[str, Any] | None = None
) -> fmt.Task:
  """Generation n+1: the parent's stages + the parent's oracle as stage n's solution + `stage`.

  Keeps every test file of the parent unchanged (under tests/g0..gn/) and adds tests/g<n+1>/.
  """
  n = generations(parent)
  parent_line = lineage_of(parent)
  if (lineage.generation, lineage.parent, lineage.root) != (n, parent_line.id, parent_line.root):
    raise ValueError(
      f"child_task: lineage {lineage.id} (generation {lineage.generation}, parent "
      f"{lineage.parent!r}) does not continue {parent_line.id} (generation "
      f"{n - 1}, root {parent_line.root})"
    )
  if "solve.sh" not in parent.solution:
    raise ValueError(
      f"{parent.path or parent.name}: the parent has no solution/solve.sh; its "
      "final state cannot be rebuilt"
    )
  env = {rel: bytes(d) for rel, d in parent.environment.items() if rel.startswith("stages/")}
  env.update({f"stages/g{n - 1}/solution/{rel}": bytes(d) for rel, d in parent.solution.items()})
  env.update(_stage_env(n, stage))
  env["Dockerfile"] = dockerfile(env, n + 1).encode()
  meta = {**{k: v for k, v in parent.config.metadata.items() if k != "horizon"}, **(metadata or {})}
  config = _config(
    lineage,
    stage.instruction,
    meta,
    parent.config.agent.timeout_sec,
    parent.config.verifier.timeout_sec,
  )
  return fmt.Task(
    instruction=stage.instruction.strip() + "\n",
    config=config,
    environment=env,
    tests=_tests(stage.tests, n, parent.tests),
    solution={"solve.sh": stage.solve.encode(), **stage.solution_files},
  )
