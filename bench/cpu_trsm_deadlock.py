"""Reproducer of the XLA:CPU deadlock that hung Qwen3.5 train steps (docs/design/long-context.md,
the trsm deadlock), without any tmax_jax code: each of the mesh's devices runs `--solves`
independent batched `lax.linalg.triangular_solve`s (jaxlib's LAPACK trsm kernel) big enough for
the kernel to split its batch into tasks on the intra-op thread pool. No collectives are involved.

Each trial runs in its own process under a timeout; one JSON line per trial (finished / hung and
seconds). With this jax (0.10.2) on the 2-core machine: `--devices 2 --mesh 2 --solves 16` hung in
3 of 3 trials, `--solves 2` finished; `--devices 1 --mesh 1 --solves 16` hung too (both pool
threads in one device's solves). Rerun after a jax upgrade: when it no longer hangs, the explicit
inverse in models/gated_delta.unit_lower_inverse is no longer needed for CPU runs.

  python3 bench/cpu_trsm_deadlock.py [--devices 2 --mesh 2 --solves 16 --trials 3 --timeout 60]
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tmax_jax import cli  # noqa: E402

CHILD = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
mesh_n, solves = {mesh}, {solves}
mesh = jax.make_mesh((mesh_n,), ("x",), devices=jax.devices()[:mesh_n])
# per device 8 solves of [64, 64] x [64, 16]: 8 * 64 * 16 * 64 FLOP > the kernel's 2e5 split size
a = np.tril(np.random.default_rng(0).normal(size=(mesh_n * 8, 64, 64)) * 0.1, -1)
a, b = (jax.device_put(jnp.asarray(x, jnp.float32), NamedSharding(mesh, P("x")))
        for x in (a, np.ones((mesh_n * 8, 64, 16))))
def solve_all(a, b):
  return sum(jax.lax.linalg.triangular_solve(a * (i + 1), b + i, left_side=True, lower=True,
                                             unit_diagonal=True) for i in range(solves))
f = jax.jit(jax.shard_map(solve_all, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
f(a, b).block_until_ready()
"""


def trial(args) -> dict:
  env = dict(os.environ)
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
  code = CHILD.format(mesh=args.mesh, solves=args.solves)
  start = time.perf_counter()
  try:
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=args.timeout)
    status = "finished"
  except subprocess.TimeoutExpired:
    status = f"hung (no result in {args.timeout} s)"
  return {
    "devices": args.devices,
    "mesh": args.mesh,
    "solves": args.solves,
    "status": status,
    "seconds": round(time.perf_counter() - start, 1),
  }


def main(argv: list[str]) -> None:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  parser.add_argument("--devices", type=int, default=2, help="fake CPU devices (= pool threads)")
  parser.add_argument("--mesh", type=int, default=2, help="devices the solves run on")
  parser.add_argument("--solves", type=int, default=16, help="independent solves per device")
  parser.add_argument("--trials", type=int, default=3, help="runs, each in its own process")
  parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a run is hung")
  args = parser.parse_args(argv)
  for _ in range(args.trials):
    print(json.dumps(trial(args)), flush=True)


if __name__ == "__main__":
  cli.run(main)
