"""The plan's XLA:GPU target: H100 / H200 nodes of 8 compiled for without a GPU.

The compile half runs in the compiler venv of tmax_jax.aot.toolchain (`--gpu`: the CUDA plugin),
in a subprocess: the shipped 8B RL recipe at rehearsal size (rehearse/aot.py) compiled for one
h100 node, whose train micro-step and decode must come back with the compiler's memory (within the
chip's HBM) and FLOPs counted from XLA:GPU's cuBLAS calls. The rest needs no compiler: node names,
the target protos against the chip table, the GEMM counter on GPU HLO text, and the CLI's one-line
errors.
"""

import re

import pytest

from tests.compiler_venv import compile_report
from tests.test_plan import _plan_error as plan_error
from tmax_jax import hlo_cost
from tmax_jax.aot import chips, targets

CONFIG = "configs/tmax_qwen3_8b.py"
SCRIPT = """
import json, sys
from tmax_jax.aot import chips
from tmax_jax.rehearse import aot
print(json.dumps(aot.compile_job(sys.argv[1], chips.parse_node(sys.argv[2]))))
"""


@pytest.mark.slow  # 25 s: an XLA:GPU compile; the mistakes test stays
def test_shipped_rl_config_compiles_for_an_h100_node():
  """Train micro-step and decode of the 8B recipe (rehearsal size) compiled by XLA:GPU for 8 x
  H100: per-GPU memory from the compiler, FLOPs from the cuBLAS GEMMs (XLA:GPU leaves no `dot`),
  no TPU kernel, and cuDNN attention (what "auto" picks for bf16 on a GPU) replaced by blockwise,
  which the verdict says."""
  report = compile_report("gpu", SCRIPT, CONFIG, "h100", timeout_s=1200)
  assert report["job"] == "rl" and not report["skipped"], report
  hbm = chips.CHIPS["h100"].hbm_bytes
  for prefix in ("train micro-step", "decode"):
    p = next(p for p in report["programs"] if p["name"].startswith(prefix))
    assert p["memory"]["temp"] > 0 and 0 < p["memory"]["total"] < hbm, p
    assert p["flops"] > 0 and p["bytes_accessed"] > 0 and 0 < p["mfu_bound"] <= 1, p
  assert all(p["mosaic_calls"] == 0 for p in report["programs"])
  assert {p["side"] for p in report["programs"]} == {"trainer", "server", "sync"}
  verdict = report["verdict"]
  assert verdict["fits"] and verdict["hbm"] == hbm, verdict
  assert verdict["notes"] and "compiled as blockwise" in verdict["notes"][0], verdict


def test_gpu_nodes_are_named_by_chip_and_count():
  one, two = chips.parse_node("h100"), chips.parse_node("H200x2")
  assert (one.name, one.chips, one.topology) == ("h100", 8, "1x1x8")
  assert (two.name, two.chips, two.topology, two.chip.name) == ("h200x2", 16, "1x2x8", "h200")
  for bad in ("h300", "v5p-8", "h100x0", "h100-8"):
    with pytest.raises(ValueError, match="expected one of \\['h100', 'h200'\\]"):
      chips.parse_node(bad)


@pytest.mark.parametrize("name", ["h100", "h200"])
def test_gpu_target_config_states_the_published_chip(name):
  """The deviceless compiler's description of the GPU (its scheduler plans in that memory) says
  what the chip table checks the plan against."""
  chip = chips.CHIPS[name]
  text = targets.gpu_target_config(chips.Node(chip))
  field = lambda key: float(re.search(rf"\n\s*{key}: (\d+)", text).group(1))  # noqa: E731
  assert field("device_memory_size") == chip.hbm_bytes
  assert field("memory_bandwidth") == chip.hbm_bandwidth
  assert field("core_count") == 132 and 'platform_name: "CUDA"' in text


# XLA:GPU's optimised HLO for a [128, 4096] x [4096, 512] bf16 dot inside a loop of 3 trips: the dot
# is a cuBLAS custom call returning (result, workspace)
GEMM_HLO = """HloModule m, is_scheduled=true

%body (p: (s32[], bf16[128,4096], bf16[4096,512])) -> (s32[], bf16[128,4096], bf16[4096,512]) {
  %p = (s32[], bf16[128,4096]{1,0}, bf16[4096,512]{1,0}) parameter(0)
  %a = bf16[128,4096]{1,0} get-tuple-element(%p), index=1
  %b = bf16[4096,512]{1,0} get-tuple-element(%p), index=2
  %cc = (bf16[128,512]{1,0}, s8[33554432]{0}) custom-call(%a, %b), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"alpha_real":1,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %t = (s32[], bf16[128,4096]{1,0}, bf16[4096,512]{1,0}) tuple(%i, %a, %b)
}

%cond (q: (s32[], bf16[128,4096], bf16[4096,512])) -> pred[] {
  %q = (s32[], bf16[128,4096]{1,0}, bf16[4096,512]{1,0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (x: bf16[128,4096], y: bf16[4096,512]) -> s32[] {
  %x = bf16[128,4096]{1,0} parameter(0)
  %y = bf16[4096,512]{1,0} parameter(1)
  %z = s32[] constant(0)
  %init = (s32[], bf16[128,4096]{1,0}, bf16[4096,512]{1,0}) tuple(%z, %x, %y)
  %w = (s32[], bf16[128,4096]{1,0}, bf16[4096,512]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %r = s32[] get-tuple-element(%w), index=0
}
"""  # noqa: E501


def test_hlo_cost_counts_cublas_gemms():
  """A cuBLAS GEMM counts as the dot it replaced (2 x M x N x K per trip); its bytes are operands
  and result, not cuBLAS's 32 MiB workspace."""
  cost = hlo_cost.hlo_text_cost(GEMM_HLO)
  assert cost.matmul_flops == 3 * 2 * 128 * 512 * 4096
  gemm_bytes = 2 * (128 * 4096 + 4096 * 512 + 128 * 512)
  assert gemm_bytes * 3 <= cost.bytes_accessed < gemm_bytes * 3 + 33554432


GATHER_HLO = """HloModule m

%fused (p0: bf16[1000,64], p1: s32[10,1]) -> bf16[10,64] {
  %p0 = bf16[1000,64]{1,0} parameter(0)
  %p1 = s32[10,1]{1,0} parameter(1)
  ROOT %g = bf16[10,64]{1,0} gather(%p0, %p1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,64}
}

ENTRY %main (pool: bf16[1000,64], idx: s32[10,1]) -> bf16[10,64] {
  %pool = bf16[1000,64]{1,0} parameter(0)
  %idx = s32[10,1]{1,0} parameter(1)
  ROOT %f = bf16[10,64]{1,0} fusion(%pool, %idx), kind=kLoop, calls=%fused
}
"""  # noqa: E501


def test_hlo_cost_counts_the_gathered_rows_not_the_pool():
  """A fusion that gathers pages from the paged KV pool (decode's attention, on XLA:GPU and
  XLA:TPU alike) reads the pages, not the pool: before, a full-size 8B decode of 4 steps counted
  23 TB per chip (the whole pool per layer and step) and its roofline 19 tokens/s per chip."""
  page = 10 * 64 * 2
  assert hlo_cost.hlo_text_cost(GATHER_HLO).bytes_accessed == page + page + 10 * 4


def _plan_error(*args: str, env: dict | None = None) -> str:
  return plan_error("--config=tests/loop/rl_tiny_config.py", *args, env=env)


def test_plan_gpu_mistakes_answer_in_one_line():
  """An unknown GPU node (answered before the compiler venv is looked for), both targets at once,
  and --gpu without the CUDA plugin's venv: `error: ...`, exit 2, no traceback."""
  no_venv = {"TMAX_JAX_CACHE": "/nonexistent-tmax-cache"}
  line = _plan_error("--gpu=h300", env=no_venv)
  assert line == (
    "error: --gpu: GPU node 'h300': expected one of ['h100', 'h200'] (a node of 8 GPUs), or "
    "nodes of them such as h100x2"
  ), line
  assert _plan_error("--gpu=h100", "--tpu=v5p-8") == (
    "error: --tpu and --gpu: compile for one target at a time"
  )
  line = _plan_error("--gpu=h200x2", env=no_venv)
  assert line.startswith("error: no GPU compiler venv"), line
  assert line.endswith("(run: python3 -m tmax_jax.aot.toolchain --gpu)"), line
