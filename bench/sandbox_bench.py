"""Sandbox start-up latency and commands/s per backend (real sandboxes on the base rootfs).

  python3 bench/sandbox_bench.py [--backends bubblewrap,podman] [--starts 5] [--commands 100]
      [--load 32x20] [--jsonl /tmp/sandbox_bench.jsonl] [--append BENCHMARKS.md]

Prints a markdown table; --append adds its rows to BENCHMARKS.md unless the 1-minute load average
before or after a backend's run exceeded half the cores (report.record_row: sandbox start and
command latencies on a busy machine measure the other jobs); --jsonl writes one metrics record per
backend.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import report  # noqa: E402  (bench/report.py)

from tmax_jax import cli
from tmax_jax.sandbox import EnvironmentSpec, open_sandbox  # noqa: E402
from tmax_jax.sandbox.images.base_rootfs import ensure_base_rootfs  # noqa: E402
from tmax_jax.sandbox.pool import SandboxPool  # noqa: E402


def _image(backend: str) -> str:
  rootfs = ensure_base_rootfs(quiet=True)
  if backend == "podman":
    from tmax_jax.sandbox.backends.podman import ensure_podman_image

    return ensure_podman_image(rootfs)
  return str(rootfs)


def bench_backend(backend: str, starts: int, commands: int, load: tuple[int, int]) -> dict:
  spec = EnvironmentSpec(image=_image(backend))
  start_s, close_s = [], []
  for _ in cli.progress(range(starts), desc=f"{backend} start", leave=False):
    t0 = time.perf_counter()
    sb = open_sandbox(spec, backend=backend)
    t1 = time.perf_counter()
    sb.close()
    start_s.append(t1 - t0)
    close_s.append(time.perf_counter() - t1)
  with open_sandbox(spec, backend=backend) as sb:
    t0 = time.perf_counter()
    for i in cli.progress(range(commands), desc=f"{backend} run", leave=False):
      assert sb.run(f"echo {i}").output == f"{i}\n"
    run_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    n_exec = max(1, commands // 5)
    for _ in range(n_exec):
      assert sb.exec(["true"]).exit_code == 0
    exec_s = (time.perf_counter() - t0) / n_exec
  n_sb, n_cmd = load
  pool = SandboxPool(n_sb, backend=backend)

  async def worker(i):
    async with pool.asession(spec) as box:
      for j in range(n_cmd):
        await asyncio.to_thread(box.run, f"echo {i}-{j}")

  async def main():
    await asyncio.gather(*(worker(i) for i in range(n_sb)))

  t0 = time.perf_counter()
  asyncio.run(main())
  load_s = time.perf_counter() - t0
  return {
    "backend": backend,
    "start_median_s": statistics.median(start_s),
    "start_max_s": max(start_s),
    "close_median_s": statistics.median(close_s),
    "run_cmds_per_s": commands / run_s,
    "exec_latency_s": exec_s,
    "load": f"{n_sb}x{n_cmd}",
    "load_s": load_s,
    "load_cmds_per_s": n_sb * n_cmd / load_s,
    "cpus": os.cpu_count(),
  }


HEADING = (
  "\n## Sandboxes (bench/sandbox_bench.py, issue 6)\n\n`python3 bench/sandbox_bench.py` (defaults: "
  "5 start/close cycles, 100 sequential persistent-shell commands, 20 `exec`s, then 32 sandboxes x "
  "20 commands through SandboxPool(32) with asyncio), base rootfs. Start = sandbox ready for "
  "commands.\n\n| when (UTC) | backend | start (median / max) | close | persistent-shell "
  "commands/s | exec latency | load (sandboxes x commands) | load wall | load commands/s | load "
  "avg |\n|---|---|---|---|---|---|---|---|---|---|\n"
)


def row_text(r: dict) -> str:
  return (
    f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {r['backend']} | "
    f"{r['start_median_s'] * 1e3:.0f} / {r['start_max_s'] * 1e3:.0f} ms | "
    f"{r['close_median_s'] * 1e3:.0f} ms | {r['run_cmds_per_s']:.0f} | "
    f"{r['exec_latency_s'] * 1e3:.0f} ms | {r['load']} | {r['load_s']:.1f} s | "
    f"{r['load_cmds_per_s']:.0f} | {r['load_before']:.2f} -> {r['load_after']:.2f} |"
  )


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument(
    "--backends", default="bubblewrap,podman", help="comma-separated sandbox backends"
  )
  parser.add_argument("--starts", type=int, default=5, help="sandbox starts timed per backend")
  parser.add_argument("--commands", type=int, default=100, help="commands timed per sandbox")
  parser.add_argument("--load", default="32x20", help="concurrent load: SANDBOXESxCOMMANDS")
  parser.add_argument("--jsonl", default=None, help="JSONL to append the results to")
  parser.add_argument("--append", default=None, help="BENCHMARKS.md to add the rows to")
  args = parser.parse_args(argv)
  n_sb, n_cmd = (int(x) for x in args.load.split("x"))
  for backend in args.backends.split(","):
    before = report.load_average()
    r = bench_backend(backend, args.starts, args.commands, (n_sb, n_cmd))
    r.update(load_before=before, load_after=report.load_average())
    if args.jsonl:
      with open(args.jsonl, "a") as f:
        f.write(json.dumps(r) + "\n")
    report.record_row(
      args.append,
      "bench/sandbox_bench.py",
      HEADING,
      row_text(r),
      # before only: podman's conmon is not our descendant, so its CPU would count as others'
      loads=(r["load_before"],),
    )
  return 0


if __name__ == "__main__":
  cli.run(main)
