"""Serving memory of the recipe's rollout side (computed, not timed): Qwen3.5-9B, 256 concurrent
episodes, 67,584-token context (2,048 prompt + 65,536 response), bf16 K/V, per device of a replica
with `tensor` devices. Byte counts come from the engine's own layout (decode.PagedCore on abstract
shapes; nothing is allocated).

Dense = what the engine allocated before paging: every slot a full max_len cache. Paged = the
pages the episodes hold: each episode's conversation so far (kept in pages between turns so the
next turn prefills only its new tokens) plus, for the episodes generating right now, the turn's
reservation (admission reserves prompt + max_tokens + 1 pages; the recipe's per-turn cap is
16,384). Episode lengths: the recipe's limits bound them (<= 64 tool calls, <= 67,584 tokens); the
script evaluates the mean in-flight context over a range (an episode in flight is on average half
way through its final length) and the all-at-the-cap worst case.

  python3 bench/serving_memory.py [--tensor 1,2,4] [--page_size 64] [--generating 0.5]
"""

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
# pylint: disable=wrong-import-position
from tmax_jax.inference import decode, paged
from tmax_jax.models import registry
from tmax_jax.models.config import DtypePolicy

GB = 1e9


def _args(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--preset", default="qwen3.5-9b")
  p.add_argument("--episodes", type=int, default=256)
  p.add_argument("--max_len", type=int, default=2048 + 65536)
  p.add_argument("--turn_max", type=int, default=16384)
  p.add_argument("--page_size", type=int, default=64)
  p.add_argument("--tensor", default="1,2,4")
  p.add_argument(
    "--generating",
    type=float,
    default=0.5,
    help="fraction of episodes generating (the rest wait on their sandbox)",
  )
  p.add_argument(
    "--contexts", default="8192,16384,32768", help="mean in-flight context (tokens) scenarios"
  )
  return p.parse_args(argv)


def per_token_and_state(preset: str, tensor: int) -> tuple[float, float]:
  """(KV bytes per token, recurrent-state bytes per slot) one device of a replica with `tensor`
  devices holds (the engine's shardings; bf16 compute)."""
  cfg = registry.preset(
    preset, dtypes=DtypePolicy(param_dtype="bfloat16", compute_dtype="bfloat16")
  )
  shape = decode.CoreShape(slots=1, max_len=64, page_size=64, num_pages=1)
  mem = decode.PagedCore(cfg, shape).memory_bytes(per_device_of=tensor)  # 1 page, 1 slot
  return mem["kv_pool_bytes"] / 64, mem["state_bytes"] / shape.slots


def main(argv=None):
  a = _args(argv)
  kv_token, state_slot = per_token_and_state(a.preset, 1)
  rows = []
  for tensor in (int(t) for t in a.tensor.split(",")):
    kv_device, state_device = per_token_and_state(a.preset, tensor)
    kv_split = kv_token / kv_device  # K/V split on kv heads (when they divide)
    state = a.episodes * state_device * 2  # slots + as many prefix-cache state blocks (default)
    dense = a.episodes * a.max_len * kv_token / kv_split
    scenarios = {"dense": dense, "paged, every episode at the cap": dense}
    for ctx in (int(c) for c in a.contexts.split(",")):
      pages = a.episodes * paged.pages_for(ctx, a.page_size) + int(
        a.episodes * a.generating
      ) * paged.pages_for(a.turn_max + 1, a.page_size)
      scenarios[f"paged, mean context {ctx}"] = pages * a.page_size * kv_token / kv_split
    rows.append(
      dict(
        tensor=tensor,
        kv_split=kv_split,
        state_bytes_per_device=state,
        kv_bytes_per_device=scenarios,
      )
    )
  result = dict(
    preset=a.preset,
    episodes=a.episodes,
    max_len=a.max_len,
    page_size=a.page_size,
    kv_bytes_per_token=kv_token,
    state_bytes_per_slot=state_slot,
    generating=a.generating,
    turn_max=a.turn_max,
    rows=rows,
  )
  print(json.dumps(result))
  for r in rows:
    for name, b in r["kv_bytes_per_device"].items():
      print(
        f"| tensor={r['tensor']} | {name} | {b / GB:.1f} GB KV + "
        f"{r['state_bytes_per_device'] / GB:.1f} GB state |"
      )
  return result


if __name__ == "__main__":
  main()
