"""CPU serving benchmark of the paged engine (one replica's scheduler, the code the server runs),
all sides in one run, alternated (bench/report.compare, >= 5 pairs):
  1. decode: B concurrent requests (prompt 16, 64 new tokens, greedy) vs transformers `generate`
     on the same weights, B = 8 / 32 / 64; tokens/s = B x new / median seconds (prefill of the
     16-token prompts included on both sides; prefix cache off, so every run prefills them);
  1a. decode steps per call (`--steps_batches`, "" = skip): the same decode loop with
     `--decode_steps` steps per dispatched program (EngineConfig.decode_steps) vs one;
  1b. layer layout (`--layout_batches`, "" = skip): the same decode loop served unrolled over one
     pool buffer per layer (decode.CoreShape.unrolled) vs the scanned stack (the default);
  1c. gRPC end to end: the same B requests through the real server (RLDriver + JetStream's
     server, tmax_rl.Rollout on loopback), B concurrent streaming `RolloutClient.generate` calls
     from one asyncio client, vs HF `generate` at the same B (`--grpc_batches`, "" = skip);
  2. multi-turn: E episodes x 8 turns (~500-token observations, 32 generated tokens per turn)
     with and without the prefix cache: prompt tokens prefilled and wall time;
  3. KV memory: peak bytes of the pages in use during (2) (held by live sequences; pages kept only
     by the prefix cache are evictable and not counted) vs the dense cache of the same slots at
     the configured max_len (what the engine allocated before paging).

  python3 bench/serve_bench.py [--record BENCHMARKS.md] [--tiny]
Prints JSON and markdown rows; --record appends them (refused when the machine is busy).
"""

import asyncio
import json
import pathlib
import sys
import tempfile

import numpy as np
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/report.py)

from tmax_jax import cli, json_io
from tmax_jax.inference import client as client_lib
from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling, scheduler
from tmax_jax.inference import server as server_lib
from tmax_jax.models import hf_io

SMALL = dict(
  vocab_size=8192,
  hidden_size=256,
  intermediate_size=768,
  num_hidden_layers=4,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=64,
)
TINY = dict(
  vocab_size=256,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
)
GREEDY = sampling.SamplingParams(temperature=0.0)
HEADING = (
  "\n## Serving (bench/serve_bench.py)\n\n"
  "| when (UTC) | measurement | ours | reference | ratio | setup |\n"
  "|---|---|---|---|---|---|\n"
)


def _args(argv):
  p = cli.ArgumentParser(description=cli.description(__doc__))
  p.add_argument("--batches", default="8,32,64", help="comma-separated decode batch sizes")
  p.add_argument("--grpc_batches", default="8,32,64", help="gRPC end-to-end batches ('' = none)")
  p.add_argument("--layout_batches", default="", help="unrolled vs scanned serving ('' = none)")
  p.add_argument(
    "--steps_batches", default="8,32,64", help="decode_steps vs one step per call ('' = none)"
  )
  p.add_argument(
    "--decode_steps",
    type=int,
    default=engine_lib.EngineConfig.decode_steps,
    help="decode steps per dispatched program (every engine of the run)",
  )
  p.add_argument("--prompt", type=int, default=16, help="prompt tokens per sequence")
  p.add_argument("--new", type=int, default=64, help="new tokens per sequence")
  p.add_argument("--episodes", type=int, default=2, help="multi-turn episodes (0 = skip)")
  p.add_argument("--turns", type=int, default=8, help="turns per multi-turn episode")
  p.add_argument("--observation", type=int, default=500, help="observation tokens per turn")
  p.add_argument("--turn_tokens", type=int, default=32, help="generated tokens per turn")
  p.add_argument("--max_len", type=int, default=8192, help="serving max_len (dense footprint)")
  p.add_argument(
    "--pairs", type=int, default=report.MIN_PAIRS, help="alternated pairs per comparison"
  )
  p.add_argument("--tiny", action="store_true", help="tiny model and workload (CI smoke run)")
  p.add_argument("--record", default="", help="BENCHMARKS.md to append the rows to")
  p.add_argument("--out", default="", help="JSON output path")
  a = p.parse_args(argv)
  if a.tiny:
    a.batches, a.grpc_batches, a.new, a.episodes, a.turns, a.observation, a.turn_tokens = (
      "4",
      "4",
      8,
      2,
      3,
      40,
      6,
    )
    a.max_len = 512
    a.layout_batches = a.layout_batches or "4"
    a.steps_batches = a.steps_batches and "4"
  return a


def _engine_config(slots, max_len, prefix_cache, **kw) -> engine_lib.EngineConfig:
  return engine_lib.EngineConfig(
    max_concurrent_decodes=slots,
    max_len=max_len,
    max_prefill_length=max_len - 1,
    page_size=16,
    prefill_chunk=512,
    prefill_batch=8,
    prefix_cache=prefix_cache,
    **kw,
  )


def _engine(cfg, params, slots, max_len, prefix_cache=True, **kw):
  ecfg = _engine_config(slots, max_len, prefix_cache, **kw)
  return engine_lib.TmaxEngine(cfg, ecfg, lambda: params).replicas[0].start(lambda e: None)


def hf_generate(model, prompts, new: int):
  """-> a call running transformers `generate` greedily for `new` tokens on every prompt."""
  ids = torch.tensor(prompts)

  def theirs():
    with torch.no_grad():
      model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        pad_token_id=0,
      )

  return theirs


def _decode_result(batch, c: report.Comparison, new: int) -> dict:
  tokens = batch * new
  return dict(
    batch=batch,
    ours_tok_s=tokens / c.ours_median_s,
    hf_tok_s=tokens / c.theirs_median_s,
    comparison=c.as_dict(),
    ratio=c.ratio_text(),
    load=c.load_text(),
  )


def _decode_loop(cfg, params, batch, a, **kw):
  """-> a call running B greedy requests through one replica's scheduler until idle (`kw`:
  EngineConfig fields, default decode_steps = --decode_steps)."""
  prompts = np.random.default_rng(batch).integers(1, cfg.vocab_size, (batch, a.prompt))
  # No prefix cache: the runs repeat the same prompts, and a cached prompt would skip its prefill.
  kw = dict(dict(decode_steps=a.decode_steps), **kw)
  sched = _engine(cfg, params, batch, a.prompt + a.new + 16, False, **kw)

  def run():
    for i, p in enumerate(prompts):
      sched.submit(scheduler.Sequence(i, p.tolist(), a.new, GREEDY))
    sched.run_until_idle()

  return run, prompts


def decode_side_by_side(model, cfg, params, batch, a) -> dict:
  ours, prompts = _decode_loop(cfg, params, batch, a)
  c = report.compare(ours, hf_generate(model, prompts, a.new), pairs=a.pairs)
  return _decode_result(batch, c, a.new)


def variant_side_by_side(cfg, params, batch, a, ours: dict, theirs: dict) -> dict:
  """The decode loop of two engine configurations (EngineConfig fields), alternated."""
  mine, _ = _decode_loop(cfg, params, batch, a, **ours)
  other, _ = _decode_loop(cfg, params, batch, a, **theirs)
  return _decode_result(batch, report.compare(mine, other, pairs=a.pairs), a.new)


def grpc_side_by_side(model, cfg, params, batch, a) -> dict:
  """B concurrent Generate streams through the real server on loopback vs HF generate."""
  prompts = np.random.default_rng(batch).integers(1, cfg.vocab_size, (batch, a.prompt))
  ecfg = _engine_config(batch, a.prompt + a.new + 16, False, decode_steps=a.decode_steps)
  engine = engine_lib.TmaxEngine(cfg, ecfg, lambda: params)
  server = server_lib.start_server(engine, server_lib.ServerConfig(port=0))
  loop = asyncio.new_event_loop()

  async def connect():  # the channel is made on the loop that uses it
    return client_lib.RolloutClient(server.address, client_lib.ClientConfig(timeout_s=600))

  client = loop.run_until_complete(connect())
  try:
    loop.run_until_complete(client.wait_until_ready())

    async def requests():
      outs = await asyncio.gather(*(client.generate(p.tolist(), a.new, GREEDY) for p in prompts))
      if any(len(o.token_ids) != a.new for o in outs):
        raise AssertionError(f"gRPC bench: a stream did not return {a.new} tokens")

    c = report.compare(
      lambda: loop.run_until_complete(requests()),
      hf_generate(model, prompts, a.new),
      pairs=a.pairs,
      warmup=2,  # requests arrive one by one: the first run may not meet every prefill shape
    )
  finally:
    loop.run_until_complete(client.close())
    loop.close()
    server.stop()
  return _decode_result(batch, c, a.new)


def run_episodes(sched, a, vocab: int) -> dict:
  """E concurrent episodes; each finished turn appends its tokens and an observation and submits
  the next turn (the whole conversation, as rollout workers do) -> stats of the run. Every run
  starts with an empty prefix cache: the runs repeat the same episodes (timing pairs), and what
  an earlier run left in the cache would let this one skip even its first prompts."""
  if sched.cache is not None:
    sched.cache.clear()
  rng = np.random.default_rng(0)
  history = [rng.integers(1, vocab, a.observation).tolist() for _ in range(a.episodes)]
  generated: dict = {}
  finished: list = []

  def emit(events):
    for e in events:
      generated.setdefault(e.handle, []).append(e.token)
      if e.finish_reason:
        finished.append(e.handle)

  sched.emit = emit
  before = dict(sched.stats)
  for ep in range(a.episodes):
    sched.submit(scheduler.Sequence((ep, 0), history[ep], a.turn_tokens, GREEDY))
  while sched.busy or not sched.inbox.empty():
    sched.step()
    for ep, turn in finished:
      if turn + 1 < a.turns:
        history[ep] += generated[(ep, turn)] + rng.integers(1, vocab, a.observation).tolist()
        sched.submit(scheduler.Sequence((ep, turn + 1), history[ep], a.turn_tokens, GREEDY))
    finished.clear()
  return {k: sched.stats[k] - before.get(k, 0) for k in ("prefill_tokens", "cached_tokens")}


def multi_turn_side_by_side(cfg, params, a) -> dict:
  cached = _engine(cfg, params, a.episodes, a.max_len, True, decode_steps=a.decode_steps)
  plain = _engine(cfg, params, a.episodes, a.max_len, False, decode_steps=a.decode_steps)
  stats = {}

  def ours():
    stats["cached"] = run_episodes(cached, a, cfg.vocab_size)

  def theirs():
    stats["plain"] = run_episodes(plain, a, cfg.vocab_size)

  c = report.compare(ours, theirs, pairs=a.pairs)
  page = cached.core.shape
  page_bytes = cached.core.memory_bytes()["kv_pool_bytes"] // page.num_pages
  dense = a.episodes * a.max_len * page_bytes // page.page_size
  peak = cached.stats["peak_pages_in_use"] * page_bytes
  return dict(
    prefill_tokens_cached=stats["cached"]["prefill_tokens"],
    prefill_tokens_plain=stats["plain"]["prefill_tokens"],
    cached_tokens=stats["cached"]["cached_tokens"],
    comparison=c.as_dict(),
    ratio=c.ratio_text(),
    load=c.load_text(),
    wall_s_cached=c.ours_median_s,
    wall_s_plain=c.theirs_median_s,
    peak_kv_bytes_paged=int(peak),
    kv_bytes_dense=int(dense),
    pool_kv_bytes=cached.core.memory_bytes()["kv_pool_bytes"],
  )


def _rows(result, a) -> list[str]:
  when = result["when"]
  setup = (
    f"Qwen3 d={result['shape']['hidden_size']} L={result['shape']['num_hidden_layers']} "
    f"V={result['shape']['vocab_size']} fp32, {report.core_count()} CPUs"
  )
  rows = [
    f"| {when} | decode B={d['batch']}, prompt {a.prompt}, {a.new} new, greedy: tok/s "
    f"| {d['ours_tok_s']:.0f} | HF generate {d['hf_tok_s']:.0f} | {d['ratio']} | "
    f"{setup}, {d['load']} |"
    for d in result["decode"]
  ]
  rows += [
    f"| {when} | decode B={d['batch']}, prompt {a.prompt}, {a.new} new, greedy: tok/s, "
    f"{a.decode_steps} decode steps per call vs one | {d['ours_tok_s']:.0f} "
    f"| one step {d['hf_tok_s']:.0f} | {d['ratio']} | {setup}, {d['load']} |"
    for d in result["steps"]
  ]
  rows += [
    f"| {when} | decode B={d['batch']}, prompt {a.prompt}, {a.new} new, greedy: tok/s, "
    f"unrolled layers (one pool buffer per layer) vs the scanned stack | {d['ours_tok_s']:.0f} "
    f"| scanned {d['hf_tok_s']:.0f} | {d['ratio']} | {setup}, {d['load']} |"
    for d in result["layout"]
  ]
  rows += [
    f"| {when} | gRPC end to end B={d['batch']} (server on loopback, {d['batch']} concurrent "
    f"streams), prompt {a.prompt}, {a.new} new, greedy: tok/s | {d['ours_tok_s']:.0f} "
    f"| HF generate {d['hf_tok_s']:.0f} | {d['ratio']} | {setup}, {d['load']} |"
    for d in result["grpc"]
  ]
  m = result["multi_turn"]
  if m is None:  # --episodes 0
    return rows
  rows.append(
    f"| {when} | {a.episodes} episodes x {a.turns} turns, {a.observation}-token "
    f"observations, {a.turn_tokens} generated/turn: prefill tokens, wall s | "
    f"prefix cache {m['prefill_tokens_cached']}, {m['wall_s_cached']:.1f} s | "
    f"no cache {m['prefill_tokens_plain']}, {m['wall_s_plain']:.1f} s | {m['ratio']} "
    f"| {setup}, {m['load']} |"
  )
  rows.append(
    f"| {when} | peak KV bytes of the multi-turn run | paged {m['peak_kv_bytes_paged']} "
    f"| dense {a.episodes} x max_len {a.max_len}: {m['kv_bytes_dense']} | "
    f"{m['kv_bytes_dense'] / max(m['peak_kv_bytes_paged'], 1):.2f}x | {setup} |"
  )
  return rows


def _ints(text: str) -> list[int]:
  return [int(x) for x in text.split(",") if x.strip()]


def build_models(shape: dict, max_len: int):
  """A random tied Qwen3 of `shape` -> (transformers model, our ModelConfig, params) with the same
  weights (saved and loaded through hf_io)."""
  torch.manual_seed(0)
  torch.set_num_threads(report.core_count())
  hf_cfg = transformers.Qwen3Config(
    tie_word_embeddings=True, max_position_embeddings=max_len + 64, **shape
  )
  model = transformers.AutoModelForCausalLM.from_config(hf_cfg).float().eval()
  with tempfile.TemporaryDirectory() as d:
    model.save_pretrained(d)
    cfg, params = hf_io.load_pretrained(d)
  return model, cfg, params


def main(argv=None):
  import datetime

  a = _args(argv)
  shape = TINY if a.tiny else SMALL
  model, cfg, params = build_models(shape, a.max_len)
  result = dict(
    when=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
    shape=shape,
    cpu_threads=report.core_count(),
    decode=[decode_side_by_side(model, cfg, params, int(b), a) for b in _ints(a.batches)],
    steps=[
      variant_side_by_side(cfg, params, b, a, {}, dict(decode_steps=1))
      for b in _ints(a.steps_batches)
    ],
    layout=[
      variant_side_by_side(cfg, params, b, a, dict(unrolled_layers=True), {})
      for b in _ints(a.layout_batches)
    ],
    grpc=[grpc_side_by_side(model, cfg, params, b, a) for b in _ints(a.grpc_batches)],
    multi_turn=multi_turn_side_by_side(cfg, params, a) if a.episodes else None,
  )
  print(json.dumps(result))
  loads = [
    x
    for d in result["decode"]
    + result["steps"]
    + result["layout"]
    + result["grpc"]
    + [result["multi_turn"]]
    if d is not None
    for x in (d["comparison"]["load_before"], d["comparison"]["others_cores"])
  ]
  for row in _rows(result, a):
    report.record_row(
      pathlib.Path(a.record) if a.record else None,
      "bench/serve_bench.py",
      HEADING,
      row,
      loads=tuple(loads),
    )
  if a.out:
    json_io.write_text_atomic(a.out, [json.dumps(result) + "\n"])
  return result


if __name__ == "__main__":
  cli.run(main)
