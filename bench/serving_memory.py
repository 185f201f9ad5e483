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

--config=configs/X.py: the statement for that RL config's shipped serving placement instead (its
preset, replicas x tensor, slots per replica, page size and page pool, max_len, per-turn cap): per
device of a replica, the pool it allocates and the pages its slots need in each scenario.

  python3 bench/serving_memory.py [--tensor 1,2,4] [--page_size 64] [--generating 0.5]
  python3 bench/serving_memory.py --config configs/tmax_qwen3_5_9b.py
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tmax_jax import cli
from tmax_jax.inference import decode, paged
from tmax_jax.models import DtypePolicy, registry

GB = 1e9


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--config", default="", help="an RL config: its shipped serving placement")
  p.add_argument("--preset", default="qwen3.5-9b", help="model preset")
  p.add_argument("--episodes", type=int, default=256, help="concurrent episodes")
  p.add_argument("--max_len", type=int, default=2048 + 65536, help="serving max_len (tokens)")
  p.add_argument("--turn_max", type=int, default=16384, help="largest turn (tokens)")
  p.add_argument("--page_size", type=int, default=64, help="KV cache page size (tokens)")
  p.add_argument("--tensor", default="1,2,4", help="comma-separated tensor-parallel sizes")
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


def pages_needed(slots: int, context: int, a) -> int:
  """Pages `slots` episodes hold at a mean in-flight `context`: their conversations plus the
  reservation of the turn the generating ones are in."""
  return slots * paged.pages_for(context, a.page_size) + int(slots * a.generating) * (
    paged.pages_for(a.turn_max + 1, a.page_size)
  )


def kv_scenarios(slots: int, kv_device: float, a) -> dict[str, float]:
  """KV bytes per device of one replica with `slots` episodes: dense, paged per mean context."""
  dense = slots * a.max_len * kv_device
  out = {"dense": dense, "paged, every episode at the cap": dense}
  for ctx in (int(c) for c in a.contexts.split(",")):
    out[f"paged, mean context {ctx}"] = pages_needed(slots, ctx, a) * a.page_size * kv_device
  return out


def shipped(a) -> dict:
  """The statement for --config's serving placement (per device of one of its replicas)."""
  from tmax_jax.config_dict import from_config_dict, load_config_file
  from tmax_jax.loop import RLConfig

  cfg = from_config_dict(RLConfig, load_config_file(a.config))
  s, e = cfg.serving, cfg.serving.engine
  a.preset, a.page_size, a.max_len = cfg.model.preset, e.page_size, e.max_len
  a.turn_max = cfg.episode.turn_max_tokens
  kv_device, state_device = per_token_and_state(a.preset, s.tensor)
  hosts = cfg.topology.processes
  slots = e.max_concurrent_decodes
  pool_pages = e.num_pages or slots * paged.pages_for(e.max_len, e.page_size)
  scenarios = kv_scenarios(slots, kv_device, a)
  contexts = [int(c) for c in a.contexts.split(",")]
  return dict(
    config=a.config,
    topology=cfg.topology.name,
    preset=a.preset,
    placement=s.placement,
    replicas=s.replicas * hosts,
    tensor=s.tensor,
    slots_per_replica=slots,
    episodes=slots * s.replicas * hosts,
    page_size=e.page_size,
    pool_pages=pool_pages,
    pool_kv_bytes_per_device=pool_pages * e.page_size * kv_device,
    state_bytes_per_device=slots * state_device * 2,  # slots + as many prefix-cache blocks
    kv_bytes_per_device=scenarios,
    pages_needed={c: pages_needed(slots, c, a) for c in contexts},
    generating=a.generating,
    turn_max=a.turn_max,
  )


def main(argv=None):
  a = _args(argv)
  if a.config:
    r = shipped(a)
    print(json.dumps(r))
    print(
      f"{r['config']} ({r['topology']}): {r['replicas']} replicas x tensor {r['tensor']}, "
      f"{r['slots_per_replica']} slots each ({r['episodes']} episodes); per device: pool of "
      f"{r['pool_pages']} pages = {r['pool_kv_bytes_per_device'] / GB:.1f} GB KV + "
      f"{r['state_bytes_per_device'] / GB:.1f} GB state"
    )
    for name, b in r["kv_bytes_per_device"].items():
      print(f"| {name} | {b / GB:.1f} GB KV per device |")
    for ctx, n in r["pages_needed"].items():
      fits = "fits the pool" if n <= r["pool_pages"] else "exceeds the pool (admission waits)"
      print(f"| mean context {ctx} | {n} pages per replica | {fits} |")
    return r
  kv_token, state_slot = per_token_and_state(a.preset, 1)
  rows = []
  for tensor in (int(t) for t in a.tensor.split(",")):
    kv_device, state_device = per_token_and_state(a.preset, tensor)
    rows.append(
      dict(
        tensor=tensor,
        kv_split=kv_token / kv_device,  # K/V split on kv heads (when they divide)
        state_bytes_per_device=a.episodes * state_device * 2,  # slots + prefix-cache blocks
        kv_bytes_per_device=kv_scenarios(a.episodes, kv_device, a),
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
  cli.run(main)
