"""9-axis sampler: taxonomy cardinalities, determinism per seed, chi-square marginals, the CLI."""

import json
import subprocess
import sys
import time

import pytest
from scipy import stats

from tmax_jax.tasks.generator import axes as A

# a fixed-seed test: a small alpha keeps it stable while a 3-point weight shift is still caught at
# n=10k
ALPHA = 1e-3


def test_taxonomy_cardinalities():
  tx = A.default_taxonomy()
  assert len(tx.domains) == 9 and set(tx.domains) == set(tx.axes["domain"].values)
  for d in tx.domains.values():
    assert (
      4 <= len(d["skill_types"]) <= 7
      and 20 <= len(d["primitive_skills"]) <= 40
      and 6 <= len(d["personas"]) <= 18
    )
  lang = dict(zip(tx.axes["language"].values, tx.axes["language"].weights, strict=True))
  assert lang == pytest.approx(
    {
      "Python": 0.35,
      "C": 0.15,
      "Bash": 0.15,
      "C++": 0.10,
      "Rust": 0.07,
      "Go": 0.07,
      "multi-language": 0.06,
      "any": 0.05,
    }
  )
  assert len(tx.axes["fixture"].values) == 7 and len(tx.axes["verifier"].values) == 5
  assert tx.axes["task_complexity"].values == ("short", "moderate", "complex", "intricate")


def test_bad_taxonomy_named(tmp_path):
  doc = json.loads(A.TAXONOMY_FILE.read_text())
  doc["domains"]["security"]["personas"] = doc["domains"]["security"]["personas"][:3]
  (tmp_path / "t.json").write_text(json.dumps(doc))
  with pytest.raises(A.TaxonomyError, match=r"t.json: domains.security.personas: expected 6-18"):
    A.load_taxonomy(tmp_path / "t.json")


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
  d = tmp_path_factory.mktemp("axes")
  out = d / "a.jsonl"
  t0 = time.perf_counter()
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "tmax_jax.tasks.generate_axes",
      "--n",
      "10000",
      "--seed",
      "0",
      "--out",
      str(out),
      "--no-progress",
    ],
    capture_output=True,
    text=True,
    check=True,
  )
  wall = time.perf_counter() - t0
  return out, json.loads(proc.stdout.strip().splitlines()[-1]), wall, d


def test_cli_10k_deterministic_and_fast(cli_run):
  out, summary, wall, d = cli_run
  lines = out.read_text().splitlines()
  assert len(lines) == 10000 and summary["n"] == 10000
  print(
    f"10k axis samples: {summary['seconds']:.3f}s in-process, {wall:.2f}s wall incl. interpreter "
    "start"
  )
  assert wall < 60
  again = d / "b.jsonl"
  subprocess.run(
    [
      sys.executable,
      "-m",
      "tmax_jax.tasks.generate_axes",
      "--n",
      "10000",
      "--seed",
      "0",
      "--out",
      str(again),
      "--no-progress",
    ],
    capture_output=True,
    check=True,
  )
  assert again.read_bytes() == out.read_bytes()
  other = [A.sample_axes(1, i).to_json() for i in range(50)]
  assert other != [json.loads(x) for x in lines[:50]]
  # a sample depends only on (seed, index): a shard starting at 5000 matches
  assert [s.to_json() for s in A.sample_many(3, 0, start=5000)] == [
    json.loads(x) for x in lines[5000:5003]
  ]
  assert 0.99 < summary["domain_balance"] <= 1.0


def test_marginals_match_target_weights(cli_run):
  out, _, _, _ = cli_run
  samples = [
    A.AxisSample(**{**json.loads(x), "primitive_skills": tuple(json.loads(x)["primitive_skills"])})
    for x in out.read_text().splitlines()
  ]
  tx = A.default_taxonomy()
  for axis, key in [
    ("domain", "domain"),
    ("language", "language"),
    ("task_complexity", "task_complexity"),
    ("command_complexity", "command_complexity"),
    ("fixture", "fixture"),
    ("verifier", "verifier"),
    ("primitive_skill_count", "primitive_skills"),
  ]:
    stat, dof = A.chi_square(A.marginals(samples, key), tx.axes[axis])
    assert stat < stats.chi2.ppf(1 - ALPHA, dof), (axis, stat, dof)
  for dom, d in tx.domains.items():  # skill type and persona uniform within each domain
    sub = [s for s in samples if s.domain == dom]
    for key, vals in (("skill_type", d["skill_types"]), ("persona", d["personas"])):
      stat, dof = A.chi_square(
        A.marginals(sub, key), A.Axis(vals, tuple([1 / len(vals)] * len(vals)))
      )
      assert stat < stats.chi2.ppf(1 - ALPHA, dof), (dom, key, stat)
    assert all(
      s.primitive_skills
      and len(set(s.primitive_skills)) == len(s.primitive_skills)
      and set(s.primitive_skills) <= set(d["primitive_skills"])
      for s in sub
    )


def test_chi_square_rejects_a_biased_sampler():
  """The same statistic must catch a sampler that ignores the language weights (uniform instead)."""
  tx = A.default_taxonomy()
  lang = tx.axes["language"]
  uniform = A.Axis(lang.values, tuple([1 / 8] * 8))
  import random

  rng = random.Random(0)
  counts = {}
  for _ in range(10000):
    v = rng.choices(uniform.values, cum_weights=uniform.cum())[0]
    counts[v] = counts.get(v, 0) + 1
  stat, dof = A.chi_square(counts, lang)
  assert stat > stats.chi2.ppf(1 - ALPHA, dof)
  # and a 3-point shift of Python's weight is caught too
  shifted = A.Axis(
    lang.values,
    tuple(
      w + (0.03 if v == "Python" else -0.03 / 7)
      for v, w in zip(lang.values, lang.weights, strict=True)
    ),
  )
  counts = {}
  for _ in range(10000):
    v = rng.choices(shifted.values, cum_weights=shifted.cum())[0]
    counts[v] = counts.get(v, 0) + 1
  assert A.chi_square(counts, lang)[0] > stats.chi2.ppf(1 - ALPHA, 7)


def test_balance_score():
  assert A.balance_score(["a", "b", "c"] * 10) == pytest.approx(1.0)
  assert A.balance_score(["a"] * 10, n_categories=9) == pytest.approx(1 / 9)
  skew = ["a"] * 90 + ["b"] * 10
  assert 0.5 < A.balance_score(skew) < 0.85
  assert A.balance_score([]) == 0.0


def test_cli_replaces_an_existing_output_only_with_overwrite(tmp_path):
  from tmax_jax.tasks import generate_axes

  out = tmp_path / "axes.jsonl"
  out.write_text("keep\n")
  args = ["--n", "3", "--out", str(out), "--no_progress"]
  with pytest.raises(FileExistsError, match="--overwrite"):
    generate_axes.main(args)
  assert out.read_text() == "keep\n"
  assert generate_axes.main([*args, "--overwrite"]) == 0
  assert len(out.read_text().splitlines()) == 3
