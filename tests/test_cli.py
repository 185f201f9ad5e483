"""tmax_jax.cli and errors: the one error path of the entry points (in process; the entry points
themselves run in tests/test_entry_points.py)."""

import dataclasses
import io
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


# --- issue 47: one error path, logging, progress ----------------------------------------------


def test_a_malformed_json_lines_file_is_a_user_error(tmp_path, capsys):
  from tmax_jax import json_io

  bad = tmp_path / "records.jsonl"
  bad.write_text('{"a": 1}\n{"a": \n')

  def main(argv):
    del argv
    list(json_io.read_objects(bad))

  with pytest.raises(SystemExit) as exit_info:
    cli.run(main, [])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == f"error: {bad}:2: not JSON (Expecting value)\n"


def test_a_config_file_that_is_not_python_names_its_line(tmp_path):
  from tmax_jax.config_dict import load_config_file

  config = tmp_path / "x.py"
  config.write_text("def get_config():\n  return {(}\n")
  with pytest.raises(errors.ConfigError, match=rf"^{config}:2: not valid Python"):
    load_config_file(config)


def test_a_misspelt_dtype_names_its_field_when_the_config_is_read():
  from tmax_jax.loop.config import ModelSpec, ServeConfig

  with pytest.raises(
    errors.ConfigError, match=r"^config\.model: compute_dtype='bf16': not a dtype"
  ):
    from_config_dict(ModelSpec, {"compute_dtype": "bf16"}, "config.model")
  with pytest.raises(errors.ConfigError, match=r"config\.serving: serving\.param_dtype='fp16'"):
    from_config_dict(ServeConfig, {"serving": {"param_dtype": "fp16", "port": 9000}})
  ModelSpec(compute_dtype="bfloat16", param_dtype="float32")  # real names pass


def test_a_misspelt_backend_is_a_user_error():
  from tmax_jax.tasks.runner import RunnerConfig

  with pytest.raises(errors.UserError, match="backend='bwrap': not a sandbox backend"):
    RunnerConfig(backend="bwrap")
  for ok in (None, "", "auto", "podman", "harbor:daytona"):
    RunnerConfig(backend=ok)


def test_preflight_reads_trajectories_parquets_checkpoints_harnesses_and_families(tmp_path):
  records = tmp_path / "sft.jsonl"
  records.write_text('{"tokens": [1, 2], "loss_mask": [0, 1]}\n{"tokens": [1, 2]\n')
  with pytest.raises(errors.ConfigError, match=rf"^config\.trajectories: {records}:2: not JSON"):
    preflight.check_trajectories("config.trajectories", records)
  records.write_text('{"tokens": [1, 2], "loss_mask": [0]}\n')
  with pytest.raises(errors.ConfigError, match=":1: 2 tokens but 1 loss_mask entries"):
    preflight.check_trajectories("config.trajectories", records)
  parquet = tmp_path / "tasks.parquet"
  parquet.write_bytes(b"PAR1 not a parquet")
  with pytest.raises(errors.UserError, match=r"^config\.tasks\.source: .*not a readable parquet"):
    preflight.check_tasks_dir("config.tasks.source", parquet)
  (tmp_path / "config.json").write_text("{model_type: qwen3")
  (tmp_path / "model.safetensors").write_bytes(b"")
  with pytest.raises(errors.ConfigError, match="config.json is not JSON"):
    preflight.check_hf_checkpoint("config.model.checkpoint", tmp_path)
  with pytest.raises(errors.ConfigError, match="did you mean 'bash_tool'"):
    preflight.check_harness("config.episode.harness", "bash_tol")
  with pytest.raises(errors.ConfigError, match="did you mean 'line_tool'"):
    preflight.check_families("config.tasks.families", ("line_tol",))


def test_a_failed_build_step_is_said_in_two_lines():
  from tmax_jax.sandbox.api import SandboxError
  from tmax_jax.sandbox.images.builder import failed_step_message

  error = SandboxError("ctx/Dockerfile: line 3 RUN failed (exit 100):\nGet:1 ...\n\nE: no pkg\n")
  assert failed_step_message(error) == "ctx/Dockerfile: line 3 RUN failed (exit 100):\nE: no pkg"


def test_help_states_a_default_once_and_keeps_the_whole_first_paragraph():
  parser = cli.ArgumentParser(
    prog="tool", description=cli.description(" A long line\nends here.\n\nMore.")
  )
  parser.add_argument("--families", default="", help="family names (default: all)")
  text = parser.format_help()
  assert "(default: all)" in text and "(default: )" not in text
  assert "A long line\nends here." in text and "More." not in text


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def test_progress_writes_whole_lines_off_a_terminal(monkeypatch):
  monkeypatch.setattr(cli, "PROGRESS_LOG_INTERVAL_S", 0.0)  # every update a line
  log = io.StringIO()
  outer = cli.progress(range(3), desc="outer", file=log)
  for _ in outer:
    for _ in cli.progress(range(2), desc="inner", file=log, leave=False):  # a second position
      pass
  text = log.getvalue()
  assert "\r" not in text and "\x1b" not in text and text.endswith("\n"), repr(text)
  lines = text.splitlines()
  assert lines[-1].startswith("outer: 100%") and "3/3" in lines[-1], lines
  assert any(line.startswith("inner:") for line in lines)
  assert all(a != b for a, b in zip(lines, lines[1:], strict=False))  # no repeated redraw
  terminal = _Terminal()
  for _ in cli.progress(range(2), desc="tty", file=terminal):
    pass
  assert "\r" in terminal.getvalue()  # on a terminal tqdm redraws in place


def test_progress_off_a_terminal_is_throttled():
  log = io.StringIO()
  for _ in cli.progress(range(1000), desc="fast", file=log):
    pass
  assert len(log.getvalue().splitlines()) <= 2  # the start and the final state


_LOGGING_MAIN = """
import logging
from absl import logging as absl_logging
from tmax_jax import cli

def main(argv):
  del argv
  logging.getLogger("tmax_jax.loop.demo").info("ours at info")
  logging.getLogger("orbax.checkpoint").info("a library at info")
  absl_logging.info("absl at info")
  logging.getLogger("jax").warning("a library's warning")

cli.run_absl(main)
"""


@pytest.mark.parametrize(
  "args,shown,hidden",
  [
    ([], ["ours at info", "a library's warning"], ["a library at info", "absl at info"]),
    (["-v", "0"], ["ours at info", "a library at info", "absl at info"], []),
    (["--verbosity=-1"], ["a library's warning"], ["ours at info", "a library at info"]),
  ],
)
def test_libraries_log_info_only_with_v(args, shown, hidden):
  import subprocess
  import sys

  res = subprocess.run(
    [sys.executable, "-c", _LOGGING_MAIN, *args], capture_output=True, text=True, timeout=120
  )
  assert res.returncode == 0, res.stderr[-2000:]
  for text in shown:
    assert text in res.stderr, res.stderr
  for text in hidden:
    assert text not in res.stderr, res.stderr


def test_tuple_fields_check_their_items():
  @dataclasses.dataclass(frozen=True)
  class Job:
    seeds: tuple[int, ...] = (0,)
    rates: tuple[float, ...] = (0.5,)

  with pytest.raises(
    errors.ConfigError, match=r"^config\.seeds=\('zero',\): expected a tuple of int"
  ):
    from_config_dict(Job, {"seeds": ("zero",)})
  with pytest.raises(errors.ConfigError, match="expected a tuple of int, got True"):
    from_config_dict(Job, {"seeds": (True,)})
  assert from_config_dict(Job, {"seeds": [1, 2], "rates": (1, 0.5)}) == Job((1, 2), (1, 0.5))
