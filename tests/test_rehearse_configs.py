"""Every shipped config that names a recipe (RL, SFT, eval: told by jobs.job_of, so a new config in
configs/ is rehearsed without editing this test) rehearses green as a user runs it:
`python3 -m tmax_jax.rehearse --config=configs/X.py`, through the real jobs on 8 fake CPU devices.
The rehearsal checks its own run (steps ran with a loss, the resume, the export, the trials) and
writes rehearsal.json; this test reads that report back. Issue 30's acceptance is the 9B's."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.test_rehearse import recipe_configs
from tmax_jax.rehearse import shrink

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT_S = 1500  # one rehearsal is ~1-4 min on 2 quiet cores; a loaded CI box is slower


@pytest.fixture(scope="module")
def xla_cache(tmp_path_factory):
  """One compilation cache for the module's rehearsals: configs with the same programs (the 9B
  and its GRPO ablation serve the same model) compile them once."""
  return tmp_path_factory.mktemp("rehearse_xla")


def rehearse(path: pathlib.Path, out: pathlib.Path, xla_cache) -> tuple[dict, str]:
  cmd = [
    sys.executable,
    "-m",
    "tmax_jax.rehearse",
    f"--config={path}",
    f"--out={out}",
    f"--xla_cache={xla_cache}",
  ]
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # the CLI sets its own
  proc = subprocess.run(
    cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
  )
  output = proc.stdout + proc.stderr
  assert proc.returncode == 0, output[-6000:]
  return json.loads((out / "rehearsal.json").read_text()), proc.stdout


def _check_training(report: dict) -> None:
  steps = [m["step"] for m in report["metrics"]]
  assert steps == [1, 2, 3], steps  # 2 steps, then one more resumed from the step-2 checkpoint
  assert all(m["skipped"] == 0.0 and m["loss"] == m["loss"] for m in report["metrics"])
  export = pathlib.Path(report["export_dir"])
  assert (export / "config.json").is_file() and list(export.glob("*.safetensors"))


def _check_9b_acceptance(report: dict, stdout: str) -> None:
  """Issue 30: the 9B rehearsal keeps Qwen3.5, fp32 masters + bf16 server + fp32 head, packing
  and sequence = every trainer device, and runs 2 RL steps and a resume from its checkpoint."""
  kept = report["kept"]
  assert "qwen3_5_text" in kept["model family"]
  assert "linear_attention" in kept["layer pattern (one period)"]
  assert "full_attention" in kept["layer pattern (one period)"]
  assert kept["dtypes (param / compute / head / served)"] == (
    "float32 / bfloat16 / float32 / bfloat16"
  )
  assert kept["packing"].startswith("packed")
  assert kept["trainer mesh"] == "{'sequence': 8}; sequence spans every trainer device"
  first, resumed = report["metrics"][:2], report["metrics"][2:]
  assert [m["step"] for m in first] == [1, 2] and [m["step"] for m in resumed] == [3]
  assert all(m["micro_batches"] >= 1 and m["n_loss_tokens"] > 0 for m in report["metrics"])
  assert "shrunk:" in stdout and "kept:" in stdout  # the table a user reads


# Every shipped config's CPU rehearsal is `full` (python3 -m pytest -m full): the nine took ~42 min
# of one worker (the 9B alone 7-12 min), more than CI's budget has room for (docs/design/ci.md);
# CI keeps tests/test_rehearse_tpu.py (every config compiled for TPU) and the shrink checks of
# tests/test_rehearse.py.
IN_CI = ()


def _params(paths):
  return [pytest.param(p, marks=() if p.stem in IN_CI else pytest.mark.full) for p in paths]


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + 60)
@pytest.mark.parametrize("path", _params(recipe_configs()), ids=lambda p: p.stem)
def test_shipped_config_rehearses(path, tmp_path, xla_cache):
  report, stdout = rehearse(path, tmp_path / path.stem, xla_cache)
  assert report["name"] == path.stem and report["shrunk"]
  if report["job"] in ("rl", "sft"):
    _check_training(report)
  else:
    agg = report["aggregate"]
    assert agg["num_tasks"] == shrink.EVAL_TASKS and agg["num_errors"] == 0
    assert agg["num_trials"] == shrink.EVAL_TASKS * agg["runs_per_task"]
  if path.stem == "tmax_qwen3_5_9b":
    _check_9b_acceptance(report, stdout)
  print(f"{path.stem}: {report['total_s']:.0f} s")
