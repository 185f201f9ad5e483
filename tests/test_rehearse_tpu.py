"""Every shipped RL / SFT / served-eval / serve config's programs compiled by XLA:TPU at rehearsal
size (tmax_jax/rehearse/aot.py) in the compiler venv: a change that breaks TPU compilation fails
here. A new config under configs/ is covered without editing this test."""

import json
import pathlib
import subprocess

import pytest

toolchain = pytest.importorskip("tmax_jax.aot.toolchain")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = """
import json, sys
from tmax_jax.rehearse import aot
for path in sys.argv[1:]:
  print(json.dumps(aot.compile_job(path)), flush=True)
"""


def _configs() -> list[str]:
  return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.py"))


@pytest.mark.slow
def test_every_shipped_config_compiles_for_a_tpu_slice():
  why = toolchain.unavailable("tpu")
  if why:
    pytest.skip(why)
  configs = _configs()  # once: a config file added while the compiles run is not in this run
  res = subprocess.run(
    [str(toolchain.python()), "-c", SCRIPT, *configs],
    cwd=ROOT,
    env=toolchain.environ(),
    capture_output=True,
    text=True,
    timeout=3000,
    check=False,
  )
  assert res.returncode == 0, res.stderr[-4000:]
  print(res.stdout)  # the compiled programs per config (pytest -s shows them)
  reports = {r["config"]: r for r in map(json.loads, res.stdout.splitlines())}
  assert sorted(reports) == sorted(pathlib.Path(c).name for c in configs)
  compiled = {name: r for name, r in reports.items() if not r["skipped"]}
  # what is skipped trains nothing and serves no model of its own (an oracle / endpoint eval; the
  # demo and Harbor jobs run the RL / serve configs' programs; math_eval asks a running server)
  skipped = {r["job"] for r in reports.values() if r["skipped"]}
  assert skipped <= {"demo", "harbor", "eval", "math_eval"}, skipped
  assert {r["job"] for r in compiled.values()} >= {"rl", "sft", "eval", "serve"}
  for name, r in compiled.items():
    sides = {p["side"] for p in r["programs"]}
    assert "server" in sides or r["job"] == "sft", name
    if r["job"] in ("rl", "sft"):
      assert "trainer" in sides, name
      step = next(p for p in r["programs"] if p["name"].startswith("train "))
      if r["sequence"] == 1:  # a sequence axis runs ring attention over blockwise tiles
        assert step["mosaic_calls"] > 0, f"{name}: the train step holds no Mosaic kernel"
      assert step["flops"] > 0 and step["memory"]["temp"] > 0, name
    if r["job"] == "rl":
      assert "sync" in sides, name
    assert r["verdict"]["fits"], name
