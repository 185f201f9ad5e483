"""The benchmark scripts run end to end at tiny shapes (CPU) and report sane numbers."""

import importlib.util
import json
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load(name):
  spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow  # bench smoke runs: the slow suite keeps the scripts working
def test_gpu_decode_tiny_runs_on_cpu(tmp_path):
  out = tmp_path / "gpu.json"
  r = _load("gpu_decode").main(["--tiny", "--out", str(out)])
  assert json.loads(out.read_text())["decode_tok_s"] == r["decode_tok_s"]
  assert r["decode_tok_s"] > 0 and r["bound_tok_s_live_kv"] > r["decode_tok_s"]
  assert r["bound_tok_s_full_cache"] <= r["bound_tok_s_live_kv"]
  assert r["peak_pages_in_use"] > 0 and r["kv_pool_bytes"] > 0


@pytest.mark.full  # out of CI's slow run: docs/design/ci.md (python3 -m pytest -m full)
@pytest.mark.slow
def test_serve_bench_tiny_runs(tmp_path, capsys):
  record = tmp_path / "BENCH.md"
  r = _load("serve_bench").main(["--tiny", "--pairs", "5", "--record", str(record)])
  assert [d["batch"] for d in r["decode"]] == [4]
  assert all(d["ours_tok_s"] > 0 and d["hf_tok_s"] > 0 for d in r["decode"])
  assert [d["batch"] for d in r["layout"]] == [4]  # unrolled vs scanned serving
  assert all(len(d["comparison"]["ratios"]) == 5 for d in r["layout"])
  assert [d["batch"] for d in r["grpc"]] == [4]  # through the real server on loopback
  assert all(d["ours_tok_s"] > 0 and len(d["comparison"]["ratios"]) == 5 for d in r["grpc"])
  m = r["multi_turn"]
  # Same episodes (greedy, same observations): the cache saves prompt tokens, never adds any.
  assert m["prefill_tokens_cached"] + m["cached_tokens"] == m["prefill_tokens_plain"]
  assert m["prefill_tokens_cached"] < m["prefill_tokens_plain"]
  # Each timed run starts cold: every episode's first prompt is prefilled (on the last run too).
  assert m["prefill_tokens_cached"] >= 2 * (40 - 1)  # --tiny: 2 episodes, 40-token observations
  assert 0 < m["peak_kv_bytes_paged"] < m["kv_bytes_dense"]
  out = capsys.readouterr().out
  assert "decode B=4" in out and "gRPC end to end B=4" in out and "vs the scanned stack" in out


def test_serving_memory_statement_uses_the_engine_shardings():
  """Computed from the engine's own layout: Qwen3.5-9B's 4 kv heads split K/V over 4 devices but
  not 8 (replicated); the Gated DeltaNet state splits over both."""
  r = _load("serving_memory").main(["--tensor", "1,4,8"])
  one, four, eight = r["rows"]
  assert r["kv_bytes_per_token"] == 8 * 2 * 4 * 256 * 2  # 8 full-attention layers, K+V, bf16
  assert (four["kv_split"], eight["kv_split"]) == (4, 1)
  assert four["state_bytes_per_device"] * 4 == one["state_bytes_per_device"]
  assert eight["state_bytes_per_device"] * 8 == one["state_bytes_per_device"]
  dense = one["kv_bytes_per_device"]["dense"]
  assert dense == 256 * (2048 + 65536) * r["kv_bytes_per_token"]
  assert one["kv_bytes_per_device"]["paged, mean context 8192"] < dense / 4


def test_weight_push_bench_tiny_runs(tmp_path):
  r = _load("weight_push").main(["--tiny", "--out", str(tmp_path / "w.json")])
  assert r["bf16_s"] > 0 and r["fp32_s"] > 0 and r["params"] > 0
  assert len(r["comparison"]["ratios"]) == 5


def test_decode_profile_tiny_runs(tmp_path, capsys):
  """bench/decode_profile.py: loop phases, the compiled step and its census, HF's step time."""
  out = tmp_path / "profile.json"
  r = _load("decode_profile").main(
    ["--tiny", "--batches", "2", "--new", "4", "--repeats", "1", "--json", str(out)]
  )
  step, loop = r[2]["step"], r[2]["loop"]
  assert step["step_ms_min"] > 0 and loop["steps"] >= 4 and r[2]["hf_step_ms"] != 0
  assert step["census"]["matmul_flops"] > 0 and "dot" in step["census"]["by_kind"]
  assert set(loop["per_step_ms"]) >= {"_dispatch_decode", "_process"}
  assert json.loads(out.read_text())["2"]["loop"]["steps"] == loop["steps"]
  assert "B=2: loop" in capsys.readouterr().out
