"""pass@k (against brute-force enumeration), the soft filter, and 13-gram decontamination."""

import itertools
import json
import math

import pytest

from tmax_jax.tasks import difficulty as D


@pytest.mark.parametrize("n,c", [(4, 0), (4, 1), (5, 2), (6, 3), (6, 6), (8, 5)])
def test_pass_at_k_is_the_exact_subset_probability(n, c):
  outcomes = [1] * c + [0] * (n - c)
  for k in range(1, n + 1):
    subsets = list(itertools.combinations(range(n), k))
    exact = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert D.pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_large_and_errors():
  assert D.pass_at_k(1000, 1, 1) == pytest.approx(1e-3)
  assert D.pass_at_k(1000, 10, 100) == pytest.approx(
    1 - math.comb(990, 100) / math.comb(1000, 100), rel=1e-9
  )
  with pytest.raises(ValueError, match="k: expected"):
    D.pass_at_k(4, 1, 5)
  with pytest.raises(ValueError, match="c: expected"):
    D.pass_at_k(4, 5, 1)


def test_per_task_from_jsonl(tmp_path):
  rows = (
    [{"task": "a", "reward": r} for r in (1, 0, 0, 1, 0, 0, 0, 0)]
    + [{"task": "b", "reward": r} for r in (0.0,) * 8]
    + [{"task": "c", "reward": 0.9}]
  )
  p = tmp_path / "r.jsonl"
  p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  table = D.per_task_pass_at_k(D.load_rollouts(p), ks=(1, 8))
  assert table["a"]["n"] == 8 and table["a"]["c"] == 2
  assert table["a"]["pass@1"] == pytest.approx(0.25) and table["a"]["pass@8"] == 1.0
  assert table["b"]["pass@8"] == 0.0
  assert "pass@8" not in table["c"] and table["c"]["pass@1"] == 0.0  # 0.9 < threshold 1
  assert D.per_task_pass_at_k(D.load_rollouts(p), pass_threshold=0.5)["c"]["pass@1"] == 1.0
  assert D.mean_pass_at_k(table, 1) == pytest.approx((0.25 + 0 + 0) / 3)
  p.write_text('{"task": "a"}\n')
  with pytest.raises(ValueError, match=r"r.jsonl:1: expected"):
    D.load_rollouts(p)


def test_soft_filter():
  res = D.soft_filter(
    {"easy": [1, 1, 1], "hard": [0, 0, 1], "impossible": [0, 0, 0], "partial": [0.5, 0.2]}
  )
  assert res.kept == ("easy", "hard") and res.dropped == ("impossible", "partial")
  rollouts = [
    {"task": "x", "reward": 0},
    {"task": "y", "reward": 1},
    {"task": "x", "reward": 0},
  ]
  assert D.soft_filter(rollouts).dropped == ("x",)


BENCH_TEXT = (
  "You are given a web server configuration in /app that fails to start. Find the syntax error in "
  "the nginx configuration file, fix it, and make sure the server answers on port 8080 with the "
  "index page."
)


def test_decontamination(tmp_path):
  bench = tmp_path / "bench"
  (bench / "fix-nginx").mkdir(parents=True)
  (bench / "fix-nginx" / "instruction.md").write_text(BENCH_TEXT)
  (bench / "tb1-task").mkdir()
  (bench / "tb1-task" / "task.yaml").write_text(
    "instruction: |\n  Compute the SHA256 of every file under /data and "
    "write the sorted list of digests to /out/hashes.txt one per line\n"
  )
  ours = tmp_path / "ours"
  copied = ours / "copied"
  copied.mkdir(parents=True)
  # a 13-word window of the benchmark text, re-punctuated and re-cased, inside other words
  (copied / "instruction.md").write_text(
    "Intro. FIND the syntax error in the NGINX configuration-file, fix it, and "
    "make sure... then something else entirely."
  )
  tb1ish = ours / "hashes"
  tb1ish.mkdir()
  (tb1ish / "instruction.md").write_text(
    "compute the sha256 of every file under /data and write the sorted list"
  )
  clean = ours / "clean"
  clean.mkdir()
  (clean / "instruction.md").write_text(
    "You are given a web server configuration that fails to start. Fix the "
    "broken TLS certificate chain so that curl succeeds against port 8443."
  )
  short = ours / "short"
  short.mkdir()
  (short / "instruction.md").write_text(
    "find the syntax error in the nginx configuration file fix it and"
  )  # 12 words
  kept, dirty = D.decontaminate([copied, tb1ish, clean, short], bench)
  assert kept == [clean, short]
  assert [(c.task, c.benchmark_tasks) for c in dirty] == [
    ("copied", ("fix-nginx",)),
    ("hashes", ("tb1-task",)),
  ]
  assert dirty[0].overlapping_ngrams >= 1
  with pytest.raises(ValueError, match="no task directories"):
    D.BenchmarkIndex.build(tmp_path / "empty")


def test_ngrams():
  assert len(D.ngrams(" ".join(f"w{i}" for i in range(20)))) == 8
  assert D.ngrams("too short") == set()


def test_cli(tmp_path, capsys):
  p = tmp_path / "r.jsonl"
  p.write_text(
    "".join(
      json.dumps({"task": t, "reward": r}) + "\n"
      for t, r in [("a", 1), ("a", 0), ("b", 0), ("b", 0)]
    )
  )
  assert D.main(["--rollouts", str(p), "--k", "1", "2"]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out["mean"] == {"pass@1": 0.25, "pass@2": 0.5} and out["soft_filter"] == {
    "kept": 1,
    "dropped": ["b"],
  }
