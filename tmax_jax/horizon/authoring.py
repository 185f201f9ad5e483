"""The LLM path: prompts and strict reply parsing for stage 1 (build), stage 2 (extend), rebuilds.

Reuses the TMAX generator's pieces: `ChatClient` (any OpenAI-compatible endpoint), `extract_json`,
the file-map check and the retry loop that feeds a parse error back to the model
(`pipeline.ask_until_parsed`). A professional seed is {"id", "job", "domain", "tools"}
(seeds.json ships 25, one per domain).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

from tmax_jax.errors import UserError
from tmax_jax.horizon import compose
from tmax_jax.tasks import format as fmt
from tmax_jax.tasks.generator import llm

PROMPTS = pathlib.Path(__file__).with_name("prompts")
SEEDS_FILE = pathlib.Path(__file__).with_name("seeds.json")
ROOT_KEYS = {
  "name": str,
  "goal": str,
  "requirement": str,
  "instruction": str,
  "difficulty": str,
  "seeds": dict,
  "setup": str,
  "solution": str,
  "tests": dict,
  "smoke_test": str,
}
EXTEND_KEYS = {k: v for k, v in ROOT_KEYS.items() if k not in ("goal", "difficulty")}
_MAY_BE_EMPTY = ("setup", "seeds")
_TEST_FILE = re.compile(r"^test_[\w-]+\.py$")


@dataclasses.dataclass(frozen=True)
class ProfessionalSeed:
  id: str
  job: str
  domain: str
  tools: tuple[str, ...]


def load_seeds(path: str | pathlib.Path = SEEDS_FILE) -> list[ProfessionalSeed]:
  """Seeds of professional work from a JSON list; UserErrors name the entry and the field."""
  try:
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UserError(f"{path}: not JSON ({e}); expected a JSON list of seeds") from None
  if not isinstance(data, list):
    raise UserError(f"{path}: expected a JSON list of seeds")
  out = []
  for i, s in enumerate(data):
    if not isinstance(s, dict) or set(s) != {"id", "job", "domain", "tools"}:
      raise UserError(
        f"{path}[{i}]: expected keys id, job, domain, tools; got "
        f"{sorted(s) if isinstance(s, dict) else type(s).__name__}"
      )
    if not isinstance(s["tools"], list) or not all(isinstance(t, str) for t in s["tools"]):
      raise UserError(f"{path}[{i}].tools: expected a list of strings")
    out.append(ProfessionalSeed(str(s["id"]), s["job"], s["domain"], tuple(s["tools"])))
  return out


def _render(name: str, **values) -> str:
  return string.Template((PROMPTS / name).read_text()).substitute(values)


def _system() -> dict[str, str]:
  return {"role": "system", "content": (PROMPTS / "system.txt").read_text()}


def build_messages(seed: ProfessionalSeed) -> list[dict[str, str]]:
  user = _render("build.txt", job=seed.job, domain=seed.domain, tools=", ".join(seed.tools))
  return [_system(), {"role": "user", "content": user}]


def extend_messages(
  parent: fmt.Task, lineage: Sequence[compose.Lineage], siblings: Sequence[str] = ()
) -> list[dict[str, str]]:
  """The extension prompt: the goal, the lineage, the parent's instruction/oracle/tests/files."""
  line = compose.lineage_of(parent)
  stage_files = sorted(rel.split("/seeds/", 1)[1] for rel in parent.environment if "/seeds/" in rel)
  sib = (
    (
      "Other extensions of this parent already exist; add a DIFFERENT requirement than: "
      + "; ".join(siblings)
      + "\n"
    )
    if siblings
    else ""
  )
  user = _render(
    "extend.txt",
    goal=line.goal,
    lineage="\n".join(f"  g{g.generation}: {g.requirement}" for g in lineage),
    instruction=parent.instruction.strip(),
    solution=parent.solution["solve.sh"].decode(errors="replace").strip(),
    tests=", ".join(sorted(k for k in parent.tests if k != "test.sh")),
    files=", ".join(stage_files[:80]) or "(none)",
    siblings=sib,
  )
  return [_system(), {"role": "user", "content": user}]


def rebuild_message(evidence: Sequence[str], round_no: int) -> dict[str, str]:
  return {
    "role": "user",
    "content": _render(
      "rebuild.txt", round=round_no, evidence="\n".join(f"- {e}" for e in evidence)
    ),
  }


@dataclasses.dataclass(frozen=True)
class Draft:
  """A parsed reply: the stage, its metadata (name, goal, difficulty) and the smoke test."""

  stage: compose.Stage
  name: str
  smoke_test: str
  goal: str = ""
  difficulty: str = "medium"
  reply: str = ""  # the raw reply (sent back as the assistant turn of a rebuild conversation)


def _check(obj: Mapping[str, Any], keys: Mapping[str, type]) -> None:
  missing = [k for k in keys if k not in obj]
  extra = sorted(set(obj) - set(keys))
  if missing or extra:
    raise llm.ReplyError(
      f"keys: missing {missing}, unexpected {extra}; expected exactly {sorted(keys)}"
    )
  for k, typ in keys.items():
    empty = typ is str and not obj[k].strip() and k not in _MAY_BE_EMPTY
    if not isinstance(obj[k], typ) or empty:
      raise llm.ReplyError(f"{k}: expected a non-empty {typ.__name__}, got {type(obj[k]).__name__}")
  if not llm.SLUG.match(obj["name"]):
    raise llm.ReplyError(f"name: expected a kebab-case slug, got {obj['name']!r}")


def parse_reply(reply: str, kind: str) -> Draft:
  """kind "build" (a root task) or "extend" (a child stage). Raises llm.ReplyError naming the
  field, which the retry loop feeds back to the model."""
  obj = llm.extract_json(reply)
  _check(obj, ROOT_KEYS if kind == "build" else EXTEND_KEYS)
  if kind == "build" and obj["difficulty"] not in llm.DIFFICULTIES:
    raise llm.ReplyError(
      f"difficulty: expected one of {llm.DIFFICULTIES}, got {obj['difficulty']!r}"
    )
  seeds = llm.check_str_map(obj["seeds"], "seeds")
  tests = llm.check_str_map(obj["tests"], "tests")
  bad = [k for k in tests if not _TEST_FILE.match(k)]
  if not tests or bad:
    raise llm.ReplyError(
      f"tests: expected one or more pytest files named test_<name>.py, got {sorted(tests)}"
    )
  solve = obj["solution"] if obj["solution"].startswith("#!") else "#!/bin/bash\n" + obj["solution"]
  stage = compose.Stage(
    name=obj["name"],
    instruction=obj["instruction"].strip(),
    requirement=obj["requirement"].strip(),
    solve=solve,
    tests={k: v.encode() for k, v in tests.items()},
    seeds={k: v.encode() for k, v in seeds.items()},
    setup=obj["setup"],
  )
  return Draft(
    stage,
    obj["name"],
    obj["smoke_test"],
    goal=obj.get("goal", ""),
    difficulty=obj.get("difficulty", "medium"),
    reply=reply,
  )
