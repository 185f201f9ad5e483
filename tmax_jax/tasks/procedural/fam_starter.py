"""Starter families: one- or two-command tasks that a tiny model can learn on a CPU (the demo).

line_tool: apply one standard text tool (cp, sort, head, tail, tac, wc -l) to the lines of
/workspace/input.txt and save the result to /workspace/answer.txt. Each operation has its own
sentence, so the instruction, not a single copied token, decides the command; the input file is
random per task, so a held-out task is new data for the same skill. The difficulty knob renames the
input file (a path to copy from the instruction) and then chains two tools.

write_word: put the word(s) named in the instruction into /workspace/answer.txt. The difficulty knob
adds words and then a directory to create; the plausible wrong solution writes a different word.
The words are named bare (" ocean", not "`ocean`"): the Qwen tokenizer then gives the instruction
and the command the same single token per word, so a tiny model can learn to copy it (quoted,
"`ocean`" splits into "o" + "cean" and the copy becomes a two-token-to-one mapping the demo's model
never learns).
"""

from __future__ import annotations

import random

from tmax_jax.tasks.procedural.core import Family, TaskSpec

WORDS = (
  "apple",
  "river",
  "stone",
  "cloud",
  "tiger",
  "maple",
  "ocean",
  "piano",
  "lemon",
  "eagle",
  "candle",
  "forest",
  "garden",
  "silver",
  "rocket",
  "planet",
  "window",
  "butter",
  "castle",
  "dragon",
  "island",
  "jungle",
  "marble",
  "pepper",
  "violet",
  "yellow",
  "winter",
  "summer",
  "bridge",
  "orange",
  "purple",
  "thunder",
)

CHECK = """
path = DATA["path"]
if not os.path.isfile(path):
  fail(f"{path} does not exist")
if read(path).split() != DATA["words"]:
  fail(f"{path} holds {read(path)[:80]!r}, expected the words {DATA['words']}")
"""


def write_word(rng: random.Random, level: int) -> TaskSpec:
  words = rng.sample(WORDS, (1, 2, 1)[level])
  path = ("answer.txt", "answer.txt", f"out/{rng.choice(WORDS)}/answer.txt")[level]
  full = f"/workspace/{path}"
  said = " then ".join(words)
  instruction = f"Write the word{'s' if len(words) > 1 else ''} {said} into {full}" + (
    ", one per line." if len(words) > 1 else "."
  )
  mkdir = f"mkdir -p {full.rsplit('/', 1)[0]} && " if level == 2 else ""
  solve = mkdir + "printf '%s\\n' " + " ".join(words) + f" > {full}"
  if level < 2:
    solve = f"echo {words[0]} > {full}" if len(words) == 1 else solve
  others = [w for w in WORDS if w not in words]
  wrong = mkdir + f"echo {rng.choice(others)} > {full}"
  return TaskSpec(
    instruction, CHECK, solve, wrong, data={"words": words, "path": full}, complexity="short"
  )


# operation -> (instruction with {src} and {dst}, command with {src} and {dst}, expected lines)
LINE_TOOLS = {
  "copy": ("Make {dst} an exact copy of {src}.", "cp {src} {dst}", lambda ls: ls),
  "sort": (
    "Sort the lines of {src} alphabetically and save them to {dst}.",
    "sort {src} > {dst}",
    sorted,
  ),
  "first": (
    "Save only the first line of {src} to {dst}.",
    "head -n 1 {src} > {dst}",
    lambda ls: ls[:1],
  ),
  "last": (
    "Save only the last line of {src} to {dst}.",
    "tail -n 1 {src} > {dst}",
    lambda ls: ls[-1:],
  ),
  "reverse": (
    "Reverse the order of the lines of {src} and save them to {dst}.",
    "tac {src} > {dst}",
    lambda ls: ls[::-1],
  ),
  "count": (
    "Count the lines of {src} and save the number to {dst}.",
    "wc -l < {src} > {dst}",
    lambda ls: [str(len(ls))],
  ),
}

LINE_CHECK = """
got = read(DATA["path"]).split()
if got != DATA["expected"]:
  fail(f"{DATA['path']} holds {got[:8]}, expected {DATA['expected']}")
"""


def _lines(rng: random.Random) -> list[str]:
  """4-6 distinct words, neither sorted nor reverse-sorted, so every tool gives its own answer."""
  while True:
    lines = rng.sample(WORDS, rng.randint(4, 6))
    if lines not in (sorted(lines), sorted(lines, reverse=True)):
      return lines


def line_tool(rng: random.Random, level: int) -> TaskSpec:
  lines = _lines(rng)
  ops = rng.sample(sorted(LINE_TOOLS), 2)
  src = "/workspace/input.txt" if level == 0 else f"/workspace/{rng.choice(WORDS)}.txt"
  dst = "/workspace/answer.txt"
  said, command, expect = LINE_TOOLS[ops[0]]
  expected = expect(lines)
  instruction = said.format(src=src, dst=dst)
  solve = command.format(src=src, dst=dst)
  if level == 2:  # chain: the second tool reads what the first wrote
    said2, command2, expect2 = LINE_TOOLS[ops[1]]
    expected = expect2(expected)
    then = said2.format(src=dst, dst=dst)
    instruction += " Then, in place: " + then[0].lower() + then[1:]
    solve += f" && {command2.format(src=dst, dst='/tmp/next.txt')} && mv /tmp/next.txt {dst}"
  wrong = LINE_TOOLS[ops[1]][1].format(src=src, dst=dst)
  if LINE_TOOLS[ops[1]][2](lines) == expected:
    wrong = f"cp {src} {dst} && echo extra >> {dst}"
  return TaskSpec(
    instruction,
    LINE_CHECK,
    solve,
    wrong,
    files={src.removeprefix("/workspace/"): "\n".join(lines) + "\n"},
    data={"path": dst, "expected": [str(x) for x in expected]},
    complexity="short",
  )


FAMILIES = (
  Family(
    "write_word",
    "file_operations",
    "exact_text",
    "text_only",
    write_word,
    skills=("shell redirection", "reading instructions"),
  ),
  Family(
    "line_tool",
    "file_operations",
    "exact_text",
    "text_only",
    line_tool,
    skills=("coreutils text tools", "shell redirection", "reading instructions"),
  ),
)
