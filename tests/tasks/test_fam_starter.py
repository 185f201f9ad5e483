"""The starter families the CPU demo trains on: what the tiny model must learn is really there."""

import random
import subprocess

import pytest

from tmax_jax.tasks.procedural import core, fam_starter
from tmax_jax.tokenizers.builder import load_tokenizer


@pytest.mark.parametrize("op", sorted(fam_starter.LINE_TOOLS))
def test_each_line_tool_command_gives_the_expected_lines(op, tmp_path):
  lines = fam_starter._lines(random.Random(op))
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
  _, command, expect = fam_starter.LINE_TOOLS[op]
  subprocess.run(command.format(src="in.txt", dst="out.txt"), shell=True, check=True, cwd=tmp_path)
  assert (tmp_path / "out.txt").read_text().split() == [str(x) for x in expect(lines)]


def test_line_tool_answers_differ_between_tools():
  """Every input is neither sorted nor reversed, so no tool's answer stands in for another's."""
  for seed in range(200):
    lines = fam_starter._lines(random.Random(seed))
    answers = [tuple(expect(lines)) for _, _, expect in fam_starter.LINE_TOOLS.values()]
    assert len(set(answers)) == len(answers), lines


def test_line_tool_instruction_decides_the_command_and_data_varies():
  specs = [fam_starter.line_tool(core.family_rng("line_tool", s, 0), 0) for s in range(60)]
  by_instruction = {}
  for spec in specs:
    by_instruction.setdefault(spec.instruction, set()).add(spec.solve)
  assert len(by_instruction) == len(fam_starter.LINE_TOOLS)  # one sentence per tool at level 0
  assert all(len(solves) == 1 for solves in by_instruction.values())
  assert len({spec.files["input.txt"] for spec in specs}) > 50  # new data per task


def test_write_word_names_each_word_as_the_same_single_token_the_command_uses():
  tok = load_tokenizer("qwen3")
  spec = fam_starter.write_word(random.Random(0), 0)
  word = spec.data["words"][0]
  (word_id,) = tok.encode(" " + word)
  assert word_id in tok.encode(spec.instruction) and word_id in tok.encode(spec.solve)
