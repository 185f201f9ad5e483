"""Starter families: one- or two-command tasks that a tiny model can learn on a CPU (the demo).

write_word: put the word(s) named in the instruction into /workspace/answer.txt. The difficulty knob
adds words and then a directory to create; the plausible wrong solution writes a different word.
"""

from __future__ import annotations

import random

from tmax_jax.tasks.procedural.core import Family, TaskSpec

WORDS = ("apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "piano", "lemon", "eagle",
         "candle", "forest", "garden", "silver", "rocket", "planet", "window", "butter", "castle",
         "dragon", "island", "jungle", "marble", "pepper", "violet", "yellow", "winter", "summer",
         "bridge", "orange", "purple", "thunder")

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
  said = " then ".join(f"`{w}`" for w in words)
  instruction = f"Write the word{'s' if len(words) > 1 else ''} {said} into {full}" + (
      ", one per line." if len(words) > 1 else ".")
  mkdir = f"mkdir -p {full.rsplit('/', 1)[0]} && " if level == 2 else ""
  solve = mkdir + "printf '%s\\n' " + " ".join(words) + f" > {full}"
  if level < 2:
    solve = f"echo {words[0]} > {full}" if len(words) == 1 else solve
  others = [w for w in WORDS if w not in words]
  wrong = mkdir + f"echo {rng.choice(others)} > {full}"
  return TaskSpec(instruction, CHECK, solve, wrong, data={"words": words, "path": full},
                  complexity="short")


FAMILIES = (
    Family("write_word", "file_operations", "exact_text", "text_only", write_word,
           skills=("shell redirection", "reading instructions")),
)
