"""The cluster launch recipes are valid shell and start the same launcher with the same flags on
every host (a fake `srun` / `gcloud` records the command lines they run)."""

import os
import pathlib
import stat
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _fake(bin_dir: pathlib.Path, name: str, log: pathlib.Path) -> None:
  path = bin_dir / name
  path.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {log}\n')
  path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_slurm_recipe_runs_the_launcher_under_srun(tmp_path):
  _fake(tmp_path, "srun", tmp_path / "srun.log")
  env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", SLURM_SUBMIT_DIR=str(ROOT))
  subprocess.run(
    ["bash", "launch/slurm/train_rl.sbatch", "configs/tmax_qwen3_5_9b.py", "--config.steps=3"],
    cwd=ROOT,
    env=env,
    check=True,
  )
  args = (tmp_path / "srun.log").read_text().splitlines()
  assert args == [
    "--kill-on-bad-exit=1",
    "python3",
    "launch/train_rl.py",
    "--config=configs/tmax_qwen3_5_9b.py",
    "--config.steps=3",
  ]


def test_tpu_recipe_runs_the_same_command_on_every_worker(tmp_path):
  _fake(tmp_path, "gcloud", tmp_path / "gcloud.log")
  env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}", TMAX_REPO="/repo")
  subprocess.run(
    [
      "bash",
      "launch/tpu/train_rl.sh",
      "my-v5p",
      "us-east5-a",
      "configs/tmax_qwen3_5_9b.py",
      "--config.output_dir=/shared/run",
    ],
    cwd=ROOT,
    env=env,
    check=True,
  )
  args = (tmp_path / "gcloud.log").read_text().splitlines()
  assert args[:6] == ["compute", "tpus", "tpu-vm", "ssh", "my-v5p", "--zone=us-east5-a"]
  assert "--worker=all" in args
  command = args[-1]
  assert command == (
    "cd /repo && TMAX_AUTO_DISTRIBUTED=1 python3 launch/train_rl.py "
    "--config=configs/tmax_qwen3_5_9b.py --config.output_dir=/shared/run"
  )
