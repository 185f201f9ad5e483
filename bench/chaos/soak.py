"""The chaos soak's driver: the tiny RL loop (async, more concurrent episodes than server slots)
against a separately launched server behind a TCP proxy, on the soak's tasks (tasks.py: ordinary
ones and ones whose verifier crashes, prints garbage, hangs past its timeout, fills memory or
disk), while process faults arrive at seeded random times (each kind at least once):

  sandbox_kill    SIGKILL every process of a live sandbox from the host
  stream_drop     reset every connection at the proxy (live gRPC streams cut)
  server_restart  SIGKILL the server process, start it again on the same port
  build_delay     hold the build lock of the tasks' image layer (trial starts wait)
  trainer_kill    SIGKILL the whole trainer, start it again (it resumes from its checkpoint)

It records what it did (events) and what it saw (server status, lifetimes of live sandboxes,
progress, leftovers by the project's markers after each restart and at the end); report.py judges
the invariants from that and the run's own rollout log and checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import random
import shutil
import time

from bench.chaos import faults, procs, tasks
from bench.chaos.proxy import TcpProxy
from tmax_jax.inference.server import free_port
from tmax_jax.sandbox import census
from tmax_jax.tasks import environment as envlib
from tmax_jax.tasks import loader

PROCESS_KINDS = ("sandbox_kill", "stream_drop", "server_restart", "build_delay", "trainer_kill")
RETRY_S = 120.0  # a fault that finds nothing to hit (no sandbox, no connection) retries so long
RESTART_WAIT_S = 600.0  # for a (re)started trainer's first step


@dataclasses.dataclass(frozen=True)
class Options:
  minutes: float
  seed: int
  out: pathlib.Path
  backend: str = "bubblewrap"
  faults: bool = True
  episodes: int = 8  # concurrent episodes (worker.max_parallel_episodes), > procs.SLOTS
  groups_ahead: int = 4  # rollout.max_groups_ahead
  on_failure: str = "drop"  # rollout.on_failure
  memory_mb: int = tasks.MEMORY_MB
  lifetime_s: int = 600  # runner.sandbox_lifetime_s: far above an episode here
  mean_interval_s: float = 60.0  # more process faults after each kind had its turn


@dataclasses.dataclass
class Run:
  """One trainer process: its owner tag, the rollout-log lines it wrote, how it ended, the latest
  checkpoint then."""

  tag: str
  log: str
  first_line: int
  end_line: int = -1
  killed: bool = False
  ckpt: int = 0


def fault_plan(
  rng: random.Random,
  window_s: float,
  enabled: bool,
  mean_s: float,
  all_kinds: tuple[str, ...] = PROCESS_KINDS,
) -> list:
  """[(seconds into the window, kind)]: every kind of `all_kinds` once in its own slot of mean_s
  (trainer_kill in the first half: it must restart and recover in the window), the slots
  squeezed into the window when it is short; then Poisson arrivals of any kind, mean_s apart,
  until the last minute (a long soak repeats every kind, trainer kills included)."""
  if not enabled:
    return []
  kinds = [k for k in all_kinds if k != "trainer_kill"]
  rng.shuffle(kinds)
  if "trainer_kill" in all_kinds:
    kinds.insert(rng.randrange(len(kinds) // 2 + 1), "trainer_kill")
  last = max(20.0, window_s - 60.0)
  lo = 10.0
  hi = min(last, lo + len(kinds) * mean_s)
  slot = (hi - lo) / len(kinds)
  plan = [(lo + i * slot + rng.uniform(0, slot * 0.8), k) for i, k in enumerate(kinds)]
  t = hi
  while True:
    t += rng.expovariate(1.0 / mean_s)
    if t > last:
      break
    plan.append((t, rng.choice(all_kinds)))
  return sorted(plan)


def count_lines(path: pathlib.Path) -> int:
  return len(path.read_text().splitlines()) if path.exists() else 0


def latest_checkpoint(run_dir: pathlib.Path) -> int:
  steps = [int(p.name) for p in (run_dir / "ckpt").glob("*") if p.name.isdigit()]
  return max(steps, default=0)


def max_step(metrics: pathlib.Path) -> int:
  rows = metrics.read_text().splitlines() if metrics.exists() else []
  return max((json.loads(r)["step"] for r in rows if r.strip()), default=0)


class Soak:
  """One soak (see the module docstring); `run()` returns what report.analyze needs."""

  kinds = PROCESS_KINDS  # the fault kinds it injects (bench/chaos/cluster.py: node faults)

  def __init__(self, opts: Options):
    self.opts, self.rng = opts, random.Random(opts.seed)
    self.out = opts.out
    self.run_dir = self.out / "run"
    self.metrics, self.rollouts = self.run_dir / "metrics.jsonl", self.run_dir / "rollouts.jsonl"
    self.events: list[dict] = []
    self.samples = {"status": [], "lifetime": [], "progress": []}
    self.runs: list[Run] = []
    self.unexpected: list[str] = []
    self._checks: list = []  # (due predicate, action) run by the loop

  # ------------------------------------------------------------------------------ set-up
  def _prepare(self) -> None:
    self._write_tasks()
    self.port = free_port()
    self.server = procs.start_server(self.port, self.out)
    self.proxy = TcpProxy(f"127.0.0.1:{self.port}")
    self.flags = procs.trainer_flags(self.out, self.out / "tasks", self.proxy.address, self.opts)

  def _write_tasks(self) -> None:
    """The soak's tasks in out/tasks (an earlier soak's out cleared first), their image built (a
    warm cache; its layers held by build_delay)."""
    if self.out.exists() and any(self.out.iterdir()):
      if not (self.out / "soak_config.py").exists():
        raise SystemExit(f"error: --out {self.out} is not empty and holds no earlier soak")
      shutil.rmtree(self.out)
    (self.out / "tasks").mkdir(parents=True)
    tag = f"chaos-soak-{self.opts.seed}-{self.out.name}"
    self.task_kinds = tasks.write_tasks(self.out / "tasks", faults=self.opts.faults, tag=tag)
    first = loader.load_task_dir(self.out / "tasks" / next(iter(self.task_kinds)))
    built = envlib.built_spec(first)  # the image every soak task builds (warm cache, its layers)
    self.layers = list(built.image.layers)

  def _start_trainer(self) -> None:
    n = len(self.runs)
    self.trainer = procs.start_trainer(self.flags, self.out, n)
    self.runs.append(Run(self.trainer.tag, str(self.trainer.log), count_lines(self.rollouts)))

  def _wait_for_step(self, after: int, what: str) -> None:
    deadline = time.monotonic() + RESTART_WAIT_S
    while max_step(self.metrics) <= after:
      if not self.trainer.alive() or time.monotonic() > deadline:
        raise RuntimeError(f"{what}: the trainer made no step; see {self.trainer.log}")
      time.sleep(1.0)

  # ------------------------------------------------------------------------------ faults
  def _event(self, kind: str, **detail) -> dict:
    ev = {"kind": kind, "at": time.time(), "step": max_step(self.metrics), **detail}
    self.events.append(ev)
    return ev

  def _sandbox_kill(self) -> dict | None:
    live = faults.live_sandboxes(self.trainer.tag, self.opts.backend)
    if not live:
      return None
    name = self.rng.choice(live)
    self._sample_lifetime(name)
    return self._event(
      "sandbox_kill", sandbox=name, signalled=faults.kill_sandbox(name, self.opts.backend)
    )

  def _stream_drop(self) -> dict | None:
    cut = self.proxy.cut()
    return self._event("stream_drop", connections=cut) if cut else None

  def _server_restart(self) -> dict:
    ev = self._event("server_restart")
    self.server.kill()
    self.server = procs.start_server(self.port, self.out)
    ev["down_s"] = round(time.time() - ev["at"], 1)
    return ev

  def _build_delay(self) -> dict:
    seconds = self.rng.uniform(8.0, 20.0)
    faults.BuildLock(self.layers).hold(seconds)
    return self._event("build_delay", seconds=round(seconds, 1))

  def _trainer_kill(self) -> dict:
    run = self.runs[-1]
    ev = self._event("trainer_kill", tag=run.tag)
    self.trainer.kill()
    run.end_line, run.killed = count_lines(self.rollouts), True
    run.ckpt = ev["ckpt"] = latest_checkpoint(self.run_dir)
    ev["leftovers_before_restart"] = census.take({run.tag}).counts()
    steps_written = count_lines(self.metrics)
    self._start_trainer()

    def after_next_start() -> None:  # the new trainer stepped: its start-up sweep has run
      ev["leftovers_after_next_start"] = census.take({run.tag}).counts()
      ev["restarted_at"] = time.time()

    self._checks.append((lambda: count_lines(self.metrics) > steps_written, after_next_start))
    return ev

  def _apply(self, kind: str) -> dict | None:
    return getattr(self, f"_{kind}")()

  # ------------------------------------------------------------------------------ sampling
  def _sample_lifetime(self, name: str) -> None:
    """A live sandbox's lifetime enforcer; a sandbox caught between its anchor and its enforcer
    (starting, restarting) is looked at again a moment later."""
    for _ in range(3):
      given = faults.lifetime_of(name, self.opts.backend)
      if given is not None:
        break
      time.sleep(0.5)
    self.samples["lifetime"].append({"sandbox": name, "at": time.time(), "lifetime_s": given})

  def _server_address(self) -> str:
    """Where the episodes' server answers Status (the cluster soak: its router)."""
    return f"127.0.0.1:{self.port}"

  def _sandbox_owners(self) -> list[str]:
    """The owner tags whose live sandboxes are sampled now (the cluster soak: its hosts')."""
    return [self.trainer.tag]

  def _sample(self) -> None:
    st = faults.server_status(self._server_address())
    if st is not None:
      self.samples["status"].append(
        {"at": time.time(), "active": st.active_requests, "waiting": st.waiting_requests}
      )
    self.samples["progress"].append((time.time(), max_step(self.metrics)))
    live = [
      name
      for owner in self._sandbox_owners()
      for name in faults.live_sandboxes(owner, self.opts.backend)
    ]
    if live:
      self._sample_lifetime(self.rng.choice(live))

  def _watch_processes(self) -> None:
    if not self.trainer.alive():
      self.unexpected.append(f"trainer {self.trainer.tag} exited ({self.trainer.popen.returncode})")
      self.runs[-1].end_line = count_lines(self.rollouts)
      self.runs[-1].ckpt = latest_checkpoint(self.run_dir)
      self._start_trainer()
    if not self.server.alive():
      self.unexpected.append(f"server exited ({self.server.popen.returncode})")
      self.server = procs.start_server(self.port, self.out)

  # ------------------------------------------------------------------------------ the run
  def run(self) -> dict:
    started = time.time()
    self._prepare()
    try:
      self._start_trainer()
      self._wait_for_step(0, "start")
      window_s = self.opts.minutes * 60.0
      t0 = time.monotonic()
      self.window = (time.time(), None)
      plan = fault_plan(self.rng, window_s, self.opts.faults, self.opts.mean_interval_s, self.kinds)
      self._loop(t0, window_s, plan)
      self.window = (self.window[0], time.time())
      self._wait_checks()
    finally:
      code = self._stop()
    return {
      "options": {k: str(v) for k, v in dataclasses.asdict(self.opts).items()},
      "kinds": list(self.kinds),
      "task_kinds": self.task_kinds,
      "events": self.events,
      "samples": self.samples,
      "runs": [dataclasses.asdict(r) for r in self.runs],
      "unexpected": self.unexpected,
      "final_exit_code": code,
      "window": self.window,
      "wall_s": round(time.time() - started, 1),
      "leftovers_at_end": census.take(self._owners()).counts(),
      "run_dir": str(self.run_dir),
    }

  def _stop(self) -> int:
    """Ends the soak's processes (the trainer SIGTERMed: it closes its sandboxes) -> the
    trainer's exit code."""
    code = self.trainer.stop()
    run = self.runs[-1] if self.runs else None
    if run is not None:
      run.end_line, run.ckpt = count_lines(self.rollouts), latest_checkpoint(self.run_dir)
    self.server.stop(30)
    self.proxy.close()
    return code

  def _owners(self) -> set[str]:
    """The owner tags of every process that opened sandboxes in the soak."""
    return {r.tag for r in self.runs}

  def ended(self) -> bool:
    """The soak cannot go on (the cluster soak's launcher exited): the loop stops early."""
    return False

  def _loop(self, t0: float, window_s: float, plan: list) -> None:
    """Until the window ends and every planned fault had its turn (one that finds nothing to
    hit, e.g. no live sandbox while the trainer restarts, is tried for RETRY_S)."""
    pending: list = []  # faults that found nothing to hit yet: (first try, kind)
    next_sample = 0.0
    while (time.monotonic() - t0 < window_s or plan or pending) and not self.ended():
      now = time.monotonic() - t0
      while plan and plan[0][0] <= now:
        pending.append((now, plan.pop(0)[1]))
      for item in list(pending):
        if self._apply(item[1]) is not None or now - item[0] > RETRY_S:
          pending.remove(item)
      self._run_checks()
      if now >= next_sample:
        self._sample()
        next_sample = now + 2.0
      self._watch_processes()
      time.sleep(0.25)

  def _run_checks(self) -> None:
    for item in list(self._checks):
      due, action = item
      if due():
        action()
        self._checks.remove(item)

  def _wait_checks(self) -> None:
    """Checks still due (a restart late in the window): give them the restart's time."""
    deadline = time.monotonic() + RESTART_WAIT_S
    while self._checks and time.monotonic() < deadline and self.trainer.alive():
      self._run_checks()
      time.sleep(1.0)
