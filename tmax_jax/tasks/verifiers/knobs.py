"""The difficulty knob of each verifier kind, read and moved on a task's spec.json.

One knob per kind (recipe.md): exact_text `strictness` (0 whitespace-insensitive .. 2 byte-exact);
metric_threshold `threshold` (towards the metric's best value is harder); adversarial_corpus
`sample` (how many corpus items are checked; None = all); fuzz_equivalence `n` (random inputs);
multi_protocol the `probes` (a probe can be dropped to make it easier, none can be invented).
`move(spec, "harder" | "easier")` returns the moved spec, or None when the knob is at its limit.

An instruction may state a knob's value as a placeholder (`{{threshold}}`), filled in by
`render` whenever the spec changes, so the text never disagrees with the hidden tests. A
threshold written literally into the instruction locks the knob (`locked`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

DIRECTIONS = ("harder", "easier")
KNOB = {
  "exact_text": "strictness",
  "metric_threshold": "threshold",
  "adversarial_corpus": "sample",
  "fuzz_equivalence": "n",
  "multi_protocol": "probes",
}
PLACEHOLDERS = {  # kind -> the spec values an instruction may name as {{placeholder}}
  "exact_text": (),
  "metric_threshold": ("threshold",),
  "adversarial_corpus": ("sample", "min_pass_rate"),
  "fuzz_equivalence": ("n",),
  "multi_protocol": (),
}
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]+)\s*\}\}")
BOUNDED_METRICS = ("accuracy",)  # metrics whose best value is 1.0
MAX_FUZZ_N = 10_000


def _number(value: Any) -> str:
  if isinstance(value, float):
    return f"{value:.4g}"
  return str(value)


def placeholders(template: str) -> list[str]:
  return _PLACEHOLDER.findall(template)


def check_placeholders(template: str, kind: str) -> None:
  """Raises ValueError naming a placeholder the kind's spec cannot fill."""
  allowed = PLACEHOLDERS[kind]
  for name in placeholders(template):
    if name not in allowed:
      raise ValueError(
        f"placeholder {{{{{name}}}}}: the {kind} verifier fills only "
        f"{[f'{{{{{a}}}}}' for a in allowed] or 'none'}"
      )


def _value(spec: Mapping[str, Any], name: str) -> Any:
  if name == "sample" and spec.get("sample") is None:
    return len(spec["benign"]) + len(spec["malicious"])
  return spec[name]


def render(template: str, spec: Mapping[str, Any]) -> str:
  """The instruction with every {{placeholder}} replaced by the spec's current value."""
  return _PLACEHOLDER.sub(lambda m: _number(_value(spec, m.group(1))), template)


def setting(spec: Mapping[str, Any]) -> str:
  """The knob's current setting, e.g. "metric_threshold:threshold=0.9"."""
  kind = spec["kind"]
  value = len(spec["probes"]) if kind == "multi_protocol" else _value(spec, KNOB[kind])
  return f"{kind}:{KNOB[kind]}={_number(value)}"


def locked(spec: Mapping[str, Any], template: str) -> bool:
  """A threshold the instruction states literally (not as {{threshold}}) cannot move."""
  if spec["kind"] != "metric_threshold" or "threshold" in placeholders(template):
    return False
  thr = spec["threshold"]
  literal = {_number(thr), f"{thr:g}", str(thr)}
  if float(thr) == int(thr):
    literal.add(str(int(thr)))
  return any(re.search(rf"(?<![\d.]){re.escape(s)}(?![\d])", template) for s in literal)


def _threshold(spec: dict, harder: bool) -> dict | None:
  thr, up = float(spec["threshold"]), spec.get("higher_is_better", True)
  if spec["metric"] in BOUNDED_METRICS:  # halve / double the distance to a perfect score
    best = 1.0 if up else 0.0
    gap = abs(best - thr) / 2 if harder == up else abs(best - thr) * 2
    new = best - gap if up else best + gap
    new = min(1.0, max(0.0, new))
  else:
    new = thr * 1.25 if harder == up else thr / 1.25
  new = float(f"{new:.4g}")
  if new == thr or (spec["metric"] in BOUNDED_METRICS and harder and abs(new - thr) < 1e-3):
    return None
  return {**spec, "threshold": new}


def _sample(spec: dict, harder: bool) -> dict | None:
  total = len(spec["benign"]) + len(spec["malicious"])
  current = spec.get("sample") or total
  new = min(total, current * 2) if harder else max(1, current // 2)
  if new == current:
    return None
  return {**spec, "sample": None if new >= total else new}


def move(spec: Mapping[str, Any], direction: str, template: str = "") -> dict | None:
  """`spec` with its knob one step `direction` (harder/easier); None at the limit or locked."""
  if direction not in DIRECTIONS:
    raise ValueError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
  spec, harder = copy.deepcopy(dict(spec)), direction == "harder"
  kind = spec["kind"]
  if kind == "exact_text":
    new = spec["strictness"] + (1 if harder else -1)
    return {**spec, "strictness": new} if 0 <= new <= 2 else None
  if kind == "metric_threshold":
    return None if locked(spec, template) else _threshold(spec, harder)
  if kind == "adversarial_corpus":
    return _sample(spec, harder)
  if kind == "fuzz_equivalence":
    n = spec["n"]
    new = min(MAX_FUZZ_N, n * 4) if harder else max(1, n // 4)
    return {**spec, "n": new} if new != n else None
  if kind == "multi_protocol":
    if harder or len(spec["probes"]) <= 1:
      return None  # no probe can be invented; an easier service check drops the last one
    return {**spec, "probes": spec["probes"][:-1]}
  raise ValueError(f"spec.kind: no knob for {kind!r}")
