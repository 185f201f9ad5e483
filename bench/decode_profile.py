"""Where one CPU decode step and the decode loop of the paged engine spend their time.

For each batch B (serve_bench.py's model and workload: B requests, prompt 16, `--new` greedy
tokens):
  * loop: wall time of `Scheduler.run_until_idle` and the host time of each scheduler phase
    (admission, prefill dispatch, decode dispatch = block table + call, read-back + events);
  * step: seconds of the compiled decode program alone (inputs on device, blocked per call),
    and, with `--profile`, its time per HLO instruction from a jax.profiler trace, sorted into
    kinds and model modules (bench/hlo_census.py);
  * HF: seconds per decode step of transformers `generate` at the same B (time(new) - time(1)
    over new - 1 steps).

  python3 bench/decode_profile.py --batches 32,64 [--profile 20] [--json out.json]
Single-sided timings (report.time_it), for finding costs, not for BENCHMARKS rows.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
if "--profile" in " ".join(sys.argv):  # read when the CPU backend starts
  os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true"

import hlo_census  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import report  # noqa: E402
import serve_bench  # noqa: E402

from tmax_jax import cli
from tmax_jax.inference import scheduler  # noqa: E402

PHASES = ("_drain", "_admit", "_prefill_once", "_dispatch_decode", "_process")


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--batches", default="32,64", help="comma-separated decode batch sizes")
  p.add_argument("--prompt", type=int, default=16, help="prompt tokens per sequence")
  p.add_argument("--new", type=int, default=64, help="new tokens per sequence")
  p.add_argument("--repeats", type=int, default=3, help="timed runs per batch")
  p.add_argument("--profile", type=int, default=0, help="profiled decode-step runs (0 = none)")
  p.add_argument("--top", type=int, default=15, help="profile rows to print")
  p.add_argument("--tiny", action="store_true", help="tiny model and workload (tests)")
  p.add_argument("--unrolled", action="store_true", help="serve unrolled (decode.CoreShape)")
  p.add_argument("--decode_steps", type=int, default=4, help="EngineConfig.decode_steps")
  p.add_argument("--json", default="", help="JSON output path")
  return p.parse_args(argv)


def _timed_phases(sched) -> collections.Counter:
  """Wraps the scheduler's phases (instance attributes) with wall-time counters."""
  spent: collections.Counter = collections.Counter()
  for name in PHASES:
    fn = getattr(sched, name)

    def timed(*a, _fn=fn, _name=name, **kw):
      start = time.perf_counter()
      try:
        return _fn(*a, **kw)
      finally:
        spent[_name] += time.perf_counter() - start

    setattr(sched, name, timed)
  return spent


def loop_profile(sched, prompts, new: int, repeats: int) -> dict:
  """Wall time of the whole run and per-phase host time, per decode step (median run)."""
  spent = _timed_phases(sched)

  def run():
    for i, p in enumerate(prompts):
      sched.submit(scheduler.Sequence(i, p.tolist(), new, serve_bench.GREEDY))
    sched.run_until_idle()

  run()  # compile
  runs = []
  for _ in range(repeats):
    spent.clear()
    steps0 = sched.stats["decode_steps"]
    start = time.perf_counter()
    run()
    wall = time.perf_counter() - start
    steps = sched.stats["decode_steps"] - steps0
    runs.append(dict(wall_s=wall, steps=steps, **{k: v for k, v in spent.items()}))
  best = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
  return dict(best, per_step_ms={k: 1e3 * best.get(k, 0.0) / best["steps"] for k in PHASES})


def step_profile(sched, repeats: int, profile_runs: int, top: int) -> dict:
  """The compiled decode step alone, every slot live, at the run's table bucket."""
  core = sched.core
  served, version = sched.box.get()
  table = np.zeros((core.shape.slots, sched._min_pages), np.int32)
  state = core.init_state()
  state = dict(state, active=jax.numpy.ones_like(state["active"]))
  box = [state]

  def step():
    box[0], data = core.decode(served, box[0], table, np.int32(version))
    jax.block_until_ready(data)

  median, best = report.time_it(step, max(repeats, 10))
  out = dict(step_ms_median=1e3 * median, step_ms_min=1e3 * best)
  compiled = core.decode.lower(served, box[0], table, np.int32(version)).compile()
  rows, cost = hlo_census.census(compiled.as_text())
  if profile_runs:

    def run():
      box[0], data = compiled(served, box[0], table, np.int32(version))
      jax.block_until_ready(data)

    seconds = hlo_census.trace_seconds(run, rows, profile_runs)
    for r in rows:
      r.seconds = seconds.get(r.name, 0.0)
  out["census"] = hlo_census.summary(rows, cost, top)
  return out


def hf_step_ms(model, prompts, new: int, repeats: int) -> float:
  """HF generate's ms per decode step: (time of `new` tokens - time of 1) / (new - 1)."""
  full, _ = report.time_it(serve_bench.hf_generate(model, prompts, new), repeats)
  one, _ = report.time_it(serve_bench.hf_generate(model, prompts, 1), repeats)
  return 1e3 * (full - one) / (new - 1)


def main(argv=None) -> dict:
  a = _args(argv)
  shape = serve_bench.TINY if a.tiny else serve_bench.SMALL
  model, cfg, params = serve_bench.build_models(shape, 256)
  out = {}
  for b in (int(x) for x in a.batches.split(",")):
    prompts = np.random.default_rng(b).integers(1, cfg.vocab_size, (b, a.prompt))
    sched = serve_bench._engine(
      cfg,
      params,
      b,
      a.prompt + a.new + 16,
      False,
      unrolled_layers=a.unrolled,
      decode_steps=a.decode_steps,
    )
    r = dict(loop=loop_profile(sched, prompts, a.new, a.repeats))
    r["step"] = step_profile(sched, a.repeats, a.profile, a.top)
    r["hf_step_ms"] = hf_step_ms(model, prompts, a.new, a.repeats)
    out[b] = r
    loop, step = r["loop"], r["step"]
    print(
      f"\nB={b}: loop {loop['wall_s']:.3f} s / {loop['steps']} steps = "
      f"{1e3 * loop['wall_s'] / loop['steps']:.2f} ms/step; compiled step alone "
      f"{step['step_ms_median']:.2f} ms (min {step['step_ms_min']:.2f}); HF generate "
      f"{r['hf_step_ms']:.2f} ms/step"
    )
    print("  host phases, ms per decode step:", json.dumps(loop["per_step_ms"]))
    hlo_census.print_summary(step["census"])
  if a.json:
    pathlib.Path(a.json).write_text(json.dumps(out, indent=1, default=str))
  return out


if __name__ == "__main__":
  cli.run(main)
