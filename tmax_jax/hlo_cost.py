"""FLOPs and bytes of a compiled XLA program, with loops counted as many times as they run.

XLA's `compiled.cost_analysis()` visits a `while` body once, whatever its trip count, so a model
with `scan`ned layers, a chunked head or blockwise attention reports a fraction of its real work
(a 4-layer scanned Qwen3 train step: 0.34x the model FLOPs; unrolled: 1.10x). This module walks the
optimised HLO text of the compiled module instead: matmul FLOPs (`dot`, `convolution`, and the
cuBLAS GEMM custom calls XLA:GPU turns dots into; a convolution counts only the window taps that
land on real input, as XLA:TPU writes a decode's batched attention as an lhs-dilated convolution
with one real tap per window) of every computation, multiplied along the call
graph by the `known_trip_count` XLA attaches to each while loop (conditional branches count as
their most expensive branch), plus an estimate of the bytes each top-level instruction reads and
writes (operands + result; fusion internals stay in registers/caches), multiplied the same way.

Only matmul FLOPs are counted: they are what "model FLOPs" (6 x matmul params x tokens +
attention) estimates, so `matmul_flops / model_flops` measures wasted matmul work (recomputation,
masked-out attention blocks, padding) independently of the machine.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any

import numpy as np

_COMP_HEADER = re.compile(r"^(ENTRY )?%([\w.\-]+) \((.*)\) -> .* \{$")
_INSTR = re.compile(r"^\s*(ROOT )?%([\w.\-]+) = (.+?) ([\w\-]+)\((.*)$")
_ARRAY = re.compile(
  r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f8e4m3fn|f8e5m2|bf16|f16|f32|"
  r"f64|c64|c128)\[([\d,]*)\]"
)
_PARAM = re.compile(r"([\w.\-]+): ((?:\([^)]*\))|(?:[\w]+\[[\d,]*\](?:\{[^}]*\})?))")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_GEMM = re.compile(r'"gemm_backend_config":\{.*?"lhs_contracting_dimensions":\[([^\]]*)\]')
_BYTES = {
  "pred": 1,
  "s4": 1,
  "s8": 1,
  "s16": 2,
  "s32": 4,
  "s64": 8,
  "u4": 1,
  "u8": 1,
  "u16": 2,
  "u32": 4,
  "u64": 8,
  "f8e4m3fn": 1,
  "f8e5m2": 1,
  "bf16": 2,
  "f16": 2,
  "f32": 4,
  "f64": 8,
  "c64": 8,
  "c128": 16,
}
_FREE = {
  "parameter",
  "constant",
  "bitcast",
  "tuple",
  "get-tuple-element",
  "after-all",
  "partition-id",
  "replica-id",
  "iota",
}


@dataclasses.dataclass(frozen=True)
class Cost:
  matmul_flops: float
  bytes_accessed: float

  def __add__(self, other: Cost) -> Cost:
    return Cost(self.matmul_flops + other.matmul_flops, self.bytes_accessed + other.bytes_accessed)

  def __mul__(self, n: float) -> Cost:
    return Cost(self.matmul_flops * n, self.bytes_accessed * n)


_ZERO = Cost(0.0, 0.0)


def _shapes(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
  return [
    (dt, tuple(int(d) for d in dims.split(",") if d)) for dt, dims in _ARRAY.findall(type_text)
  ]


def type_bytes(type_text: str) -> int:
  """Bytes of an HLO result type (`f32[8,256]{1,0}`, or a tuple of them)."""
  return sum(_BYTES[dt] * math.prod(dims) for dt, dims in _shapes(type_text))


def _operand_names(rest: str) -> list[str]:
  """Names of the operands in 'a, %b, ...), attrs' (text after the opening parenthesis)."""
  depth, end = 1, 0
  for end, ch in enumerate(rest):  # noqa: B007  (end is read after the loop)
    depth += ch == "("
    depth -= ch == ")"
    if depth == 0:
      break
  return re.findall(r"%([\w.\-]+)", rest[:end])


def _dims_attr(rest: str, name: str) -> tuple[int, ...]:
  m = re.search(name + r"=\{([\d,]*)\}", rest)
  return tuple(int(d) for d in m.group(1).split(",") if d) if m else ()


@dataclasses.dataclass
class _Instr:
  name: str
  type_text: str
  op: str
  rest: str
  is_root: bool


def _parse(hlo_text: str) -> tuple[dict[str, list[_Instr]], dict[str, dict[str, str]], str]:
  """-> (computation -> instructions, computation -> {value name: type text}, entry name)."""
  comps: dict[str, list[_Instr]] = {}
  types: dict[str, dict[str, str]] = {}
  entry, current = "", None
  for line in hlo_text.splitlines():
    header = _COMP_HEADER.match(line)
    if header:
      current = header.group(2)
      entry = current if header.group(1) else entry
      comps[current], types[current] = [], dict(_PARAM.findall(header.group(3)))
      continue
    if current is None:
      continue
    if line.startswith("}"):
      current = None
      continue
    m = _INSTR.match(line)
    if m:
      ins = _Instr(m.group(2), m.group(3), m.group(4), m.group(5), bool(m.group(1)))
      comps[current].append(ins)
      types[current][ins.name] = ins.type_text
  if not entry:
    raise ValueError("hlo_cost: no ENTRY computation in the HLO text")
  return comps, types, entry


def _dot_flops(ins: _Instr, types: dict[str, str]) -> float:
  out = _shapes(ins.type_text)[0][1]
  lhs = _shapes(types[_operand_names(ins.rest)[0]])[0][1]
  contracting = math.prod(lhs[d] for d in _dims_attr(ins.rest, "lhs_contracting_dims"))
  return 2.0 * math.prod(out) * contracting


def _gemm_contracting(ins: _Instr) -> tuple[int, ...] | None:
  """The lhs contracting dims of a cuBLAS GEMM custom call (XLA:GPU's rewritten `dot`: its result
  and a scratch workspace, the dot's dimensions in its backend config), else None."""
  m = _GEMM.search(ins.rest) if ins.op == "custom-call" else None
  return tuple(int(d) for d in re.findall(r"\d+", m.group(1))) if m else None


def _gemm_flops(ins: _Instr, types: dict[str, str], contracting: tuple[int, ...]) -> float:
  out = _shapes(ins.type_text)[0][1]
  lhs = _shapes(types[_operand_names(ins.rest)[0]])[0][1]
  return 2.0 * math.prod(out) * math.prod(lhs[d] for d in contracting)


def _window(rest: str, rank: int) -> list[dict[str, int]]:
  """Per spatial dimension of a convolution's `window={size=8x2 stride=7x1 pad=0_0x1_1
  lhs_dilate=8x2 rhs_dilate=1x1}` attribute: size, stride, low padding and the two dilations
  (absent fields take XLA's defaults; rhs_reversal does not change which taps are real)."""
  m = re.search(r"window=\{([^}]*)\}", rest)
  fields = dict(f.split("=", 1) for f in m.group(1).split()) if m else {}

  def ints(key: str, default: int) -> list[int]:
    text = fields.get(key)
    return [int(v) for v in text.split("x")] if text else [default] * rank

  pads = [int(p.split("_")[0]) for p in fields["pad"].split("x")] if "pad" in fields else [0] * rank
  return [
    {"size": k, "stride": s, "pad": p, "lhs_dilate": ld, "rhs_dilate": rd}
    for k, s, p, ld, rd in zip(
      ints("size", 1), ints("stride", 1), pads, ints("lhs_dilate", 1), ints("rhs_dilate", 1),
      strict=True,
    )
  ]  # fmt: skip


def _real_taps(window: dict[str, int], in_size: int, out_size: int) -> int:
  """(output position, window tap) pairs of one spatial dimension whose tap lands on a real input
  element: not in the padding, not in a hole of the lhs dilation. XLA:TPU writes a batched
  q.K^T as a convolution whose lhs dilation leaves one real tap in each 8-tap window."""
  o = np.arange(out_size)[:, None]  # [O, 1]
  k = np.arange(window["size"])[None, :]  # [1, K]
  pos = o * window["stride"] + k * window["rhs_dilate"] - window["pad"]  # [O, K] in dilated input
  span = (in_size - 1) * window["lhs_dilate"]  # its last real element
  return int(np.sum((pos >= 0) & (pos <= span) & (pos % window["lhs_dilate"] == 0)))


def _conv_flops(ins: _Instr, types: dict[str, str]) -> float:
  """2 x multiply-adds as XLA defines a convolution: each output element (batch, feature,
  position) sums its window's real taps x the rhs input features (the input features of its
  feature group; all of them under batch_group_count, which splits the batch instead)."""
  out = _shapes(ins.type_text)[0][1]
  lhs_name, rhs_name = _operand_names(ins.rest)[:2]
  lhs, rhs = _shapes(types[lhs_name])[0][1], _shapes(types[rhs_name])[0][1]
  lhs_labels, rhs_labels, out_labels = re.search(
    r"dim_labels=(\w+)_(\w+)->(\w+)", ins.rest
  ).groups()
  spatial = len(out_labels) - 2
  taps = 1
  for d, window in enumerate(_window(ins.rest, spatial)):
    in_size, out_size = lhs[lhs_labels.index(str(d))], out[out_labels.index(str(d))]
    taps *= _real_taps(window, in_size, out_size)
  outer = out[out_labels.index("b")] * out[out_labels.index("f")]
  return 2.0 * outer * taps * rhs[rhs_labels.index("i")]


def _condition_trip(cond: list[_Instr]) -> int | None:
  """The trip count a loop condition states as `counter < constant(N)` (how scan and fori_loop
  lower; the counter starts at 0 and steps by 1): XLA:TPU's optimised HLO carries no
  known_trip_count attribute."""
  root = next((i for i in cond if i.is_root), None)
  if root is None or root.op != "compare" or "direction=LT" not in root.rest:
    return None
  by_name = {i.name: i for i in cond}
  bound = by_name.get(_operand_names(root.rest)[1])
  m = re.match(r"(\d+)\)", bound.rest) if bound is not None and bound.op == "constant" else None
  return int(m.group(1)) if m else None


def _called(ins: _Instr, comps: dict | None = None) -> tuple[list[str], float, bool]:
  """-> (called computations, multiplier, whether only the most expensive one runs)."""
  if ins.op == "while":
    body = re.search(r"body=%([\w.\-]+)", ins.rest).group(1)
    cond = re.search(r"condition=%([\w.\-]+)", ins.rest).group(1)
    trip = _TRIP.search(ins.rest)
    n = int(trip.group(1)) if trip else _condition_trip((comps or {}).get(cond, []))
    if n is None:
      raise ValueError(f"hlo_cost: while loop %{ins.name} has no known trip count")
    return [body, cond], float(n), False
  if ins.op == "conditional":
    branches = re.search(r"branch_computations=\{([^}]*)\}", ins.rest)
    names = (
      re.findall(r"%([\w.\-]+)", branches.group(1))
      if branches
      else re.findall(r"(?:true|false)_computation=%([\w.\-]+)", ins.rest)
    )
    return names, 1.0, True
  names = re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", ins.rest)
  return names, 1.0, False


def _sliced_bytes(fused: list[_Instr], ftypes: dict[str, str]) -> tuple[dict[int, int], int]:
  """For a fused computation: {parameter index: bytes really touched} for parameters used only
  through dynamic-slice or gather (the paged KV pool's pages) / as the in-place target of a
  dynamic-update-slice, and the bytes the fusion writes when its root updates a parameter in place
  (-1: its whole result)."""
  params = {i.name: int(re.match(r"(\d+)", i.rest).group(1)) for i in fused if i.op == "parameter"}
  touched: dict[int, int] = {}
  for name, index in params.items():
    users = [i for i in fused if name in _operand_names(i.rest)]
    if users and all(
      u.op in ("dynamic-slice", "gather", "dynamic-update-slice")
      and _operand_names(u.rest)[0] == name
      for u in users
    ):
      touched[index] = sum(
        type_bytes(ftypes[_operand_names(u.rest)[1]])
        if u.op == "dynamic-update-slice"
        else type_bytes(u.type_text)
        for u in users
      )
  root = next((i for i in fused if i.is_root), None)
  by_name = {i.name: i for i in fused}
  while root is not None and root.op == "bitcast":
    root = by_name.get(_operand_names(root.rest)[0])
  written = -1
  if root is not None and root.op == "dynamic-update-slice":
    written = type_bytes(ftypes[_operand_names(root.rest)[1]])
  return touched, written


def _moved_bytes(ins: _Instr, ctypes: dict[str, str], comps, types) -> int:
  """Bytes one top-level instruction reads and writes (slices of loop-carried stacks count as the
  slice, as in XLA's own cost analysis)."""
  operands = _operand_names(ins.rest)
  if ins.op == "copy-start":  # an async copy reads its operand and writes it once: the pair's
    return 2 * type_bytes(ctypes.get(operands[0], ""))  # traffic, not its (src, dst, ctx) tuple
  if ins.op == "copy-done":
    return 0
  if ins.op == "dynamic-slice":
    return 2 * type_bytes(ins.type_text)
  if ins.op == "dynamic-update-slice":
    return 2 * type_bytes(ctypes.get(operands[1], ""))
  touched, written = {}, -1
  if ins.op == "fusion":
    fused = re.search(r"calls=%([\w.\-]+)", ins.rest).group(1)
    touched, written = _sliced_bytes(comps[fused], types[fused])
  out = type_bytes(ins.type_text) if written < 0 else written
  if _gemm_contracting(ins) is not None:  # the result only, not cuBLAS's workspace
    dt, dims = _shapes(ins.type_text)[0]
    out = _BYTES[dt] * math.prod(dims)
  return out + sum(touched.get(k, type_bytes(ctypes.get(o, ""))) for k, o in enumerate(operands))


def _instr_flops(ins: _Instr, types: dict[str, str], flops_of, comps) -> float:
  """Matmul FLOPs of one execution of `ins`, including the computations it calls."""
  if ins.op == "dot":
    return _dot_flops(ins, types)
  if ins.op == "convolution":
    return _conv_flops(ins, types)
  contracting = _gemm_contracting(ins)
  if contracting is not None:
    return _gemm_flops(ins, types, contracting)
  called, mult, pick_max = _called(ins, comps)
  sub = [flops_of(c) for c in called if c in comps]
  if not sub:
    return 0.0
  return mult * (max(sub) if pick_max else sum(sub))


def _cost(hlo_text: str) -> Cost:
  comps, types, entry = _parse(hlo_text)

  @functools.cache
  def flops_of(comp: str) -> float:
    """Matmul FLOPs of one execution of `comp`, including what it calls."""
    return sum(_instr_flops(ins, types[comp], flops_of, comps) for ins in comps[comp])

  @functools.cache
  def cost_of(comp: str) -> Cost:
    """Cost of one execution of a control-level computation (entry, loop body, branch)."""
    total = _ZERO
    for ins in comps[comp]:
      if ins.op in ("while", "conditional", "call"):
        called, mult, pick_max = _called(ins, comps)
        sub = [cost_of(c) for c in called if c in comps]
        if sub:
          total += (
            max(sub, key=lambda c: c.matmul_flops)
            if pick_max
            else functools.reduce(Cost.__add__, sub)
          ) * mult
        continue
      if ins.op in _FREE:
        continue
      moved = _moved_bytes(ins, types[comp], comps, types)
      total += Cost(_instr_flops(ins, types[comp], flops_of, comps), float(moved))
    return total

  return cost_of(entry)


def compiled_cost(compiled: Any) -> Cost:
  """Cost of a `jax.jit(f).lower(...).compile()` object (its optimised HLO module)."""
  return _cost(compiled.as_text())


def hlo_text_cost(hlo_text: str) -> Cost:
  """Cost from optimised HLO text (what `compiled.as_text()` returns)."""
  return _cost(hlo_text)
