"""Hidden-test writers for the five verifier kinds of the TMAX recipe.

Each helper returns the files of a task's tests/ directory ({relative path: bytes}):
  test.sh     `python3 /tests/checker.py /tests/spec.json` (offline, python3 standard library only)
  checker.py  the shared checker (tmax_jax/tasks/verifiers/checker.py, copied verbatim)
  spec.json   the kind, the hidden ground truth and the difficulty knob
The checker writes /logs/verifier/reward.json {"reward", "passed", "total"} and reward.txt (1 or 0).
Relative paths and commands in a spec are taken relative to `workdir` (the task's, /workspace by
default). Difficulty knobs: exact_text `strictness`; metric_threshold `threshold`;
adversarial_corpus `sample` (corpus size) and `min_pass_rate`; fuzz_equivalence `n` and `generator`
(the input distribution); multi_protocol the `probes` (number of protocols / conditions).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from tmax_jax.tasks.vocabulary import VERIFIER_KINDS as KINDS  # the shared task vocabulary

CHECKER_SOURCE = pathlib.Path(__file__).with_name("checker.py")
PROTOCOLS = ("http", "tcp", "udp", "smtp")
METRICS = ("accuracy", "rmse", "mae", "speedup", "command", "python")
INPUT_TYPES = ("ints", "text", "lines", "choice", "python")

TEST_SH = """#!/bin/bash
# Hidden verifier ({kind}) written by tmax_jax.tasks.verifiers; runs offline with python3 only.
mkdir -p /logs/verifier
# -I: isolated mode, so nothing the agent planted (user site-packages, PYTHON* vars) loads here.
python3 -I /tests/checker.py /tests/spec.json
"""


def bundle(spec: Mapping[str, Any], extra: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
  """spec -> tests/ files. `extra` adds data files next to the checker (e.g. a reference binary)."""
  if spec.get("kind") not in KINDS:
    raise ValueError(f"spec.kind: expected one of {KINDS}, got {spec.get('kind')!r}")
  files = {
    "test.sh": TEST_SH.format(kind=spec["kind"]).encode(),
    "checker.py": CHECKER_SOURCE.read_bytes(),
    "spec.json": json.dumps(spec, indent=1, sort_keys=True).encode(),
  }
  for name, data in (extra or {}).items():
    if name in files:
      raise ValueError(f"extra: {name!r} would overwrite a generated file")
    files[name] = data
  return files


def _require(cond: bool, field: str, expected: str, got: Any) -> None:
  if not cond:
    raise ValueError(f"{field}: expected {expected}, got {got!r}")


def exact_text(
  targets: Sequence[Mapping[str, Any]],
  *,
  strictness: int = 1,
  workdir: str = "/workspace",
  extra: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
  """targets: [{"path": file, "expected": text}] or
  [{"command": cmd, "stdin": s, "expected": text}].
  strictness: 0 whitespace-insensitive, 1 trailing whitespace ignored, 2 byte-exact."""
  _require(strictness in (0, 1, 2), "strictness", "0, 1 or 2", strictness)
  _require(len(targets) > 0, "targets", "at least one target", targets)
  for i, t in enumerate(targets):
    _require(
      ("path" in t) != ("command" in t), f"targets[{i}]", "exactly one of 'path' or 'command'", t
    )
    _require(
      isinstance(t.get("expected"), str), f"targets[{i}].expected", "a string", t.get("expected")
    )
  spec = {
    "kind": "exact_text",
    "workdir": workdir,
    "strictness": strictness,
    "targets": [dict(t) for t in targets],
  }
  return bundle(spec, extra)


def metric_threshold(
  metric: str,
  threshold: float,
  *,
  higher_is_better: bool = True,
  workdir: str = "/workspace",
  extra: Mapping[str, bytes] | None = None,
  **params: Any,
) -> dict[str, bytes]:
  """metric: accuracy/rmse/mae (params predictions=path, reference=list), speedup (baseline=cmd,
  candidate=cmd, repeats, same_output), command (command printing the value last), python
  (code defining metric(workdir) -> float). The knob is `threshold`."""
  _require(metric in METRICS, "metric", f"one of {METRICS}", metric)
  _require(
    isinstance(threshold, (int, float)) and not isinstance(threshold, bool),
    "threshold",
    "a number",
    threshold,
  )
  need = {
    "accuracy": ("predictions", "reference"),
    "rmse": ("predictions", "reference"),
    "mae": ("predictions", "reference"),
    "speedup": ("baseline", "candidate"),
    "command": ("command",),
    "python": ("code",),
  }[metric]
  for key in need:
    _require(key in params, key, f"a value (needed by metric {metric!r})", None)
  spec = {
    "kind": "metric_threshold",
    "workdir": workdir,
    "metric": metric,
    "threshold": float(threshold),
    "higher_is_better": higher_is_better,
    **params,
  }
  return bundle(spec, extra)


def adversarial_corpus(
  command: str,
  benign: Sequence[str],
  malicious: Sequence[str],
  *,
  sample: int | None = None,
  min_pass_rate: float = 1.0,
  seed: int = 0,
  verdict: str = "exit_code",
  workdir: str = "/workspace",
  timeout_s: float = 10.0,
  extra: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
  """The agent's `command` judges each item (given on stdin, or as a file where `{path}` appears):
  exit 0 = accept (verdict="exit_code") or first word ALLOW/BLOCK (verdict="stdout"). Every
  malicious item must be rejected and every benign one accepted, on a `sample` of the corpus."""
  _require(
    bool(benign) and bool(malicious),
    "benign/malicious",
    "non-empty corpora",
    (len(benign), len(malicious)),
  )
  _require(0.0 < min_pass_rate <= 1.0, "min_pass_rate", "a rate in (0, 1]", min_pass_rate)
  _require(verdict in ("exit_code", "stdout"), "verdict", "'exit_code' or 'stdout'", verdict)
  _require(sample is None or sample > 0, "sample", "a positive corpus size or None", sample)
  spec = {
    "kind": "adversarial_corpus",
    "workdir": workdir,
    "command": command,
    "benign": list(benign),
    "malicious": list(malicious),
    "sample": sample,
    "min_pass_rate": min_pass_rate,
    "seed": seed,
    "verdict": verdict,
    "timeout_s": timeout_s,
  }
  return bundle(spec, extra)


def fuzz_equivalence(
  command: str,
  generator: Mapping[str, Any],
  *,
  n: int = 100,
  seed: int = 0,
  reference_code: str | None = None,
  reference_command: str | None = None,
  edge_cases: Sequence[str] = (),
  workdir: str = "/workspace",
  timeout_s: float = 10.0,
  extra: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
  """The agent's `command` (input on stdin) must print exactly what the hidden reference prints on
  `n` seeded random inputs from `generator` plus `edge_cases`. The reference is python source
  defining reference(data: str) -> str, or a hidden command (e.g. "python3 /tests/ref.py")."""
  _require(n >= 1, "n", "at least 1 input", n)
  _require(
    (reference_code is None) != (reference_command is None),
    "reference_code/reference_command",
    "exactly one of them",
    (reference_code, reference_command),
  )
  _require(
    generator.get("type") in INPUT_TYPES,
    "generator.type",
    f"one of {INPUT_TYPES}",
    generator.get("type"),
  )
  spec = {
    "kind": "fuzz_equivalence",
    "workdir": workdir,
    "command": command,
    "generator": dict(generator),
    "n": n,
    "seed": seed,
    "edge_cases": list(edge_cases),
    "timeout_s": timeout_s,
  }
  if reference_code is not None:
    spec["reference_code"] = reference_code
  else:
    spec["reference_command"] = reference_command
  return bundle(spec, extra)


def multi_protocol(
  probes: Sequence[Mapping[str, Any]],
  *,
  start_command: str | None = None,
  startup_timeout_s: float = 10.0,
  workdir: str = "/workspace",
  extra: Mapping[str, bytes] | None = None,
) -> dict[str, bytes]:
  """Probes a service inside the sandbox on 127.0.0.1. Probe kinds:
  http {port, method, path, headers, body, expect_status, expect_json | expect_body, match};
  tcp {port, send, expect, match: exact|strip|contains|regex, shutdown_write};
  udp {port, send, expect, match}; smtp {port, from, to, data}; any probe may add expect_file.
  The agent leaves the service running, or `start_command` (e.g. "python3 server.py") is started
  by the verifier itself and killed afterwards."""
  _require(len(probes) > 0, "probes", "at least one probe", probes)
  for i, p in enumerate(probes):
    _require(
      p.get("protocol") in PROTOCOLS,
      f"probes[{i}].protocol",
      f"one of {PROTOCOLS}",
      p.get("protocol"),
    )
    _require(
      isinstance(p.get("port"), int) and 0 < p["port"] < 65536,
      f"probes[{i}].port",
      "a port number",
      p.get("port"),
    )
  spec = {
    "kind": "multi_protocol",
    "workdir": workdir,
    "probes": [dict(p) for p in probes],
    "start_command": start_command,
    "startup_timeout_s": startup_timeout_s,
  }
  return bundle(spec, extra)


__all__ = [
  "KINDS",
  "bundle",
  "exact_text",
  "metric_threshold",
  "adversarial_corpus",
  "fuzz_equivalence",
  "multi_protocol",
  "knobs",  # public module: each kind's difficulty knob, read and moved (generator, pipeline)
]
