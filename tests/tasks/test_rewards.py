"""reward.json / reward.txt parsing: precedence, clamping, and missing/empty/malformed as errors."""

import pytest

from tmax_jax.tasks.runner import (
  RewardFormatError,
  RewardMissingError,
  parse_reward_json,
  parse_reward_txt,
  read_reward_dir,
  scalar_reward,
)


def test_txt_clamped(tmp_path):
  (tmp_path / "reward.txt").write_text(" 0.25\n")
  assert read_reward_dir(tmp_path) == (0.25, {"reward": 0.25})
  (tmp_path / "reward.txt").write_text("7")
  assert read_reward_dir(tmp_path)[0] == 1.0
  (tmp_path / "reward.txt").write_text("-2")
  assert read_reward_dir(tmp_path)[0] == 0.0
  (tmp_path / "reward.txt").write_text("0\n")
  assert read_reward_dir(tmp_path) == (0.0, {"reward": 0.0})


def test_json_takes_precedence(tmp_path):
  (tmp_path / "reward.txt").write_text("0")
  (tmp_path / "reward.json").write_text('{"reward": 1, "passed": 3, "total": 3}')
  assert read_reward_dir(tmp_path) == (1.0, {"reward": 1.0, "passed": 3.0, "total": 3.0})
  (tmp_path / "reward.json").write_text('{"accuracy": 0.5}')
  assert read_reward_dir(tmp_path)[0] == 0.5
  (tmp_path / "reward.json").write_text("")  # empty json -> falls back to reward.txt
  assert read_reward_dir(tmp_path)[0] == 0.0


@pytest.mark.parametrize(
  "files,state",
  [
    ({}, "missing"),
    ({"reward.txt": "  \n"}, "empty"),
    ({"reward.json": "", "reward.txt": ""}, "empty"),
  ],
)
def test_missing_or_empty_is_an_error_not_zero(tmp_path, files, state):
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  with pytest.raises(RewardMissingError, match=state) as e:
    read_reward_dir(tmp_path, {"test-stdout.txt": "Traceback ..."})
  assert e.value.logs["test-stdout.txt"] == "Traceback ..."


@pytest.mark.parametrize(
  "text,match",
  [
    ("[1]", "flat dict"),
    ("{}", "flat dict"),
    ('{"reward": "1"}', "reward"),
    ('{"reward": true}', "reward"),
    ('{"a": {"b": 1}}', "a:"),
    ("{nope", "not valid JSON"),
    ('{"reward": NaN}', "finite"),
  ],
)
def test_bad_json(text, match):
  with pytest.raises(RewardFormatError, match=match):
    parse_reward_json(text)


def test_bad_txt_and_ambiguous_json():
  with pytest.raises(RewardFormatError, match="one float"):
    parse_reward_txt("PASSED")
  with pytest.raises(RewardFormatError, match="finite"):
    parse_reward_txt("inf")
  with pytest.raises(RewardFormatError, match="no 'reward' key"):
    scalar_reward({"a": 1.0, "b": 0.0})
  assert not issubclass(RewardFormatError, RewardMissingError)
