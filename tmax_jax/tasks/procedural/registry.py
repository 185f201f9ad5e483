"""The registry of procedural task families and the function that turns one into a `Task`."""

from __future__ import annotations

import difflib

from tmax_jax.errors import UserError
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.procedural import (
  chain_backup,
  chain_config,
  chain_contacts,
  chain_kvstore,
  chain_photos,
  core,
  fam_code,
  fam_data,
  fam_files,
  fam_media,
  fam_science,
  fam_security,
  fam_services,
  fam_starter,
  fam_sysadmin,
  fam_text,
  fam_vendor,
  fam_video,
)
from tmax_jax.tasks.procedural.chains import ChainFamily

_MODULES = (
  fam_files,
  fam_text,
  fam_data,
  fam_science,
  fam_code,
  fam_security,
  fam_sysadmin,
  fam_services,
  fam_media,
  fam_vendor,
  fam_starter,
  fam_video,
  chain_photos,
  chain_kvstore,
  chain_backup,
  chain_contacts,
  chain_config,
)
# Extension chains (tasks/procedural/chains.py): their roots are ordinary families above.
_CHAIN_MODULES = (chain_photos, chain_kvstore, chain_backup, chain_contacts, chain_config)


def _collect() -> dict[str, core.Family]:
  out: dict[str, core.Family] = {}
  for mod in _MODULES:
    for fam in mod.FAMILIES:
      if fam.name in out:
        raise ValueError(f"duplicate procedural family name {fam.name!r} in {mod.__name__}")
      out[fam.name] = fam
  return out


FAMILIES: dict[str, core.Family] = _collect()
CHAINS: dict[str, ChainFamily] = {m.CHAIN.name: m.CHAIN for m in _CHAIN_MODULES}


class UnknownNameError(UserError, KeyError):
  """An unknown family or chain name: a KeyError to lookups, a user error to the CLIs."""

  __str__ = UserError.__str__  # KeyError's would quote the whole message


def get_family(name: str) -> core.Family:
  try:
    return FAMILIES[name]
  except KeyError:
    close = difflib.get_close_matches(name, FAMILIES, n=3)
    hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
    raise UnknownNameError(
      f"unknown procedural family {name!r}{hint}; `python3 -m tmax_jax.tasks.procedural.cli "
      f"--list` lists the {len(FAMILIES)} families"
    ) from None


def get_chain(name: str) -> ChainFamily:
  try:
    return CHAINS[name]
  except KeyError:
    raise UnknownNameError(f"unknown extension chain {name!r}; known: {sorted(CHAINS)}") from None


def build_spec(name: str, seed: int, difficulty: int) -> core.TaskSpec:
  if difficulty not in core.LEVELS:
    raise ValueError(f"difficulty must be one of {core.LEVELS}, got {difficulty!r}")
  fam = get_family(name)
  return fam.build(core.family_rng(name, seed, difficulty), difficulty)


def task_name(name: str, seed: int, difficulty: int) -> str:
  return f"{name}-d{difficulty}-s{seed}"


def build_task(name: str, seed: int, difficulty: int, *, solution: str = "oracle") -> fmt.Task:
  """One procedural task. solution: "oracle" (solve.sh), "wrong" (the family's plausible wrong
  solution in place of solve.sh) or "nothing" (a solve.sh that does nothing)."""
  fam = get_family(name)
  spec = build_spec(name, seed, difficulty)
  override = {"oracle": None, "wrong": spec.wrong, "nothing": "true"}
  if solution not in override:
    raise ValueError(f"solution must be one of {sorted(override)}, got {solution!r}")
  environment, tests, solution_files = core.task_files(spec, solve=override[solution])
  config = fmt.TaskConfig(
    task=fmt.TaskInfo(
      name=task_name(name, seed, difficulty),
      description=spec.instruction.strip().splitlines()[0][:200],
      authors=("tmax_jax procedural library",),
      keywords=(fam.domain, fam.verifier, fam.fixture) + fam.skills,
    ),
    metadata={
      "difficulty": core.DIFFICULTY_NAMES[difficulty],
      "category": fam.domain,
      "family": name,
      "seed": seed,
      "level": difficulty,
      "verifier": fam.verifier,
      "fixture": fam.fixture,
      "task_complexity": spec.complexity,
      "language": spec.language,
      "tags": [fam.domain, fam.verifier, fam.fixture],
    },
    verifier=fmt.VerifierConfig(timeout_sec=spec.verifier_timeout_sec),
    agent=fmt.AgentConfig(timeout_sec=spec.agent_timeout_sec),
    environment=fmt.EnvironmentConfig(
      build_timeout_sec=300.0,
      docker_image="tmax-base:bookworm",
      cpus=1.0,
      memory_mb=2048,
      storage_mb=4096,
      allow_internet=False,
      workdir=core.WORKDIR,
    ),
  )
  return fmt.Task(
    instruction=spec.instruction.strip() + "\n",
    config=config,
    environment=environment,
    tests=tests,
    solution=solution_files,
  )


def write(
  name: str,
  seed: int,
  difficulty: int,
  directory,
  *,
  solution: str = "oracle",
  overwrite: bool = False,
) -> fmt.Task:
  return fmt.write_task(
    build_task(name, seed, difficulty, solution=solution), directory, overwrite=overwrite
  )


def summary() -> list[dict]:
  return [
    dict(name=f.name, domain=f.domain, verifier=f.verifier, fixture=f.fixture)
    for f in FAMILIES.values()
  ]


__all__ = [
  "CHAINS",
  "FAMILIES",
  "get_chain",
  "get_family",
  "build_spec",
  "build_task",
  "write",
  "task_name",
  "summary",
]
