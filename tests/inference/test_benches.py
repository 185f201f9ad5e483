"""The benchmark scripts run end to end at tiny shapes (CPU) and report sane numbers."""

import importlib.util
import json
import pathlib

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench"


def _load(name):
  spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_gpu_decode_tiny_runs_on_cpu(tmp_path):
  out = tmp_path / "gpu.json"
  r = _load("gpu_decode").main(["--tiny", "--out", str(out)])
  assert json.loads(out.read_text())["decode_tok_s"] == r["decode_tok_s"]
  assert r["decode_tok_s"] > 0 and r["bound_tok_s_live_kv"] > r["decode_tok_s"]
  assert r["bound_tok_s_full_cache"] <= r["bound_tok_s_live_kv"]
  assert 0 < r["peak_pages_in_use"] and r["kv_pool_bytes"] > 0


def test_serve_bench_tiny_runs(tmp_path, capsys):
  record = tmp_path / "BENCH.md"
  r = _load("serve_bench").main(["--tiny", "--pairs", "5", "--record", str(record)])
  assert [d["batch"] for d in r["decode"]] == [4]
  assert all(d["ours_tok_s"] > 0 and d["hf_tok_s"] > 0 for d in r["decode"])
  m = r["multi_turn"]
  # Same episodes (greedy, same observations): the cache saves prompt tokens, never adds any.
  assert m["prefill_tokens_cached"] + m["cached_tokens"] == m["prefill_tokens_plain"]
  assert m["prefill_tokens_cached"] < m["prefill_tokens_plain"]
  # Each timed run starts cold: every episode's first prompt is prefilled (on the last run too).
  assert m["prefill_tokens_cached"] >= 2 * (40 - 1)  # --tiny: 2 episodes, 40-token observations
  assert 0 < m["peak_kv_bytes_paged"] < m["kv_bytes_dense"]
  assert "decode B=4" in capsys.readouterr().out


def test_weight_push_bench_tiny_runs(tmp_path):
  r = _load("weight_push").main(["--tiny", "--out", str(tmp_path / "w.json")])
  assert r["bf16_s"] > 0 and r["fp32_s"] > 0 and r["params"] > 0
  assert len(r["comparison"]["ratios"]) == 5
