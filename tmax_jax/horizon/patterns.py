"""Core behaviour patterns of a trajectory: Explore, Diagnose, Build, Verify, Coordinate.

Annotation works on the stored token trajectory (tokens + loss_mask), so any JSONL record can be
(re)annotated: generated runs (loss 1) are the agent's turns, parsed with the harness's own
parser; the observation run after each is the tool output, with the `(exit_code=N)` line the
harness appends. Submitting is not a tool call. Each tool call gets ONE label by these rules, in
order:

  Diagnose    the previous tool call failed (non-zero exit, or error text such as Traceback,
              "No such file", "command not found", FAIL in its output) and this call inspects or
              re-checks (it would be Explore or Verify) instead of changing anything
  Coordinate  process, service or job orchestration: background `&`, nohup/setsid/disown,
              kill/wait/jobs, systemctl/service, tmux/screen, crontab, xargs -P/parallel, flock
  Verify      checks results: test runners (pytest, unittest, make test/check, ctest), diff/cmp,
              checksum verification (-c), `test -f`/`[ -e ... ]`, bash -n/py_compile/shellcheck,
              probes of a local service (curl, nc -z), or reading back a file an earlier Build
              call of the same instruction wrote (a chain's next generation reading its parent's
              results is exploring)
  Build       changes state: redirections into files, heredocs, tee, sed -i, mv/cp/mkdir/rm/ln,
              chmod/chown/touch/patch, git add/commit/apply/checkout/merge, compilers and build
              tools, package builds, running a script (python3 x.py, bash x.sh), SQL that writes
  Explore     everything else (read-only inspection: ls, cat, find, grep, head, git log, ...)

A pattern is a maximal run of consecutive tool calls with the same label (five reads in a row are
one Explore); a trajectory's count per kind is the number of such runs, and its total is their sum
(the paper reports 8.6 patterns per trajectory across the five kinds).
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Sequence

from tmax_jax import formats
from tmax_jax.agents import EpisodeConfig, harnesses

KINDS = ("Explore", "Diagnose", "Build", "Verify", "Coordinate")

_EXIT = re.compile(r"\(exit_code=(-?\d+)\)")
_ERROR = re.compile(
  r"Traceback|No such file|command not found|[Ee]rror:|\bFAIL|[Ff]ailed|"
  r"Permission denied|Segmentation fault|[Ee]xception|cannot "
)
_COORDINATE = re.compile(
  r"&\s*($|\n|;)|\b(nohup|setsid|disown|kill|pkill|wait|jobs|systemctl|"
  r"service|tmux|screen|crontab|parallel|flock)\b|xargs\s+-P"
)
_VERIFY = re.compile(
  r"\b(pytest|unittest|ctest|diff|cmp|shellcheck|py_compile|curl|nc -z)\b|"
  r"\bmake\s+(test|check)\b|sum\s+-c\b|\btest\s+-[a-z]\b|\[\[?\s+-[a-z]\s|"
  r"\bbash\s+-n\b"
)
_BUILD = re.compile(
  r"(?<![0-9&])>>?(?!&)|<<|\b(tee|mv|cp|mkdir|rm|rmdir|ln|chmod|chown|touch|"
  r"patch|gcc|g\+\+|cc|clang|make|cmake|cargo|rustc|javac|tar|unzip|gzip|zip|"
  r"install)\b|\bsed\s+-i|\bgit\s+(add|commit|apply|checkout|merge|init|mv|rm)\b|"
  r"\b(python3?|bash|sh|node|perl|ruby)\s+(-\s|[\w./-]+\.(py|sh|js|pl|rb))|"
  r"\b(insert|update|delete|create|drop|alter)\s",
  re.I,
)
_PATHS = re.compile(r"[\w./-]*[\w-]+\.[\w]+|[\w./-]+/[\w.-]+")


@dataclasses.dataclass(frozen=True)
class Step:
  """One tool call: the command, its output and exit code (None when the output shows none)."""

  command: str
  output: str
  exit_code: int | None
  new_instruction: bool = False  # the first call after a submit (the next generation of a chain)

  @property
  def failed(self) -> bool:
    return (self.exit_code not in (0, None)) or bool(_ERROR.search(self.output))


def _runs(tokens: Sequence[int], loss_mask: Sequence[int]) -> list[tuple[int, list[int]]]:
  out: list[tuple[int, list[int]]] = []
  for t, m in zip(tokens, loss_mask, strict=True):
    if out and out[-1][0] == int(m):
      out[-1][1].append(int(t))
    else:
      out.append((int(m), [int(t)]))
  return out


def _command(text: str, cfg: EpisodeConfig) -> str | None:
  """The reply's command as the harness parses it (Terminus: its keystrokes joined)."""
  try:
    if cfg.harness == "terminus":
      return "".join(c.keystrokes for c in formats.parse_terminus(text).commands) or None
    return harnesses.get(cfg.harness).parse_command(text, cfg)
  except formats.FormatError:
    return None


def steps(
  tokens: Sequence[int],
  loss_mask: Sequence[int],
  tokenizer,
  harness: str = "bash_tool",
  family: str = "qwen3",
) -> tuple[list[Step], int]:
  """-> (tool calls in order, number of assistant turns) of a stored trajectory."""
  cfg = EpisodeConfig(harness=harness, family=family)  # validates both names
  runs, out, turns, submitted = _runs(tokens, loss_mask), [], 0, False
  eos = tokenizer.eos_token
  for i, (mask, ids) in enumerate(runs):
    if mask != 1:
      continue
    turns += 1
    command = _command(tokenizer.decode(ids, skip_special_tokens=False).removesuffix(eos), cfg)
    if command is None or formats.is_submit_command(command):
      submitted = submitted or command is not None
      continue
    obs = tokenizer.decode(runs[i + 1][1], skip_special_tokens=False) if i + 1 < len(runs) else ""
    codes = _EXIT.findall(obs)
    out.append(Step(command, obs, int(codes[-1]) if codes else None, submitted))
    submitted = False
  return out, turns


def label(calls: Sequence[Step]) -> list[str]:
  """One of KINDS per tool call (rules in the module docstring)."""
  labels, written = [], set()
  for i, step in enumerate(calls):
    cmd = step.command
    if step.new_instruction:  # a new generation starts from what the last one left: not Verify
      written.clear()
    reads_back = any(p in written for p in _PATHS.findall(cmd))
    if _COORDINATE.search(cmd):
      kind = "Coordinate"
    elif _VERIFY.search(cmd) or (reads_back and not _BUILD.search(cmd)):
      kind = "Verify"
    elif _BUILD.search(cmd):
      kind = "Build"
    else:
      kind = "Explore"
    if i and calls[i - 1].failed and kind in ("Explore", "Verify"):
      kind = "Diagnose"
    if kind == "Build":
      written.update(_PATHS.findall(cmd))
    labels.append(kind)
  return labels


def count(labels: Sequence[str]) -> dict[str, int]:
  """Pattern instances per kind (maximal runs of one label)."""
  runs = [k for i, k in enumerate(labels) if i == 0 or labels[i - 1] != k]
  c = collections.Counter(runs)
  return {k: c.get(k, 0) for k in KINDS}


def annotate(
  tokens: Sequence[int],
  loss_mask: Sequence[int],
  tokenizer,
  harness: str = "bash_tool",
  family: str = "qwen3",
) -> dict:
  """{"turns", "tool_calls", "labels", "patterns": {kind: n}, "pattern_total"}."""
  calls, turns = steps(tokens, loss_mask, tokenizer, harness, family)
  labels = label(calls)
  patterns = count(labels)
  return {
    "turns": turns,
    "tool_calls": len(calls),
    "labels": labels,
    "patterns": patterns,
    "pattern_total": sum(patterns.values()),
  }
