"""The README's commands as a new user mistypes them (issue 34): each entry point, run as the README
runs it, answers a typo'd field or flag, a missing file and a malformed task with a short message
naming the field or file, exit code 2 and no traceback; and answers --help quickly."""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from tests.conftest import require_base_rootfs
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
    "-m tmax_jax.sandbox.images build {empty} --prune_dayz 1",
    "unrecognized arguments: --prune_dayz 1",
  ),
  (
    "sandbox-build-no-dockerfile",
    "-m tmax_jax.sandbox.images build {empty}",
    "{empty}: no Dockerfile",
  ),
  (
    "sandbox-build-malformed-dockerfile",
    "-m tmax_jax.sandbox.images build {bad}/t1/environment",
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
  # issue 47: tracebacks where `error: ...` was promised ({files}: corrupt input files)
  (
    "config-show-wrong-type",
    "-m tmax_jax.config show configs/demo_cpu.py --config.rollout.group_size=sixteen",
    "--config.rollout.group_size=sixteen: invalid literal for int()",
  ),
  (
    "demo-misspelt-dtype",
    "launch/demo.py --config=configs/demo_cpu.py --config.model.compute_dtype=bf16",
    "config.model: compute_dtype='bf16': not a dtype",
  ),
  (
    "demo-misspelt-harness",  # before any model builds
    "launch/demo.py --config=configs/demo_cpu.py --config.episode.harness=bash_tol",
    "config.episode.harness='bash_tol': no such harness (did you mean 'bash_tool'?)",
  ),
  (
    "eval-corrupt-parquet",
    "launch/eval.py --config=configs/eval_oracle.py --config.tasks_dir={files}/bad.parquet",
    "config.tasks_dir: {files}/bad.parquet: not a readable parquet file",
  ),
  (
    "sft-malformed-trajectories",  # before the mesh and the checkpoint (which fail here)
    "launch/train_sft.py --config=configs/sft_tmax_qwen3_8b.py "
    "--config.trajectories={files}/bad.jsonl",
    "config.trajectories: {files}/bad.jsonl:2: not JSON",
  ),
  (
    "pipeline-one-prefix",  # was `pipeline: ...`; the harness is checked before the endpoint
    "-m tmax_jax.pipeline --endpoint http://127.0.0.1:1/v1 --model m --out {empty}/pl "
    "--harness bash_tol",
    "--harness=bash_tol: no such harness",
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
  "config-show-wrong-type",
  "demo-misspelt-dtype",
  "demo-misspelt-harness",
  "eval-corrupt-parquet",
  "sft-malformed-trajectories",
  "pipeline-one-prefix",
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
  _corrupt_files(root / "files")
  return {name: str(root / name) for name in ("bad", "empty", "tok", "good", "files")}


def _corrupt_files(d: pathlib.Path) -> None:
  """One corrupt input of every kind an entry point reads."""
  d.mkdir()
  (d / "bad.parquet").write_bytes(b"PAR1 not a parquet file")
  (d / "bad.jsonl").write_text('{"tokens": [1, 2], "loss_mask": [0, 1]}\n{"tokens": [1\n')
  (d / "bad.json").write_text("{not json\n")
  (d / "bad_config.py").write_text("def get_config(:\n")
  (d / "ckpt").mkdir()
  (d / "ckpt" / "config.json").write_text("{not json\n")
  (d / "ckpt" / "model.safetensors").write_bytes(b"")
  trial = d / "job" / "t1__0"
  (trial / "agent").mkdir(parents=True)
  (d / "job" / "config.json").write_text("{}")
  (trial / "result.json").write_text("{not json\n")
  (trial / "agent" / "trajectory.json").write_text("{}")
  (d / "horizon").mkdir()
  (d / "horizon" / "build.jsonl").write_text('{"event": "node"\n')


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
  "launch/harbor_eval.py",
  "launch/math_eval.py",
  "launch/router.py",
  "launch/cluster.py",
  "-m tmax_jax.rehearse",
  "-m tmax_jax.tasks.procedural.cli",
  "-m tmax_jax.sandbox.images",
  "-m tmax_jax.sandbox",
  "-m tmax_jax.tasks.generate_llm",
  "-m tmax_jax.tasks.generate_axes",
  "-m tmax_jax.tasks.difficulty",
  "-m tmax_jax.harbor.tasks",
  "-m tmax_jax.harbor.jobs",
]
HELP_BOUND_S = 6.0


def check_help_text(entry: str, text: str) -> None:
  """No development leftovers (issue numbers), and an argparse tool's description is whole
  sentences (a docstring's first line alone stopped mid-sentence)."""
  leftover = re.search(r".{0,40}\bissues?\b.{0,40}", text, re.IGNORECASE)
  assert leftover is None, f"{entry} --help: {leftover.group(0)!r}"
  joined = re.search(r".{0,40}\S {4,}--.{0,20}", text)  # a docstring's `\` joined two lines
  assert joined is None, f"{entry} --help: {joined.group(0)!r}"
  if text.startswith("usage:"):  # argparse: the paragraph after the usage block
    description = text.split("\n\n")[1]
    assert not description.startswith(("options:", "positional arguments:")), f"{entry}: none"
    assert description.rstrip()[-1] in ".)", f"{entry} --help, cut: {description!r}"


@pytest.mark.parametrize("entry", FAST_HELP)
def test_help_is_fast_and_loads_no_tensorflow(entry):
  out, seconds = _run(f"{entry} --help", timeout=120)
  assert out.returncode in (0, 1), out.stderr[-2000:]  # absl's --help exits 1
  assert "--debug" in out.stdout or "--[no]debug" in out.stdout, out.stdout[-2000:]
  assert "tensorflow" not in (out.stdout + out.stderr).lower()
  assert seconds < HELP_BOUND_S, f"{entry} --help took {seconds:.1f} s"
  check_help_text(entry, out.stdout)


HEAVY_HELP = sorted(
  [f"bench/{p.name}" for p in (ROOT / "bench").glob("*.py") if p.name != "report.py"]
  + [
    "-m tmax_jax.plan",
    "-m tmax_jax.export",
    "-m tmax_jax.tokenizers.build",
    "-m tmax_jax.horizon.build",
    "-m tmax_jax.horizon.collect",
    "-m tmax_jax.harbor.trajectories",
    "-m tmax_jax.pipeline",
    "-m tmax_jax.config",
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
  check_help_text(entry, out.stdout)


# --- issue 47: every entry point, a wrong-typed value, a misspelt enum and a corrupt file ------
# (entry, kind, arguments, what stderr must name). {files}: _corrupt_files. An entry point without
# a flag of a kind has no case of it: procedural.cli, generate_llm, tokenizers.build and sandbox
# read no input file; generate_axes, sandbox.images, harbor.tasks, harbor.jobs, difficulty and
# task_images have no enum flag; tokenizers.build, harbor.tasks and harbor.jobs no typed one.
# `python3 -m tmax_jax.harbor` is Harbor's own CLI (its flags and errors are Harbor's).
DEMO, RL, SFT = "configs/demo_cpu.py", "configs/tmax_qwen3_8b.py", "configs/sft_tmax_qwen3_8b.py"
HARBOR_EVAL = "launch/harbor_eval.py --serve=configs/serve_tiny.py --config=configs/harbor_eval.py"
WALK = [
  (
    "launch/demo.py",
    "type",
    f"--config={DEMO} --config.seeds=zero",
    "config.seeds=('zero',): expected a tuple of int, got 'zero'",
  ),
  ("launch/demo.py", "enum", f"--config={DEMO} --config.model.compute_dtype=bf16", "not a dtype"),
  (
    "launch/demo.py",
    "file",
    f"--config={DEMO} --config.tasks.source={{files}}/bad.parquet",
    "config.tasks.source: {files}/bad.parquet: not a readable parquet file",
  ),
  ("launch/train_rl.py", "type", f"--config={RL} --config.steps=many", "--config.steps=many"),
  (
    "launch/train_rl.py",
    "enum",
    f"--config={RL} --config.train.loss.policy_loss=dpo",
    "loss.policy_loss='dpo'; expected one of",
  ),
  (
    "launch/train_rl.py",
    "file",
    f"--config={RL} --config.tasks.source={{files}}/bad.parquet",
    "config.tasks.source: {files}/bad.parquet: not a readable parquet file",
  ),
  ("launch/train_sft.py", "type", f"--config={SFT} --config.seq_len=long", "--config.seq_len=long"),
  (
    "launch/train_sft.py",
    "enum",
    f"--config={SFT} --config.model.param_dtype=fp32",
    "config.model: param_dtype='fp32': not a dtype",
  ),
  (
    "launch/train_sft.py",
    "file",
    f"--config={SFT} --config.trajectories={{files}}/bad.jsonl",
    "config.trajectories: {files}/bad.jsonl:2: not JSON",
  ),
  (
    "launch/eval.py",
    "type",
    "--config=configs/eval_oracle.py --config.runs_per_task=two",
    "--config.runs_per_task=two",
  ),
  (
    "launch/eval.py",
    "enum",
    "--config=configs/eval_oracle.py --config.runner.backend=bwrap",
    "backend='bwrap': not a sandbox backend",
  ),
  (
    "launch/eval.py",
    "file",
    "--config=configs/eval_oracle.py --config.tasks_dir={files}/bad.parquet",
    "config.tasks_dir: {files}/bad.parquet: not a readable parquet file",
  ),
  (
    "launch/serve.py",
    "type",
    "--config=configs/serve_tiny.py --config.serving.port=http",
    "--config.serving.port=http",
  ),
  (
    "launch/serve.py",
    "enum",
    "--config=configs/serve_tiny.py --config.serving.param_dtype=bf16",
    "serving.param_dtype='bf16': not a dtype",
  ),
  (
    "launch/serve.py",
    "file",
    "--config=configs/serve_tiny.py --config.model.checkpoint={files}/ckpt",
    "config.model.checkpoint={files}/ckpt: config.json is not JSON",
  ),
  (
    "launch/harbor_eval.py",
    "type",
    "--config.n_concurrent=two",
    "--config.n_concurrent=two",
  ),
  (
    "launch/harbor_eval.py",
    "enum",
    "--serve.model.compute_dtype=bf16",
    "serve.model: compute_dtype='bf16': not a dtype",
  ),
  (
    "launch/harbor_eval.py",
    "file",
    "--serve.model.checkpoint={files}/ckpt",
    "serve.model.checkpoint={files}/ckpt: config.json is not JSON",
  ),
  (
    "launch/math_eval.py",
    "type",
    "--config=configs/eval_aime.py --config.samples_per_problem=eight",
    "--config.samples_per_problem=eight",
  ),
  (
    "launch/math_eval.py",
    "enum",
    "--config=configs/eval_aime.py --config.model.compute_dtype=bf16",
    "config.model: compute_dtype='bf16': not a dtype",
  ),
  (
    "launch/math_eval.py",
    "file",
    "--config=configs/eval_aime.py --config.problems={files}/bad.jsonl",
    "{files}/bad.jsonl",
  ),
  ("-m tmax_jax.rehearse", "type", f"--config={SFT} --steps=two", "--steps=two"),
  (
    "-m tmax_jax.rehearse",
    "enum",
    f"--config={SFT} --config.model.compute_dtype=bf16",
    "config.model: compute_dtype='bf16': not a dtype",
  ),
  (
    "-m tmax_jax.rehearse",
    "file",
    "--config={files}/bad_config.py",
    "{files}/bad_config.py:1: not valid Python",
  ),
  ("-m tmax_jax.plan", "type", f"--config={SFT} --devices=three", "--devices=three"),
  (
    "-m tmax_jax.plan",
    "enum",
    f"--config={SFT} --config.model.compute_dtype=bf16",
    "config.model: compute_dtype='bf16': not a dtype",
  ),
  ("-m tmax_jax.plan", "file", "--config={files}/bad_config.py", "not valid Python"),
  ("-m tmax_jax.export", "type", "--step=last --checkpoint_dir={empty}", "--step=last"),
  (
    "-m tmax_jax.export",
    "enum",
    f"--step=1 --config={SFT} --config.model.compute_dtype=bf16",
    "config.model: compute_dtype='bf16': not a dtype",
  ),
  ("-m tmax_jax.export", "file", "--step=1 --config={files}/bad_config.py", "not valid Python"),
  (
    "-m tmax_jax.config",
    "type",
    f"show {DEMO} --config.rollout.group_size=sixteen",
    "--config.rollout.group_size=sixteen",
  ),
  (
    "-m tmax_jax.config",
    "enum",
    f"show {DEMO} --config.model.compute_dtype=bf16",
    "config.model: compute_dtype='bf16': not a dtype",
  ),
  ("-m tmax_jax.config", "file", "show {files}/bad_config.py", "bad_config.py:1: not valid Python"),
  (
    "-m tmax_jax.tasks.procedural.cli",
    "type",
    "--n ten --out {empty}/w1",
    "argument --n: invalid int value: 'ten'",
  ),
  (
    "-m tmax_jax.tasks.procedural.cli",
    "enum",
    "--n 1 --out {empty}/w2 --families line_tol",
    "unknown procedural family 'line_tol' (did you mean 'line_tool'",
  ),
  (
    "-m tmax_jax.pipeline",
    "type",
    "--endpoint http://127.0.0.1:1/v1 --model m --out {empty}/w3 --n ten",
    "argument --n: invalid int value",
  ),
  (
    "-m tmax_jax.pipeline",
    "enum",
    "--endpoint http://127.0.0.1:1/v1 --model m --out {empty}/w3 --family qwen4",
    "--family=qwen4: unknown tokenizer family 'qwen4'",
  ),
  (
    "-m tmax_jax.pipeline",
    "file",
    "--endpoint http://127.0.0.1:1/v1 --model m --out {empty}/w3 --taxonomy {files}/bad.json",
    "{files}/bad.json: not JSON",
  ),
  (
    "-m tmax_jax.tasks.generate_llm",
    "type",
    "--base_url http://127.0.0.1:1/v1 --model m --out {empty}/w4 --max_attempts x",
    "argument --max_attempts: invalid int value",
  ),
  (
    "-m tmax_jax.tasks.generate_llm",
    "enum",
    "--base_url http://127.0.0.1:1/v1 --model m --out {empty}/w4 --backend bwrap",
    "backend='bwrap': not a sandbox backend",
  ),
  (
    "-m tmax_jax.tasks.generate_axes",
    "type",
    "--n ten --out {empty}/a.jsonl",
    "argument --n: invalid int value",
  ),
  (
    "-m tmax_jax.tasks.generate_axes",
    "file",
    "--n 1 --out {empty}/a.jsonl --taxonomy {files}/bad.json",
    "{files}/bad.json: not JSON",
  ),
  (
    "-m tmax_jax.tokenizers.build",
    "enum",
    "--family qwen4 --out {empty}/w5",
    "argument --family: invalid choice: 'qwen4'",
  ),
  (
    "-m tmax_jax.sandbox",
    "type",
    "--mirror debian.org",
    "argument --mirror: 'debian.org' is not a mirror URL",
  ),
  (
    "-m tmax_jax.sandbox.images",
    "type",
    "build --prune_days week",
    "argument --prune_days: invalid float value",
  ),
  (
    "-m tmax_jax.sandbox.images",
    "file",
    "build {bad}/t1/environment",
    "{bad}/t1/environment/Dockerfile: line 1: RUN before FROM",
  ),
  ("-m tmax_jax.harbor.tasks", "file", "{bad} --out {empty}/w6", "{bad}/t1/task.toml"),
  (
    "-m tmax_jax.harbor.trajectories",
    "type",
    "{files}/job --out {empty}/r.jsonl --min_reward high",
    "argument --min_reward: invalid float value",
  ),
  (
    "-m tmax_jax.harbor.trajectories",
    "enum",
    "{files}/job --out {empty}/r.jsonl --family qwen4",
    "--family=qwen4: unknown tokenizer family",
  ),
  (
    "-m tmax_jax.harbor.trajectories",
    "file",
    "{files}/job --out {empty}/r.jsonl",
    "{files}/job/t1__0/result.json: not JSON",
  ),
  (
    "-m tmax_jax.harbor.jobs",
    "file",
    "{files}/bad.json {empty}/jobs",
    "{files}/bad.json: not JSON",
  ),
  (
    "-m tmax_jax.horizon.build",
    "type",
    "--out {empty}/w7 --level hard",
    "argument --level: invalid int value",
  ),
  (
    "-m tmax_jax.horizon.build",
    "enum",
    "--out {empty}/w7 --probe shortcut",
    "argument --probe: invalid choice: 'shortcut'",
  ),
  (
    "-m tmax_jax.horizon.build",
    "file",
    "--out {empty}/w7 --mode llm --professional_seeds {files}/bad.json "
    "--base_url http://127.0.0.1:1/v1 --model m",
    "{files}/bad.json: not JSON",
  ),
  (
    "-m tmax_jax.horizon.collect",
    "type",
    "--build {files}/horizon --out {empty}/c.jsonl --runs_per_task two",
    "argument --runs_per_task: invalid int value",
  ),
  (
    "-m tmax_jax.horizon.collect",
    "enum",
    "--build {files}/horizon --out {empty}/c.jsonl --harness bash_tol",
    "--harness=bash_tol: no such harness",
  ),
  (
    "-m tmax_jax.horizon.collect",
    "file",
    "--build {files}/horizon --out {empty}/c.jsonl",
    "{files}/horizon/build.jsonl:1: not JSON",
  ),
  ("-m tmax_jax.tasks.difficulty", "type", "--k one", "argument --k: invalid int value"),
  (
    "-m tmax_jax.tasks.difficulty",
    "file",
    "--rollouts {files}/bad.jsonl",
    "{files}/bad.jsonl:2: not JSON",
  ),
  ("launch/router.py", "type", "--replicas=127.0.0.1:1 --port=eighty", "flag --port=eighty"),
  ("launch/router.py", "value", "--replicas=nohost", "--replicas: replica address 'nohost'"),
  ("launch/cluster.py", "type", "--replicas=two", "flag --replicas=two"),
  ("launch/cluster.py", "value", "--address=127.0.0.1:1", "--address=127.0.0.1:1: nothing answers"),
  ("bench/task_images.py", "file", "--tb2 {bad}", "{bad}/t1/task.toml"),
  ("bench/chaos_soak.py", "type", "--minutes ten", "argument --minutes: invalid float value"),
  ("bench/chaos_soak.py", "enum", "--minutes 1 --backend dockr", "invalid choice: 'dockr'"),
]
# Tools that fail in about a second (the default suite); the rest load JAX or a job
# config first (3-20 s each: the slow suite).
FAST_WALK = {
  "launch/router.py",
  "launch/cluster.py",
  "-m tmax_jax.tasks.procedural.cli",
  "-m tmax_jax.tasks.generate_axes",
  "-m tmax_jax.sandbox",
  "-m tmax_jax.sandbox.images",
  "-m tmax_jax.harbor.tasks",
  "-m tmax_jax.harbor.jobs",
  "-m tmax_jax.tasks.difficulty",
}


def _walk_args(entry: str, args: str) -> str:
  return f"{HARBOR_EVAL} {args}" if entry == "launch/harbor_eval.py" else f"{entry} {args}"


@pytest.mark.parametrize(
  "entry,args,expected",
  [
    pytest.param(e, _walk_args(e, a), x, id=f"{e.split()[-1]}-{k}", marks=_marks)
    for e, k, a, x in WALK
    for _marks in [() if e in FAST_WALK else (pytest.mark.slow,)]
  ],
)
def test_every_entry_point_answers_a_wrong_value_or_file_with_error_and_exit_2(
  entry, args, expected, dirs
):
  out, _ = _run(args.format(**dirs))
  shown = out.stdout + out.stderr
  assert out.returncode == 2, shown[-3000:]
  assert "Traceback" not in shown, shown[-3000:]
  error = out.stderr[out.stderr.index("error: ") :]
  assert len(error.splitlines()) <= MAX_LINES, error
  assert expected.format(**dirs) in error, error


def test_the_walk_covers_every_launcher_and_readme_command():
  launchers = {f"launch/{p.name}" for p in (ROOT / "launch").glob("*.py")}
  readme = (ROOT / "README.md").read_text()
  modules = {f"-m {m}" for m in re.findall(r"python3 -m (tmax_jax[\w.]*\w)", readme)}
  benches = set(re.findall(r"python3 (bench/\w+\.py)", readme))
  walked = {e for e, _, _, _ in WALK}
  missing = (launchers | modules | benches) - walked - {"-m tmax_jax.harbor"}  # Harbor's own CLI
  assert not missing, sorted(missing)


def test_a_failing_run_step_says_its_line_and_its_last_output_line(tmp_path):
  require_base_rootfs()
  if os.geteuid() != 0:
    pytest.skip("building task images needs root")
  (tmp_path / "Dockerfile").write_text(
    "FROM tmax-base:bookworm\nRUN echo reading lists; echo 'E: no package nope' >&2; exit 100\n"
  )
  out, _ = _run(f"-m tmax_jax.sandbox.images build {tmp_path}")
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
  error = out.stderr[out.stderr.index("error: ") :]
  assert (
    error == f"error: {tmp_path}/Dockerfile: line 2 RUN failed (exit 100):\nE: no package nope\n"
  )


def test_harbor_jobs_exports_an_eval_whose_tasks_came_from_a_parquet(tmp_path):
  from tests.harbor.harbor_helpers import require_harbor  # imports JAX: only for this test

  require_harbor()
  procedural.generate(tmp_path / "tasks.parquet", 2, families=["line_tool"], progress=False)
  trials = [
    {"task": "line_tool-d0-s0", "run": 0, "reward": 1.0, "duration_s": 2.0, "status": "ok"},
    {"task": "line_tool-d1-s1", "run": 0, "reward": 0.0, "error": "SandboxError: lost"},
  ]
  results = {
    "config": {"tasks_dir": str(tmp_path / "tasks.parquet"), "policy": "oracle"},
    "trials": trials,
    "started_at": "2026-01-01T00:00:00",
    "finished_at": "2026-01-01T00:01:00",
  }
  (tmp_path / "results.json").write_text(json.dumps(results))
  out, _ = _run(f"-m tmax_jax.harbor.jobs {tmp_path}/results.json {tmp_path}/jobs --job_name j")
  assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
  job = tmp_path / "jobs" / "j"
  assert out.stdout.strip() == str(job)
  assert sorted(p.name for p in job.iterdir() if p.is_dir()) == [
    "line_tool-d0-s0__0",
    "line_tool-d1-s1__0",
  ]
