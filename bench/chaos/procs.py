"""The soak's real processes: the inference server (launch/serve.py) and the trainer
(launch/train_rl.py on the tiny RL job of tests/loop/rl_tiny_config.py), started, killed with
SIGKILL / stopped with SIGTERM, and restarted; each with its log file."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from tests.loop.rl_helpers import TINY
from tmax_jax.sandbox import runtime

ROOT = pathlib.Path(__file__).resolve().parents[2]
SLOTS = 4  # the server's decode slots: fewer than the soak's concurrent episodes (overload)
# launch/serve.py flags for the tiny job's model shape (its weights are the trainer's pushes)
SERVE_FLAGS = [
  f"--config.model.overrides.{k}={v}"
  for k, v in dict(
    vocab_size=151936, **{k: v for k, v in TINY.items() if k != "tie_word_embeddings"}
  ).items()
] + [
  "--config.model.seed=11",
  "--config.serving.engine.max_len=384",
  "--config.serving.engine.max_prefill_length=384",
  f"--config.serving.engine.max_concurrent_decodes={SLOTS}",
]


def _env() -> dict:
  return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))


@dataclasses.dataclass
class Proc:
  """A started process, its log and its sandbox owner tag (runtime.owner_tag)."""

  popen: subprocess.Popen
  log: pathlib.Path
  tag: str

  def alive(self) -> bool:
    return self.popen.poll() is None

  def kill(self) -> None:
    """SIGKILL, as the OOM killer or a preemption does it."""
    self.popen.send_signal(signal.SIGKILL)
    self.popen.wait(timeout=60)

  def stop(self, timeout_s: float = 120) -> int:
    """SIGTERM (graceful), then SIGKILL after `timeout_s`; the exit code."""
    if self.alive():
      self.popen.send_signal(signal.SIGTERM)
      try:
        self.popen.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        self.kill()
    return self.popen.returncode


def start(argv: list[str], log: pathlib.Path) -> Proc:
  with open(log, "ab") as out:
    popen = subprocess.Popen(
      [sys.executable, *argv], cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT
    )
  return Proc(popen, log, runtime.owner_tag(popen.pid))


def start_server(port: int, out: pathlib.Path, timeout_s: float = 600) -> Proc:
  """launch/serve.py on `port`; returns once it serves (its ready file)."""
  ready = out / "server.ready.json"
  ready.unlink(missing_ok=True)
  argv = [
    "launch/serve.py",
    "--config=configs/serve_tiny.py",
    f"--config.serving.port={port}",
    f"--config.ready_file={ready}",
    *SERVE_FLAGS,
  ]
  proc = start(argv, out / "server.log")
  deadline = time.monotonic() + timeout_s
  while not ready.exists():
    if not proc.alive() or time.monotonic() > deadline:
      proc.stop(5)
      raise RuntimeError(f"the server did not start; see {proc.log}")
    time.sleep(0.2)
  assert json.loads(ready.read_text())["address"].endswith(f":{port}")
  return proc


CONFIG = """\
# The chaos soak's trainer config (written by bench/chaos/procs.py): the tiny RL job, async.
import dataclasses, sys
sys.path.insert(0, {root!r})
from tests.loop.rl_helpers import tiny_rl_config
from tmax_jax.config_dict import to_config_dict
from tmax_jax.tasks.runner import RunnerConfig
from tmax_jax.tasks.sources import TaskSource


def get_config():
  cfg = tiny_rl_config({run!r}, steps=1_000_000)  # runs until the soak stops it
  r = cfg.rollout
  return to_config_dict(dataclasses.replace(
    cfg,
    tasks=TaskSource(source={tasks!r}, num_eval=1),
    serving=dataclasses.replace(cfg.serving, address={address!r}),
    runner=RunnerConfig(
      backend={backend!r}, memory_mb={memory_mb}, min_verifier_timeout_s=0.0,
      sandbox_lifetime_s={lifetime_s},
    ),
    worker=dataclasses.replace(cfg.worker, max_parallel_episodes={episodes}),
    rollout=dataclasses.replace(r, max_groups_ahead={groups_ahead}, on_failure={on_failure!r}),
    train=dataclasses.replace(
      cfg.train, checkpoint=dataclasses.replace(cfg.train.checkpoint, keep_last=3)
    ),
  ))
"""


def trainer_flags(out: pathlib.Path, tasks: pathlib.Path, address: str, opts) -> list[str]:
  """launch/train_rl.py on the soak's config (written to out/soak_config.py): the tiny RL job,
  async, against the server at `address`, on the soak's tasks, `opts.episodes` at once."""
  config = out / "soak_config.py"
  config.write_text(
    CONFIG.format(
      root=str(ROOT),
      run=str(out / "run"),
      tasks=str(tasks),
      address=address,
      backend=opts.backend,
      memory_mb=opts.memory_mb,
      lifetime_s=opts.lifetime_s,
      episodes=opts.episodes,
      groups_ahead=opts.groups_ahead,
      on_failure=opts.on_failure,
    )
  )
  return ["launch/train_rl.py", f"--config={config}"]


def start_trainer(flags: list[str], out: pathlib.Path, n: int) -> Proc:
  return start(flags, out / f"trainer.{n}.log")
