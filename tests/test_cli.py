"""tmax_jax.cli and errors: the one error path of the entry points (in process; the entry points
themselves run in tests/test_entry_points.py)."""

import dataclasses
import socket

import ml_collections
import pytest

from tmax_jax import cli, errors
from tmax_jax.config_dict import from_config_dict
from tmax_jax.loop import preflight


def test_unknown_field_names_the_full_dotted_path_and_the_parents_fields():
  config = ml_collections.ConfigDict(
    {"rollout": {"group_size": 8, "async_steps": 1}, "model": {"checkpoint": ""}, "seed": 0}
  )
  error = cli.unknown_field_error("config", config, "rollout.group_sise")
  lines = str(error).splitlines()
  assert lines[0] == (
    "--config.rollout.group_sise: unknown field config.rollout.group_sise "
    "(did you mean config.rollout.group_size?)"
  )
  assert lines[1] == "fields of config.rollout: async_steps, group_size"
  assert "unknown field config.nonexistent\n" in str(
    cli.unknown_field_error("config", config, "nonexistent")
  )
  assert "config.seed is a value (int), not a group of fields" in str(
    cli.unknown_field_error("config", config, "seed.x")
  )
  assert cli.unknown_field_error("config", config, "model.checkpoint") is None
  assert isinstance(error, errors.ConfigError) and isinstance(error, ValueError)


def test_user_error_message_is_short():
  missing = FileNotFoundError(2, "No such file or directory", "/x/y.jsonl")
  assert cli.user_error_message(missing) == "/x/y.jsonl: No such file or directory"
  long = errors.UserError("\n".join(f"line {i}" for i in range(10)))
  lines = cli.user_error_message(long).splitlines()
  assert len(lines) == cli.MAX_MESSAGE_LINES and lines[-1] == "line 2 [...] (--debug)"


def test_run_prints_a_user_error_and_exits_2_and_debug_shows_the_traceback(capsys):
  def main(argv):
    raise errors.UserError(f"config.tasks_dir=/nope: no such directory ({argv})")

  with pytest.raises(SystemExit) as exit_info:
    cli.run(main, ["--x"])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == "error: config.tasks_dir=/nope: no such directory (['--x'])\n"
  with pytest.raises(errors.UserError):
    cli.run(main, ["--debug"])


def test_run_keeps_the_traceback_of_a_bug_and_exits_0_for_a_result_dict():
  def buggy(argv):
    del argv
    raise KeyError("a bug")

  with pytest.raises(KeyError):
    cli.run(buggy, [])
  for result, code in (({"rows": 1}, 0), (None, 0), (3, 3)):
    with pytest.raises(SystemExit) as exit_info:
      cli.run(lambda argv, r=result: r, [])
    assert exit_info.value.code == code


def test_argument_parser_underscores_aliases_help_and_defaults(capsys):
  parser = cli.ArgumentParser(prog="tool", description="d")
  parser.add_argument("--prune_days", type=float, default=7.0, help="age limit")
  parser.add_argument("--out", required=True, help="output")
  args = parser.parse_args(["--prune-days", "3", "--out=o"])  # the dashed spelling still works
  assert (args.prune_days, args.out, args.debug) == (3.0, "o", False)
  assert parser.parse_args(["--prune-days=2", "--out", "o", "--debug"]).debug
  text = parser.format_help()
  assert "age limit (default: 7.0)" in text and "output (default" not in text
  assert text.index("--prune_days") < text.index("--debug")  # the tool's flags first
  with pytest.raises(TypeError, match="underscores"):
    parser.add_argument("--dry-run", action="store_true", help="x")
  with pytest.raises(TypeError, match="help text"):
    parser.add_argument("--quiet", action="store_true")
  with pytest.raises(SystemExit) as exit_info:
    parser.parse_args(["--out", "o", "--prune_dayz", "1"])
  assert exit_info.value.code == 2
  err = capsys.readouterr().err
  assert err == "error: unrecognized arguments: --prune_dayz 1 (tool --help lists the flags)\n"


@dataclasses.dataclass(frozen=True)
class _Inner:
  steps: int = 1

  def __post_init__(self):
    if self.steps < 1:
      raise ValueError(f"steps={self.steps}; expected >= 1")


@dataclasses.dataclass(frozen=True)
class _Outer:
  inner: _Inner = _Inner()


def test_config_validation_errors_are_config_errors_with_their_path():
  with pytest.raises(errors.ConfigError, match=r"^config\.inner: steps=0; expected >= 1$"):
    from_config_dict(_Outer, {"inner": {"steps": 0}})
  with pytest.raises(errors.ConfigError, match=r"config\.inner: unknown field\(s\) \['step'\]"):
    from_config_dict(_Outer, {"inner": {"step": 2}})


def test_preflight_names_the_field_of_a_bad_checkpoint_tasks_dir_or_address(tmp_path):
  with pytest.raises(errors.ConfigError, match="config.model.checkpoint=.*: no such directory"):
    preflight.check_hf_checkpoint("config.model.checkpoint", tmp_path / "nope")
  with pytest.raises(errors.ConfigError, match="no config.json"):
    preflight.check_hf_checkpoint("config.model.checkpoint", tmp_path)
  (tmp_path / "config.json").write_text("{}")
  with pytest.raises(errors.ConfigError, match="no \\*.safetensors"):
    preflight.check_hf_checkpoint("config.model.checkpoint", tmp_path)
  task = tmp_path / "tasks" / "t1"
  task.mkdir(parents=True)
  (task / "task.toml").write_text("[metadata\n")
  (task / "instruction.md").write_text("do it\n")
  with pytest.raises(errors.UserError, match=r"^config.tasks_dir: .*task.toml.*not valid TOML"):
    preflight.check_tasks_dir("config.tasks_dir", tmp_path / "tasks")
  with socket.socket() as s:  # a port nothing listens on: bound, never listening
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    with pytest.raises(errors.UserError, match=f"config.address=127.0.0.1:{port}: nothing answers"):
      cli.check_reachable("config.address", f"127.0.0.1:{port}")
  with pytest.raises(errors.UserError, match="expected host:port"):
    cli.check_reachable("--base_url", "localhost")


def test_openai_server_refuses_a_model_smaller_than_its_tokenizer():
  from tmax_jax.inference.server import check_vocabulary

  check_vocabulary(151_669, 151_936)  # Qwen3: the model's vocabulary is padded past the tokenizer
  with pytest.raises(errors.UserError, match="151669 ids, but the model's vocab_size is 256"):
    check_vocabulary(151_669, 256)


_ABSL_MAIN = """
import sys
from absl import logging
from tmax_jax import cli

def main(argv):
  print(logging.get_verbosity())
  if len(argv) > 1:
    raise FileNotFoundError(2, "No such file or directory", argv[1])

cli.run_absl(main, verbosity=logging.INFO)
"""


@pytest.mark.parametrize(
  "args,code,out",
  [
    ([], 0, "0"),  # the launcher's default level: INFO
    (["--verbosity=-1"], 0, "-1"),  # -v still decides (main() no longer overrides it)
    (["-v", "1"], 0, "1"),
    (["x.jsonl"], 2, "error: x.jsonl: No such file or directory"),
    (["--nonexistent"], 2, "error: Unknown command line flag 'nonexistent'"),
  ],
)
def test_run_absl_verbosity_default_and_errors(args, code, out):
  import subprocess
  import sys

  res = subprocess.run(
    [sys.executable, "-c", _ABSL_MAIN, *args], capture_output=True, text=True, timeout=120
  )
  assert res.returncode == code, res.stderr[-2000:]
  assert out in (res.stdout + res.stderr) and "Traceback" not in res.stderr, res.stderr[-2000:]
