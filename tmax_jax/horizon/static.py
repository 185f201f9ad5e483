"""Static audit (c): the oracle's changes compared with the environment it started from.

Inputs are two snapshots of the workdir taken in the same sandbox right before and right after the
oracle ran (`SNAPSHOT_PY` runs inside the sandbox: sha256, size, mtime and, for text files up to
`StaticConfig.max_text_bytes`, the content). The rules, each a named finding with evidence:

- `rewrite_same_content`: the oracle wrote a file (its mtime changed) and left it with the bytes
  it already had: the output the task asks for was already in the environment.
- `function_exists`: a Python function the oracle writes or changes (its lines intersect the
  oracle's changed region, or its file is new) already has a non-trivial body in the environment
  (same qualified name, same file or any other), and the oracle's version differs from it in at most
  `max_function_edit_lines` lines: the function was implemented already; only a constant (or
  nothing) was left to change. Trivial bodies: pass, `...`, a docstring, `raise
  NotImplementedError`, a single `return <constant>`.
- `line_overlap`: for other code files (`CODE_SUFFIXES` or a non-Python shebang), at least
  `max_line_overlap` of the non-trivial lines the oracle adds already exist in the environment's
  code (evidence names the files they come from).
Data outputs are not line-compared: an import, a sort or a copy legitimately reproduces input lines.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import difflib
import posixpath
import re
from collections.abc import Mapping

SNAPSHOT_PY = r"""
import hashlib, json, os, sys
root, out, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
skip = {".git", "__pycache__", ".pytest_cache"}
files = {}
for d, dirs, names in os.walk(root):
  dirs[:] = sorted(x for x in dirs if x not in skip)
  for n in sorted(names):
    p = os.path.join(d, n)
    rel = os.path.relpath(p, root)
    if os.path.islink(p):
      files[rel] = {"link": os.readlink(p)}
      continue
    if not os.path.isfile(p):
      continue
    st, h, head = os.stat(p), hashlib.sha256(), b""
    with open(p, "rb") as f:
      for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
        if len(head) <= limit:
          head += chunk
    e = {"sha256": h.hexdigest(), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if st.st_size <= limit:
      try:
        e["text"] = head.decode("utf-8")
      except UnicodeDecodeError:
        pass
    files[rel] = e
with open(out, "w") as f:
  json.dump(files, f)
"""

CODE_SUFFIXES = (
  ".sh",
  ".bash",
  ".c",
  ".h",
  ".cc",
  ".cpp",
  ".hpp",
  ".rs",
  ".go",
  ".js",
  ".ts",
  ".rb",
  ".pl",
  ".java",
  ".lua",
  ".sql",
  ".awk",
  ".mk",
  ".r",
  ".php",
  ".swift",
)
_TRIVIAL_LINE = re.compile(r"^[\s{}()\[\];,]*$|^(fi|done|esac|then|do|else|end|}\s*else\s*{)$")

Snapshot = Mapping[str, Mapping]


@dataclasses.dataclass(frozen=True)
class StaticConfig:
  max_text_bytes: int = 256 * 1024
  min_rewrite_bytes: int = 16  # identical rewrites of smaller files (markers, empty) are ignored
  min_body_lines: int = 3  # an existing function shorter than this never counts as implemented
  max_function_edit_lines: int = 2
  min_new_work_lines: int = 8  # Python lines the oracle writes outside such functions that clear it
  min_added_lines: int = 3  # fewer added code lines than this are not line-compared
  max_line_overlap: float = 0.8


@dataclasses.dataclass(frozen=True)
class Finding:
  rule: str
  path: str
  evidence: str
  symbol: str = ""

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def _lines(entry: Mapping | None) -> list[str] | None:
  return None if entry is None or "text" not in entry else entry["text"].splitlines()


def _changed_after_lines(before: list[str] | None, after: list[str]) -> set[int]:
  """1-based line numbers of `after` that the change inserted or replaced."""
  if before is None:
    return set(range(1, len(after) + 1))
  out = set()
  matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
  for tag, _, _, j1, j2 in matcher.get_opcodes():
    if tag in ("replace", "insert"):
      out.update(range(j1 + 1, j2 + 1))
  return out


def _is_python(path: str, lines: list[str]) -> bool:
  return path.endswith(".py") or bool(lines and lines[0].startswith("#!") and "python" in lines[0])


def _is_code(path: str, lines: list[str]) -> bool:
  if _is_python(path, lines):
    return False
  base = posixpath.basename(path)
  return (
    path.lower().endswith(CODE_SUFFIXES)
    or base in ("Makefile", "makefile", "Dockerfile")
    or bool(lines and lines[0].startswith("#!"))
  )


@dataclasses.dataclass(frozen=True)
class _Function:
  qualname: str
  start: int
  end: int
  body: tuple[str, ...]  # stripped source lines of the body (docstring included)
  trivial: bool


def _trivial(body: list[ast.stmt]) -> bool:
  stmts = list(body)
  if (
    stmts
    and isinstance(stmts[0], ast.Expr)
    and isinstance(getattr(stmts[0], "value", None), ast.Constant)
  ):
    stmts = stmts[1:]  # docstring
  for s in stmts:
    if isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)):
      continue
    if isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s):
      continue
    if (
      len(stmts) == 1
      and isinstance(s, ast.Return)
      and (s.value is None or isinstance(s.value, ast.Constant))
    ):
      continue
    return False
  return True


def python_functions(source: str) -> dict[str, _Function] | None:
  """Qualified name -> function (methods as Class.method); None when the file does not parse."""
  try:
    tree = ast.parse(source)
  except (SyntaxError, ValueError):
    return None
  lines, out = source.splitlines(), {}

  def visit(node, prefix):
    for child in ast.iter_child_nodes(node):
      if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
        name = prefix + child.name
        first = child.body[0].lineno
        body = tuple(s.strip() for s in lines[first - 1 : child.end_lineno] if s.strip())
        out[name] = _Function(name, child.lineno, child.end_lineno, body, _trivial(child.body))
        visit(child, name + ".")
      elif isinstance(child, ast.ClassDef):
        visit(child, prefix + child.name + ".")

  visit(tree, "")
  return out


def _edit_lines(old: tuple[str, ...], new: tuple[str, ...]) -> int:
  """Lines that differ between two bodies (inserted + replaced + deleted, the larger side)."""
  n = 0
  for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
    if tag != "equal":
      n += max(i2 - i1, j2 - j1)
  return n


def _rewrites(before: Snapshot, after: Snapshot, cfg: StaticConfig) -> list[Finding]:
  out = []
  for path, a in sorted(after.items()):
    b = before.get(path)
    if (
      b
      and "sha256" in a
      and a.get("sha256") == b.get("sha256")
      and a["mtime_ns"] != b["mtime_ns"]
      and a["size"] >= cfg.min_rewrite_bytes
    ):
      out.append(
        Finding(
          "rewrite_same_content",
          path,
          f"the oracle rewrote {path} ({a['size']} bytes) with the content it "
          "already had: this output is already in the environment",
        )
      )
  return out


def _env_functions(before: Snapshot) -> dict[str, list[tuple[str, _Function]]]:
  index = collections.defaultdict(list)
  for path, entry in sorted(before.items()):
    lines = _lines(entry)
    if lines is not None and _is_python(path, lines):
      for name, fn in (python_functions(entry["text"]) or {}).items():
        index[name].append((path, fn))
  return index


def _functions(
  before: Snapshot, after: Snapshot, changed: Mapping[str, set[int]], cfg: StaticConfig
) -> list[Finding]:
  env, found, other_work = _env_functions(before), [], 0
  for path, touched in sorted(changed.items()):
    lines = _lines(after.get(path))
    if lines is None or not _is_python(path, lines):
      continue
    in_found: set[int] = set()
    for name, fn in (python_functions(after[path]["text"]) or {}).items():
      span = set(range(fn.start, fn.end + 1))
      if not touched & span:
        continue
      candidates = sorted(env.get(name, []), key=lambda pf: pf[0] != path)  # same file first
      for env_path, old in candidates:
        if old.trivial or len(old.body) < cfg.min_body_lines:
          continue
        edits = _edit_lines(old.body, fn.body)
        if edits <= cfg.max_function_edit_lines:
          found.append(
            Finding(
              "function_exists",
              path,
              f"{name} (written by the oracle in {path}) already has a {len(old.body)}-line body "
              f"in the environment's {env_path}; the oracle's version differs in {edits} "
              f"line(s): the function was implemented already",
              symbol=name,
            )
          )
          in_found |= span
          break
    other_work += sum(1 for i in touched - in_found if lines[i - 1].strip())
  # Small edits of existing functions are the task only when the oracle does little else (an
  # extension that also adds a method legitimately touches the constructor, say).
  return found if other_work < cfg.min_new_work_lines else []


def _normal(line: str) -> str | None:
  s = " ".join(line.split())
  return None if len(s) < 4 or _TRIVIAL_LINE.match(s) else s


def _overlap(
  before: Snapshot, after: Snapshot, changed: Mapping[str, set[int]], cfg: StaticConfig
) -> list[Finding]:
  sources = collections.defaultdict(set)
  for path, entry in before.items():
    lines = _lines(entry)
    if lines is not None and _is_code(path, lines):
      for line in lines:
        if (n := _normal(line)) is not None:
          sources[n].add(path)
  out = []
  for path, touched in sorted(changed.items()):
    lines = _lines(after.get(path))
    if lines is None or not _is_code(path, lines):
      continue
    added = [n for i in sorted(touched) if (n := _normal(lines[i - 1])) is not None]
    if len(added) < cfg.min_added_lines:
      continue
    found = [n for n in added if n in sources]
    if len(found) / len(added) >= cfg.max_line_overlap:
      by_file = collections.Counter(p for n in found for p in sorted(sources[n])[:1])
      where = ", ".join(f"{p}: {c}" for p, c in by_file.most_common(3))
      out.append(
        Finding(
          "line_overlap",
          path,
          f"{len(found)} of the {len(added)} code lines the oracle writes into "
          f"{path} ({len(found) / len(added):.0%}) already exist in the "
          f"environment ({where})",
        )
      )
  return out


def static_audit(
  before: Snapshot, after: Snapshot, cfg: StaticConfig = StaticConfig()
) -> list[Finding]:
  """Findings of every rule (empty = clean)."""
  changed = {}
  for path, a in after.items():
    b = before.get(path)
    lines = _lines(a)
    if lines is None or (b is not None and b.get("sha256") == a.get("sha256")):
      continue
    changed[path] = _changed_after_lines(_lines(b) if b is not None else None, lines)
  return (
    _rewrites(before, after, cfg)
    + _functions(before, after, changed, cfg)
    + _overlap(before, after, changed, cfg)
  )
