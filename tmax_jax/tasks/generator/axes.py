"""The TMAX-15K 9-axis compositional sampler.

Axes: domain, skill type, primitive skills (3-5 of the domain's), persona, language (weighted),
task complexity, command complexity, fixture, verifier. Values and weights live in taxonomy.json
(shipped data; `weights: null` means uniform). Sample i of seed s depends only on (s, i), so shards
and resumed runs reproduce the same samples.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tmax_jax.errors import UserError
from tmax_jax.tasks import vocabulary

TAXONOMY_FILE = pathlib.Path(__file__).with_name("taxonomy.json")
AXES = (
  "domain",
  "skill_type",
  "primitive_skills",
  "persona",
  "language",
  "task_complexity",
  "command_complexity",
  "fixture",
  "verifier",
)
CARDINALITY_RULES = {"skill_types": (4, 7), "primitive_skills": (20, 40), "personas": (6, 18)}
# taxonomy axis -> its values in the shared task vocabulary
VOCABULARY_AXES = {
  "domain": vocabulary.DOMAINS,
  "task_complexity": vocabulary.TASK_COMPLEXITIES,
  "fixture": vocabulary.FIXTURE_NAMES,
  "verifier": vocabulary.VERIFIER_KINDS,
}


class TaxonomyError(UserError):
  """taxonomy.json does not follow the recipe's cardinalities; names the file and field."""


@dataclasses.dataclass(frozen=True)
class AxisSample:
  """One point of the 9-axis space."""

  id: str
  seed: int
  index: int
  domain: str
  skill_type: str
  primitive_skills: tuple[str, ...]
  persona: str
  language: str
  task_complexity: str
  command_complexity: str
  fixture: str
  verifier: str

  def to_json(self) -> dict[str, Any]:
    d = dataclasses.asdict(self)
    d["primitive_skills"] = list(self.primitive_skills)
    return d


@dataclasses.dataclass(frozen=True)
class Axis:
  values: tuple
  weights: tuple[float, ...]  # normalized, same length as values

  def cum(self) -> list[float]:
    out, acc = [], 0.0
    for w in self.weights:
      acc += w
      out.append(acc)
    return out


@dataclasses.dataclass(frozen=True)
class Taxonomy:
  axes: Mapping[str, Axis]
  domains: Mapping[str, Mapping[str, tuple[str, ...]]]


def _axis(spec: Any, file: str, name: str) -> Axis:
  """One axis; the vocabulary axes take their values from tasks/vocabulary.py (weights only)."""
  shared = VOCABULARY_AXES.get(name)
  if shared is not None:
    if not isinstance(spec, dict) or "values" in spec:
      raise TaxonomyError(
        f"{file}: axes.{name}: expected {{weights: [...] | null}} only; its "
        "values are the shared vocabulary (tmax_jax/tasks/vocabulary.py)"
      )
    spec = {**spec, "values": list(shared)}
  if not isinstance(spec, dict) or not isinstance(spec.get("values"), list) or not spec["values"]:
    raise TaxonomyError(f"{file}: axes.{name}: expected {{values: [...], weights: [...] | null}}")
  values, weights = tuple(spec["values"]), spec.get("weights")
  if weights is None:
    weights = [1.0] * len(values)
  if (
    len(weights) != len(values)
    or any(not isinstance(w, (int, float)) or w < 0 for w in weights)
    or sum(weights) <= 0
  ):
    raise TaxonomyError(
      f"{file}: axes.{name}.weights: expected {len(values)} non-negative numbers, got {weights!r}"
    )
  total = float(sum(weights))
  return Axis(values, tuple(w / total for w in weights))


def load_taxonomy(path: str | pathlib.Path = TAXONOMY_FILE) -> Taxonomy:
  """Reads and checks taxonomy.json (the recipe's cardinalities per domain)."""
  file = str(path)
  try:
    doc = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise TaxonomyError(f"{file}: not JSON ({e})") from None
  if not isinstance(doc, dict):
    raise TaxonomyError(f"{file}: expected a JSON object with 'axes' and 'domains'")
  axes = {name: _axis(spec, file, name) for name, spec in doc.get("axes", {}).items()}
  for name in (
    "domain",
    "language",
    "task_complexity",
    "command_complexity",
    "fixture",
    "verifier",
    "primitive_skill_count",
  ):
    if name not in axes:
      raise TaxonomyError(f"{file}: axes.{name}: missing")
  extra = sorted(set(doc.get("domains", {})) - set(vocabulary.DOMAINS))
  if extra:
    raise TaxonomyError(
      f"{file}: domains.{extra[0]}: not a domain of tmax_jax/tasks/vocabulary.py "
      f"{vocabulary.DOMAINS}"
    )
  domains = {}
  for dom in axes["domain"].values:
    entry = doc.get("domains", {}).get(dom)
    if not isinstance(entry, dict):
      raise TaxonomyError(f"{file}: domains.{dom}: missing")
    for key, (lo, hi) in CARDINALITY_RULES.items():
      vals = entry.get(key)
      if not isinstance(vals, list) or not lo <= len(set(vals)) == len(vals) <= hi:
        raise TaxonomyError(
          f"{file}: domains.{dom}.{key}: expected {lo}-{hi} distinct strings, "
          f"got {len(vals) if isinstance(vals, list) else vals!r}"
        )
    domains[dom] = {k: tuple(entry[k]) for k in CARDINALITY_RULES}
  if max(axes["primitive_skill_count"].values) > min(
    len(d["primitive_skills"]) for d in domains.values()
  ):
    raise TaxonomyError(
      f"{file}: axes.primitive_skill_count: larger than a domain's primitive skill list"
    )
  return Taxonomy(axes, domains)


@functools.lru_cache(maxsize=4)
def default_taxonomy() -> Taxonomy:
  return load_taxonomy(TAXONOMY_FILE)


def _pick(rng: random.Random, axis: Axis):
  return rng.choices(axis.values, cum_weights=axis.cum())[0]


def sample_axes(seed: int, index: int, taxonomy: Taxonomy | None = None) -> AxisSample:
  """Sample `index` of the stream `seed` (a pure function of both)."""
  tx = taxonomy or default_taxonomy()
  rng = random.Random(f"tmax-axes:{seed}:{index}")  # str seeds hash with sha512: stable across runs
  domain = _pick(rng, tx.axes["domain"])
  d = tx.domains[domain]
  k = _pick(rng, tx.axes["primitive_skill_count"])
  return AxisSample(
    id=f"tmax-s{seed}-{index:07d}",
    seed=seed,
    index=index,
    domain=domain,
    skill_type=rng.choice(d["skill_types"]),
    primitive_skills=tuple(rng.sample(d["primitive_skills"], k)),
    persona=rng.choice(d["personas"]),
    language=_pick(rng, tx.axes["language"]),
    task_complexity=_pick(rng, tx.axes["task_complexity"]),
    command_complexity=_pick(rng, tx.axes["command_complexity"]),
    fixture=_pick(rng, tx.axes["fixture"]),
    verifier=_pick(rng, tx.axes["verifier"]),
  )


def sample_many(
  n: int, seed: int, start: int = 0, taxonomy: Taxonomy | None = None
) -> list[AxisSample]:
  return [sample_axes(seed, i, taxonomy) for i in range(start, start + n)]


def balance_score(labels: Iterable[str], n_categories: int | None = None) -> float:
  """exp(H) / N over the label distribution (1.0 = perfectly balanced over N categories)."""
  counts = Counter(labels)
  total = sum(counts.values())
  if total == 0:
    return 0.0
  h = -sum((c / total) * math.log(c / total) for c in counts.values())
  return math.exp(h) / (n_categories or len(counts))


def marginals(samples: Sequence[AxisSample], axis: str) -> Counter:
  if axis == "primitive_skills":
    return Counter(len(s.primitive_skills) for s in samples)
  return Counter(getattr(s, axis) for s in samples)


def chi_square(counts: Mapping[Any, int], axis: Axis) -> tuple[float, int]:
  """Pearson's statistic of observed `counts` against the axis weights -> (statistic, dof)."""
  total = sum(counts.values())
  extra = set(counts) - set(axis.values)
  if extra:
    raise ValueError(f"values outside the axis: {sorted(map(str, extra))}")
  stat = 0.0
  for v, w in zip(axis.values, axis.weights, strict=True):
    expected = total * w
    stat += (counts.get(v, 0) - expected) ** 2 / expected
  return stat, len(axis.values) - 1
