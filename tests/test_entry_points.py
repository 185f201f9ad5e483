"""The README's commands as a new user mistypes them (issue 34): each entry point, run as the README
runs it, answers a typo'd field or flag, a missing file and a malformed task with a short message
naming the field or file, exit code 2 and no traceback; and answers --help quickly."""

import pathlib
import subprocess
import sys
import time

import pytest

from tmax_jax.tasks.procedural import cli as procedural

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_LINES = 3

# (id, argv after `python3`, what stderr must name). {bad}: a tasks directory holding a malformed
# task; {empty}: an empty directory; {tok}: an existing output directory.
CASES = [
  # launchers (absl + ml_collections configs)
  (
    "demo-typo",
    "launch/demo.py --config=configs/demo_cpu.py --config.rollout.group_sise=2",
    "unknown field config.rollout.group_sise (did you mean config.rollout.group_size?)",
  ),
  ("demo-missing-config", "launch/demo.py --config=configs/demo.py", "--config=configs/demo.py"),
  (
    "demo-malformed-task",
    "launch/demo.py --config=configs/demo_cpu.py --config.tasks.source={bad}",
    "config.tasks.source: {bad}/t1/task.toml",
  ),
  (
    "rl-typo",
    "launch/train_rl.py --config=configs/tmax_qwen3_8b.py --config.train.optimizer.lr=1",
    "unknown field config.train.optimizer.lr",
  ),
  (
    "rl-missing-checkpoint",
    "launch/train_rl.py --config=configs/tmax_qwen3_8b.py --config.model.checkpoint={empty}/ckpt",
    "config.model.checkpoint={empty}/ckpt: no such directory",
  ),
  (
    "rl-malformed-task",
    "launch/train_rl.py --config=configs/tmax_qwen3_8b.py --config.tasks.source={bad}",
    "config.tasks.source: {bad}/t1/task.toml",
  ),
  (
    "sft-typo",
    "launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py --config.trajectorys=x",
    "did you mean config.trajectories?",
  ),
  (
    "sft-missing-trajectories",
    "launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py "
    "--config.trajectories={empty}/t.jsonl",
    "config.trajectories={empty}/t.jsonl: no such file",
  ),
  (
    "sft-malformed-task",
    "launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py --config.tasks.source={bad}",
    "config.tasks.source: {bad}/t1/task.toml",
  ),
  (
    "eval-typo",
    "launch/eval.py --config=configs/eval_oracle.py --config.model.chekpoint=x",
    "unknown field config.model.chekpoint (did you mean config.model.checkpoint?)",
  ),
  (
    "eval-missing-tasks",
    "launch/eval.py --config=configs/eval_oracle.py --config.tasks_dir={empty}",
    "config.tasks_dir: tasks directory {empty}: no task directories",
  ),
  (
    "eval-malformed-task",
    "launch/eval.py --config=configs/eval_oracle.py --config.tasks_dir={bad}",
    "config.tasks_dir: {bad}/t1/task.toml",
  ),
  (
    "eval-unreachable-server",
    "launch/eval.py --config=configs/eval_server.py --config.tasks_dir={good} "
    "--config.address=127.0.0.1:1",
    "config.address=127.0.0.1:1: nothing answers there",
  ),
  (
    "serve-typo",
    "launch/serve.py --config=configs/serve_tiny.py --config.serving.engine.max_lenn=8",
    "unknown field config.serving.engine.max_lenn (did you mean config.serving.engine.max_len?)",
  ),
  (
    "serve-empty-checkpoint",
    "launch/serve.py --config=configs/serve_tiny.py --config.model.checkpoint={empty}",
    "config.model.checkpoint={empty}: no config.json",
  ),
  (
    "plan-typo",
    "-m tmax_jax.plan --config=configs/sft_tmax_qwen3_8b.py --config.topology.device=8",
    "did you mean config.topology.devices?",
  ),
  ("plan-missing-config", "-m tmax_jax.plan --config=configs/nope.py", "--config=configs/nope.py"),
  (
    "serve-openai-on-a-tiny-vocabulary",
    "launch/serve.py --config=configs/serve_tiny.py --config.serving.port=0 --config.openai.port=0",
    "151669 ids, but the model's vocab_size is 256",
  ),
  # argparse tools
  (
    "procedural-typo",
    "-m tmax_jax.tasks.procedural.cli --n 1 --out {empty}/p --familes x",
    "unrecognized arguments: --familes x",
  ),
  (
    "procedural-unknown-family",
    "-m tmax_jax.tasks.procedural.cli --n 1 --out {empty}/p --families nope",
    "unknown procedural family 'nope'",
  ),
  (
    "procedural-existing-out",
    "-m tmax_jax.tasks.procedural.cli --n 1 --out {tok}",
    "{tok} exists; pass --overwrite",
  ),
  (
    "tokenizers-typo",
    "-m tmax_jax.tokenizers.build --family qwen3 --out {empty}/t --overwirte",
    "unrecognized arguments: --overwirte",
  ),
  (
    "tokenizers-unknown-family",
    "-m tmax_jax.tokenizers.build --family llama --out {empty}/t",
    "argument --family: invalid choice: 'llama'",
  ),
  (
    "tokenizers-existing-out",
    "-m tmax_jax.tokenizers.build --family qwen3 --out {tok}",
    "{tok} exists",
  ),
  (
    "sandbox-build-typo",
    "-m tmax_jax.sandbox.build {empty} --prune_dayz 1",
    "unrecognized arguments: --prune_dayz 1",
  ),
  ("sandbox-build-no-dockerfile", "-m tmax_jax.sandbox.build {empty}", "{empty}: no Dockerfile"),
  (
    "sandbox-build-malformed-dockerfile",
    "-m tmax_jax.sandbox.build {bad}/t1/environment",
    "Dockerfile: line 1: RUN before FROM",
  ),
  (
    "generate-llm-typo",
    "-m tmax_jax.tasks.generate_llm --base_url http://127.0.0.1:1/v1 "
    "--model m --out {empty}/g --nn 3",
    "unrecognized arguments: --nn 3",
  ),
  (
    "generate-llm-unreachable",
    "-m tmax_jax.tasks.generate_llm --base_url http://127.0.0.1:1/v1 --model m --out {empty}/g",
    "--base_url=http://127.0.0.1:1/v1: endpoint unusable",
  ),
]
# {good}: a directory of one well-formed (procedural) task.
# The default suite runs the cases that fail before a model config is loaded or in argparse
# (about a second each); the slow suite runs them all (each loads JAX and a job config).
DEFAULT = {
  "demo-missing-config",
  "eval-typo",
  "procedural-typo",
  "procedural-unknown-family",
  "tokenizers-existing-out",
  "sandbox-build-no-dockerfile",
  "generate-llm-unreachable",
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp("entry_points")
  bad = root / "bad" / "t1"
  (bad / "environment").mkdir(parents=True)
  (bad / "instruction.md").write_text("Do it.\n")
  (bad / "task.toml").write_text('version = "1.0"\n[metadata\n')  # not TOML
  (bad / "environment" / "Dockerfile").write_text("RUN true\n")  # no FROM
  (root / "empty").mkdir()
  (root / "tok").mkdir()
  procedural.generate(root / "good", 1, families=["line_tool"], progress=False)
  return {name: str(root / name) for name in ("bad", "empty", "tok", "good")}


def _run(args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
  start = time.perf_counter()
  out = subprocess.run(
    [sys.executable, *args.split()],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=timeout,
    check=False,
  )
  return out, time.perf_counter() - start


@pytest.mark.parametrize(
  "args,expected",
  [pytest.param(a, e, id=i, marks=() if i in DEFAULT else pytest.mark.slow) for i, a, e in CASES],
)
def test_user_error_is_short_names_the_field_and_exits_2(args, expected, dirs):
  out, _ = _run(args.format(**dirs))
  shown = out.stdout + out.stderr
  assert out.returncode == 2, shown[-3000:]
  assert "Traceback" not in shown, shown[-3000:]
  error = out.stderr[out.stderr.index("error: ") :]  # log lines a job wrote before it may precede
  assert len(error.splitlines()) <= MAX_LINES, error
  assert expected.format(**dirs) in error, error


# Entry points whose --help loads no JAX: the bound is generous for a loaded CI machine (2 pytest
# workers on 2 cores); measured 0.55-0.95 s each on this machine while other jobs ran (issue 34's
# target: under 2 s on a quiet machine, against 4-12 s with TensorFlow imported before).
FAST_HELP = [
  "launch/demo.py",
  "launch/train_rl.py",
  "launch/train_sft.py",
  "launch/eval.py",
  "launch/serve.py",
  "-m tmax_jax.tasks.procedural.cli",
  "-m tmax_jax.sandbox.build",
  "-m tmax_jax.sandbox",
  "-m tmax_jax.tasks.generate_llm",
  "-m tmax_jax.tasks.generate_axes",
  "-m tmax_jax.tasks.difficulty",
]
HELP_BOUND_S = 6.0


@pytest.mark.parametrize("entry", FAST_HELP)
def test_help_is_fast_and_loads_no_tensorflow(entry):
  out, seconds = _run(f"{entry} --help", timeout=120)
  assert out.returncode in (0, 1), out.stderr[-2000:]  # absl's --help exits 1
  assert "--debug" in out.stdout or "--[no]debug" in out.stdout, out.stdout[-2000:]
  assert "tensorflow" not in (out.stdout + out.stderr).lower()
  assert seconds < HELP_BOUND_S, f"{entry} --help took {seconds:.1f} s"


HEAVY_HELP = sorted(
  [f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py") if p.name != "report.py"]
  + [
    "-m tmax_jax.plan",
    "-m tmax_jax.export",
    "-m tmax_jax.tokenizers.build",
    "-m tmax_jax.horizon.build",
    "-m tmax_jax.horizon.collect",
  ]
)


@pytest.mark.slow  # each imports JAX (and the benches torch) before parsing its flags
@pytest.mark.parametrize("entry", HEAVY_HELP)
def test_help_of_the_other_entry_points_documents_every_flag(entry):
  # cli.ArgumentParser raises while the parser is built if a flag lacks help or uses dashes.
  out, _ = _run(f"{entry} --help", timeout=300)
  assert out.returncode in (0, 1), out.stderr[-2000:]
  assert "debug" in out.stdout and "Traceback" not in out.stderr, out.stderr[-2000:]
  assert "tensorflow" not in (out.stdout + out.stderr).lower()
