"""Boxed-answer extraction and normalisation for the math evaluation (pure string functions).

The final answer of a reply is the content of its last `\\boxed{...}` (or `\\fbox{...}`; nested
braces kept whole; `\\boxed 42`, the brace-less form, too) in the part after the reasoning
(formats.strip_reasoning: a reply whose `<think>` never closed has no final answer). Normalised:
whitespace and LaTeX spacing (`\\,`, `\\!`, `\\ `, `~`) removed, `$` removed, `\\text{..}` /
`\\mathrm{..}` / `\\textbf{..}` / `\\mathbf{..}` and outer braces unwrapped, a trailing `.`
dropped, `^\\circ` and `\\%` dropped, and an integer written with leading zeros, a sign, a zero
fraction or thousands commas (`007`, `+7`, `7.00`, `1,000`) written as Python's int would. The
gold answer is normalised the same way; a sample is correct when the two strings are equal (exact
match: AIME answers are integers 0-999, so nothing symbolic is needed).
"""

from __future__ import annotations

import re

BOX_COMMANDS = ("\\boxed", "\\fbox")
_WRAPPERS = ("\\text", "\\mathrm", "\\textbf", "\\mathbf", "\\textrm")
_SPACING = re.compile(r"\\[,!;: ]|~|\s+")
_INTEGER = re.compile(r"^[+-]?\d+(\.0*)?$")
_THOUSANDS = re.compile(r"^\d{1,3}(,\d{3})+$")
AIME_RANGE = range(0, 1000)


def _braced(text: str, start: int) -> tuple[str, int] | None:
  """(content, end) of the brace group opening at text[start] == "{", nested braces matched
  (`\\{` / `\\}` are literal braces); None when it never closes."""
  depth, i = 0, start
  while i < len(text):
    c = text[i]
    if c == "\\":
      i += 2
      continue
    if c == "{":
      depth += 1
    elif c == "}":
      depth -= 1
      if depth == 0:
        return text[start + 1 : i], i + 1
    i += 1
  return None


def _boxed_at(text: str, i: int, command: str) -> str | None:
  """The argument of the box command starting at text[i], or None (an unclosed group, or a name
  that only begins with the command, e.g. `\\boxedx`)."""
  j = i + len(command)
  k = j
  while k < len(text) and text[k] == " ":
    k += 1
  if k < len(text) and text[k] == "{":
    group = _braced(text, k)
    return None if group is None else group[0]
  if k > j:  # `\boxed 42`: the word after the spaces, up to a space or `$`
    m = re.match(r"[^\s$]+", text[k:])
    return m.group(0) if m else None
  return None


def last_boxed(text: str) -> str | None:
  """The content of the last complete `\\boxed{...}` / `\\fbox{...}` in `text`, else None."""
  best, best_at = None, -1
  for command in BOX_COMMANDS:
    at = text.rfind(command)
    while at > best_at:
      content = _boxed_at(text, at, command)
      if content is not None:
        best, best_at = content, at
        break
      at = text.rfind(command, 0, at)
  return best


def _unwrap(s: str) -> str:
  """Strips one layer of `\\text{..}`-like wrapper or outer `{..}` spanning the whole string."""
  for name in (*_WRAPPERS, ""):
    if s.startswith(name + "{"):
      group = _braced(s, len(name))
      if group is not None and group[1] == len(s):
        return group[0]
  return s


def normalize(answer: str | int | float) -> str:
  """The comparable form of an answer (rules in the module docstring)."""
  s = str(answer)
  s = _SPACING.sub("", s).replace("$", "")
  for _ in range(4):  # `{\text{7}}` unwraps in two rounds; a fixed bound keeps it linear
    s = _unwrap(s).rstrip(".")
  s = s.replace("^\\circ", "").replace("^{\\circ}", "").replace("\\%", "")
  if _THOUSANDS.match(s):
    s = s.replace(",", "")
  if _INTEGER.match(s):
    s = str(int(s.split(".")[0]))
  return s


def extract_answer(reply: str) -> str | None:
  """The normalised final answer of a reply's answer part (the last box), None when it has none.
  `reply` is the text after the reasoning (formats.strip_reasoning)."""
  boxed = last_boxed(reply)
  if boxed is None:
    return None
  answer = normalize(boxed)
  return answer or None


def is_aime_answer(answer: str | int) -> bool:
  """True for an integer 0-999 (leading zeros allowed: AIME writes 007)."""
  s = normalize(answer)
  return bool(re.fullmatch(r"\d+", s)) and int(s) in AIME_RANGE
