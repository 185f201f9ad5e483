"""Acceptance of the procedural library in real sandboxes (bubblewrap on the base rootfs).

For a family at a difficulty level: the oracle (solution/solve.sh) must score 1, an agent that does
nothing must score 0, and the family's plausible wrong solution must score 0. The default suite runs
one level per family (levels rotate over the families); the slow suite runs every family at every
level. Each assertion message carries the verifier and oracle logs.
"""

import pytest

from tmax_jax.tasks import runner
from tmax_jax.tasks.procedural import core, registry

FAMILIES = sorted(registry.FAMILIES)
SEED = 11


def _logs(res: "runner.RunResult") -> str:
  return "\n".join(f"--- {k} ---\n{v[-3000:]}" for k, v in res.logs.items())


def _expect(name: str, level: int, mode: str, want: float):
  task = registry.build_task(name, SEED, level)
  spec = registry.build_spec(name, SEED, level)
  if mode == "oracle":
    res = runner.run_oracle(task)
  elif mode == "nothing":
    res = runner.run_noop(task)
  else:
    res = runner.run_script(task, core.bash_script(spec.wrong))
  assert res.reward == want, (
    f"{name} level {level}: the {mode} solution scored {res.reward} "
    f"(expected {want}; reason {res.reason})\n{_logs(res)}"
  )


def _check_family(name: str, level: int):
  _expect(name, level, "oracle", 1.0)
  _expect(name, level, "nothing", 0.0)
  _expect(name, level, "wrong", 0.0)


@pytest.mark.parametrize("name", FAMILIES)
def test_family_sample_level_in_sandbox(name):
  """Default suite: one difficulty per family, rotating so every level is covered over families."""
  _check_family(name, FAMILIES.index(name) % len(core.LEVELS))


@pytest.mark.slow
@pytest.mark.parametrize("level", core.LEVELS)
@pytest.mark.parametrize("name", FAMILIES)
def test_family_every_level_in_sandbox(name, level):
  _check_family(name, level)
