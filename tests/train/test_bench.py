"""The benchmark scripts run end to end in their tiny CPU modes (real subprocesses)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(args, tmp_path):
  out = tmp_path / "r.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  subprocess.run(
    [sys.executable, *map(str, args), "--out", str(out)],
    cwd=ROOT,
    env=env,
    check=True,
    capture_output=True,
    timeout=600,
  )
  return json.loads(out.read_text())


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_train_step_tiny_and_trace_only(tmp_path):
  r = _run(["bench/gpu_train_step.py", "--tiny", "--steps", "2"], tmp_path)
  assert r["tokens_per_s"] > 0 and 0 < r["mfu"] < 1 and r["skipped"] == 0
  assert r["loss"] == r["loss"] and r["grad_norm"] > 0  # finite, and gradients flow
  full = _run(["bench/gpu_train_step.py", "--trace_only"], tmp_path)
  # Qwen3-1.7B: 1.72e9 params; the anchor's 35% MFU at 23.5k tok/s implies ~1.18e10 FLOP/token
  assert 1.70e9 < full["params"] < 1.75e9
  assert abs(23_500 * full["flops_per_token"] / 790e12 - 0.35) < 0.01
  assert full["param_dtypes"] == ["float32"] and "kept_frac" in full["metrics"]


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_cpu_train_step_bench_tiny(tmp_path):
  r = _run(["bench/train_step.py", "--tiny", "--pairs", "5"], tmp_path)
  assert r["jax_tokens_per_s"] > 0 and r["torch_tokens_per_s"] > 0
  assert len(r["ratios"]) == 5 and r["ratio_min"] <= r["ratio_median"] <= r["ratio_max"]
  assert r["load_before"] >= 0 and r["load_after"] >= 0


def _load(name):
  import importlib.util

  spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  sys.modules[name] = mod
  spec.loader.exec_module(mod)
  return mod


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_packing_bench_tiny(tmp_path):
  r = _run(["bench/packing.py", "--tiny"], tmp_path)
  assert r["fixed_padding"] > 0.5 and r["packed_padding"] < r["fixed_padding"]
  assert r["packed_tokens_per_s"] > 0 and r["fixed_tokens_per_s"] > 0 and len(r["ratios"]) >= 5


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_side_by_side_benches_tiny(tmp_path):
  """model_fwd_bwd and gated_delta_bench check parity first, then time >= 5 alternated pairs; a
  busy machine's row is refused (or, when quiet, lands in its own BENCHMARKS.md section)."""
  sys.path.insert(0, str(ROOT / "bench"))
  md = tmp_path / "BENCHMARKS.md"
  for name in ("model_fwd_bwd", "gated_delta_bench"):
    r = _load(name).main(["--tiny", "--append", str(md)])
    assert len(r["ratios"]) == 5 and r["ours_median_s"] > 0 and r["theirs_median_s"] > 0
    recorded = md.exists() and f"bench/{name}.py" in md.read_text()
    quiet = max(r["load_before"], r["others_cores"]) <= _load("report").core_count() / 2
    assert recorded == quiet


def test_cpu_gemm_bench_checks_the_product_then_times_each_shape():
  sys.path.insert(0, str(ROOT / "bench"))
  gemm = _load("cpu_gemm")
  rows = gemm.main(["--shapes", "8x16x32,4x8x8", "--weights", "2", "--work_flops", "1e6"])
  assert [r["shape"] for r in rows] == [[8, 16, 32], [4, 8, 8]]
  assert all(
    r["gflops_ours"] > 0 and r["gflops_theirs"] > 0 and len(r["ratios"]) == 5 for r in rows
  )
  with pytest.raises(SystemExit, match="expected MxKxN"):
    gemm.parse_shape("8x16")


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gpu_session_script_tiny(tmp_path):
  """bench/gpu_session.sh (the one prepared accelerator call) runs every GPU script in its CPU
  mode: each step exits 0 and leaves its JSON under $OUT."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", OUT=str(tmp_path))
  subprocess.run(
    ["bash", "bench/gpu_session.sh", "--tiny"], cwd=ROOT, env=env, check=True, timeout=850
  )
  log = (tmp_path / "gpu_session.log").read_text()
  rcs = [line.split("rc=")[1].split()[0] for line in log.splitlines() if " rc=" in line]
  assert rcs == ["0"] * 5, log[-3000:]
  decode = [
    json.loads((tmp_path / f"gpu_decode_{k}.json").read_text()) for k in ("scanned", "unrolled")
  ]
  assert [d["unrolled"] for d in decode] == [False, True]
  for name in ("gpu_train_step.json", "gpu_long_context.jsonl", "gpu_gated_delta.jsonl"):
    assert (tmp_path / name).stat().st_size > 0, name
