"""The router's cost and what its session affinity buys, on loopback with two real replicas
(launch/serve.py, configs/serve_tiny.py: a tiny random Qwen3 on the CPU):
  1. overhead: one short request (8-token prompt, 1 greedy token) straight to a replica vs the
     same request through the router (pinned by its session to that replica), alternated pair by
     pair (`--pairs`); min and median ms of each side and of the difference;
  2. prefix-cache hit rate over E concurrent episodes x T turns (each turn's prompt = the previous
     prompt + the reply + 8 new tokens): through the router with a session per episode (affinity)
     vs turns sent round-robin to the replicas (no affinity); hit rate = prompt tokens the replicas
     reused from their prefix caches / all prompt tokens (their Status counters), the tokens
     they prefilled, and wall time; one warm-up run of each side, then `--reps` alternated.

  python3 bench/router_bench.py [--pairs 30] [--episodes 8] [--turns 8] [--reps 2] [--out r.json]
Prints JSON and markdown rows (BENCHMARKS.md rows are taken on a quiet machine: see the loads).
"""

import asyncio
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import report  # noqa: E402  (bench/report.py)

from tmax_jax import cli, json_io  # noqa: E402
from tmax_jax.inference import client as client_lib  # noqa: E402
from tmax_jax.inference import router as router_lib  # noqa: E402
from tmax_jax.inference import sampling  # noqa: E402

GREEDY = sampling.SamplingParams(temperature=0.0)
ENGINE = (
  "--config.serving.engine.max_len=512",
  "--config.serving.engine.max_prefill_length=512",
  "--config.serving.engine.page_size=8",
)
CLIENT = client_lib.ClientConfig(timeout_s=300, max_attempts=2)


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--pairs", type=int, default=30, help="alternated direct/router request pairs")
  p.add_argument("--episodes", type=int, default=8, help="concurrent multi-turn episodes")
  p.add_argument("--turns", type=int, default=8, help="turns per episode")
  p.add_argument("--reps", type=int, default=2, help="measured runs of each side (+1 warm-up)")
  p.add_argument("--out", default="", help="JSON output path")
  return p.parse_args(argv)


def start_replica(tmp: pathlib.Path, name: str) -> tuple[subprocess.Popen, pathlib.Path, int]:
  """launch/serve.py on a free loopback port -> (process, its ready file, port)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  ready = tmp / f"{name}.json"
  cmd = [
    sys.executable,
    str(ROOT / "launch/serve.py"),
    f"--config={ROOT / 'configs/serve_tiny.py'}",
    f"--config.serving.port={port}",
    f"--config.ready_file={ready}",
    *ENGINE,
  ]
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  log = (tmp / f"{name}.log").open("w")
  proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
  return proc, ready, port


def wait_ready(proc, ready: pathlib.Path, timeout_s: float = 600) -> None:
  deadline = time.monotonic() + timeout_s
  while not ready.exists():
    if proc.poll() is not None or time.monotonic() > deadline:
      raise RuntimeError(f"replica did not start (see {ready.with_suffix('.log')})")
    time.sleep(0.2)


async def overhead(router, pairs: int) -> dict:
  prompt = list(range(1, 9))
  async with client_lib.RolloutClient(router.address, CLIENT) as via:
    await via.generate(prompt, 1, GREEDY, session_id="overhead")  # picks (and warms) a replica
    address = router.router.sessions["overhead"][0].address
    async with client_lib.RolloutClient(address, CLIENT) as direct:
      await direct.generate(prompt, 1, GREEDY)
      sides = {"direct": direct, "router": via}
      times = {"direct": [], "router": []}
      for i in range(pairs):
        order = ("direct", "router") if i % 2 == 0 else ("router", "direct")
        for side in order:
          start = time.perf_counter()
          await sides[side].generate(prompt, 1, GREEDY, session_id="overhead")
          times[side].append((time.perf_counter() - start) * 1e3)
  diff = [r - d for d, r in zip(times["direct"], times["router"], strict=True)]
  summary = {k: {"min_ms": min(v), "median_ms": statistics.median(v)} for k, v in times.items()}
  summary["overhead"] = {  # min: of the two sides' minima (a pair's difference is noisier)
    "min_ms": summary["router"]["min_ms"] - summary["direct"]["min_ms"],
    "median_ms": statistics.median(diff),  # of the per-pair differences
  }
  return summary


async def _counters(addresses) -> tuple[int, int]:
  cached = total = 0
  for a in addresses:
    async with client_lib.RolloutClient(a, CLIENT) as c:
      st = await c.status()
    cached += st.cached_prompt_tokens
    total += st.prefill_tokens + st.cached_prompt_tokens
  return cached, total


async def episodes(router, replicas, affinity: bool, n: int, turns: int, base: int) -> dict:
  """n concurrent episodes x `turns`; turn t of episode e goes through the router (session per
  episode) or, without affinity, straight to replica (e + t) % len(replicas)."""
  clients = [client_lib.RolloutClient(a, CLIENT) for a in (router.address, *replicas)]

  async def episode(e: int) -> None:
    prompt = [(base + 7 * e + i) % 250 + 1 for i in range(32)]
    for t in range(turns):
      c = clients[0] if affinity else clients[1 + (e + t) % len(replicas)]
      out = await c.generate(prompt, 8, GREEDY, session_id=f"ep-{base}-{e}")
      prompt = prompt + out.token_ids + [(base + e + t + j) % 250 + 1 for j in range(8)]

  before = await _counters(replicas)
  start = time.perf_counter()
  await asyncio.gather(*(episode(e) for e in range(n)))
  wall = time.perf_counter() - start
  after = await _counters(replicas)
  for c in clients:
    await c.close()
  cached, total = after[0] - before[0], after[1] - before[1]
  return {
    "hit_rate": cached / max(total, 1),
    "cached": cached,
    "prompt": total,
    "computed": total - cached,  # prompt tokens the replicas prefilled
    "wall_s": wall,
  }


async def affinity_side_by_side(router, replicas, a) -> dict:
  """Both sides once as a warm-up (every prefill shape compiled), then `--reps` runs of each,
  alternated; fresh prompts every run (no cache carried over). -> the median run of each."""
  runs = {True: [], False: []}
  for rep in range(a.reps + 1):
    order = (True, False) if rep % 2 == 0 else (False, True)
    for affinity in order:
      base = 37 * (2 * rep + affinity)
      out = await episodes(router, replicas, affinity, a.episodes, a.turns, base)
      if rep:
        runs[affinity].append(out)

  def median_run(rs):
    return sorted(rs, key=lambda r: r["computed"])[len(rs) // 2] | {"runs": rs}

  return {"with_affinity": median_run(runs[True]), "round_robin": median_run(runs[False])}


def main(argv=None) -> dict:
  a = _args(argv)
  load_before = report.START_LOAD
  with tempfile.TemporaryDirectory() as d:
    tmp = pathlib.Path(d)
    started = [start_replica(tmp, name) for name in ("a", "b")]
    procs = [p for p, _, _ in started]
    router = None
    try:
      for p, ready, _ in started:
        wait_ready(p, ready)
      replicas = tuple(f"127.0.0.1:{port}" for _, _, port in started)
      router = router_lib.RouterThread(router_lib.RouterConfig(replicas=replicas, port=0))

      async def run():
        out = {"overhead": await overhead(router, a.pairs)}
        return out | await affinity_side_by_side(router, replicas, a)

      result = asyncio.run(run())
    finally:
      if router is not None:
        router.stop()
      for p in procs:
        p.send_signal(signal.SIGTERM)
      for p in procs:
        p.wait(timeout=60)
  result |= {
    "load_before": load_before,
    "load_after": report.load_average(),
    "cores": report.core_count(),
    "pairs": a.pairs,
    "episodes": a.episodes,
    "turns": a.turns,
  }
  print(json.dumps(result))
  o, w, r = result["overhead"], result["with_affinity"], result["round_robin"]
  print(
    f"| router overhead, 8-token prompt, 1 token, loopback | direct {o['direct']['median_ms']:.2f}"
    f" ms (min {o['direct']['min_ms']:.2f}) | router {o['router']['median_ms']:.2f} ms (min "
    f"{o['router']['min_ms']:.2f}) | +{o['overhead']['median_ms']:.2f} ms median, "
    f"{o['overhead']['min_ms']:.2f} min, {a.pairs} pairs |"
  )
  print(
    f"| prefix hits, {a.episodes} episodes x {a.turns} turns | affinity {w['hit_rate']:.1%}, "
    f"{w['computed']} tokens prefilled ({w['wall_s']:.1f} s) | round-robin {r['hit_rate']:.1%}, "
    f"{r['computed']} prefilled ({r['wall_s']:.1f} s) | load "
    f"{load_before:.2f} -> {result['load_after']:.2f} on {result['cores']} cores |"
  )
  if a.out:
    json_io.write_text_atomic(a.out, [json.dumps(result) + "\n"])
  return result


if __name__ == "__main__":
  cli.run(main)
