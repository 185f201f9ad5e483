"""CPU decode throughput: our engine's decode core vs transformers `generate` on the same small
random Qwen3 (same weights, fp32, greedy, batch B, equal-length prompts).

Decode tokens/s = B x (new - 1) / (time(new tokens) - time(1 token)) for HF (generate includes the
prefill), and B x new / time(new generate steps, host copy each step) for ours (prefill timed apart);
plus ours end to end through the gRPC server (B concurrent requests, prefill included).
  python3 bench/decode_bench.py [--batch 8 --prompt 64 --new 64] [--tiny]
Prints a JSON line and a BENCHMARKS.md table row; --out writes the JSON atomically.
"""

import argparse
import asyncio
import json
import os
import pathlib
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
# pylint: disable=wrong-import-position
from tmax_jax.inference import decode, sampling
from tmax_jax.models import hf_io

SMALL = dict(vocab_size=8192, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=64)
TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def _args(argv):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--prompt", type=int, default=64)
  p.add_argument("--new", type=int, default=64)
  p.add_argument("--tiny", action="store_true")
  p.add_argument("--out", default="")
  return p.parse_args(argv)


def hf_decode_tok_s(model, prompts, new):
  ids = torch.tensor(prompts)

  def run(n):
    t0 = time.perf_counter()
    with torch.no_grad():
      model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                     min_new_tokens=n, do_sample=False, pad_token_id=0)
    return time.perf_counter() - t0

  run(2)  # warm up
  # Best of 3 each: the shared CPU box is noisy and noise only ever slows a run down.
  return len(prompts) * (new - 1) / (min(run(new) for _ in range(3)) - min(run(1) for _ in range(3)))


def ours_decode_tok_s(cfg, params, prompts, new):
  b, p = prompts.shape
  core = decode.DecodeCore(cfg, b, p + new + 1)
  served = core.prepare(params)
  sp = sampling.SamplingParams(temperature=0.0)

  def fill():
    state = core.init_state()
    for i in range(b):
      state = core.insert(core.prefill(params, prompts[i], p, sp), state, jnp.int32(i))
    return state

  def steps(state, n):
    for _ in range(n):
      state, data = core.generate(served, state, jnp.int32(0))
      np.asarray(data)
    return state

  steps(fill(), 2)  # compile
  best = float("inf")
  for _ in range(3):  # best of 3, as for HF
    state = jax.block_until_ready(fill())
    t0 = time.perf_counter()
    jax.block_until_ready(steps(state, new))
    best = min(best, time.perf_counter() - t0)
  return b * new / best


def server_tok_s(cfg, params, prompts, new):
  """End to end through the gRPC server: B concurrent client requests (prefill included)."""
  from tmax_jax.inference import client as client_lib  # pylint: disable=import-outside-toplevel
  from tmax_jax.inference import engine as engine_lib  # pylint: disable=import-outside-toplevel
  from tmax_jax.inference import server as server_lib  # pylint: disable=import-outside-toplevel
  b, p = prompts.shape
  ecfg = engine_lib.EngineConfig(max_concurrent_decodes=b, max_len=p + new + 1,
                                 max_prefill_length=p)
  server = server_lib.start_server(engine_lib.TmaxEngine(cfg, ecfg, lambda: params),
                                   server_lib.ServerConfig(port=0))
  greedy = sampling.SamplingParams(temperature=0.0)

  async def burst(c, n):
    t0 = time.perf_counter()
    await asyncio.gather(*[c.generate(row.tolist(), n, greedy) for row in prompts])
    return time.perf_counter() - t0

  async def go():
    async with client_lib.RolloutClient(server.address) as c:
      await burst(c, 2)  # compile
      return b * new / min([await burst(c, new) for _ in range(3)])

  try:
    return asyncio.run(go())
  finally:
    server.stop()


def main(argv=None):
  a = _args(argv)
  shape = TINY if a.tiny else SMALL
  torch.manual_seed(0)
  torch.set_num_threads(os.cpu_count() or 1)
  hf_cfg = transformers.Qwen3Config(tie_word_embeddings=True, max_position_embeddings=4096,
                                    **shape)
  model = transformers.AutoModelForCausalLM.from_config(hf_cfg).float().eval()
  with tempfile.TemporaryDirectory() as d:
    model.save_pretrained(d)
    cfg, params = hf_io.load_pretrained(d)
  prompts = np.random.default_rng(0).integers(1, shape["vocab_size"], (a.batch, a.prompt))
  prompts = prompts.astype(np.int32)
  hf = hf_decode_tok_s(model, prompts.tolist(), a.new)
  ours = ours_decode_tok_s(cfg, params, prompts, a.new)
  grpc_tok_s = server_tok_s(cfg, params, prompts, a.new)
  result = dict(batch=a.batch, prompt=a.prompt, new=a.new, shape=shape, cpu_threads=os.cpu_count(),
                hf_decode_tok_s=hf, ours_decode_tok_s=ours, ratio=ours / hf,
                ours_grpc_end_to_end_tok_s=grpc_tok_s)
  print(json.dumps(result))
  print(f"| decode, CPU, Qwen3 d={shape['hidden_size']} L={shape['num_hidden_layers']} "
        f"V={shape['vocab_size']}, B={a.batch}, prompt {a.prompt}, {a.new} new, fp32 greedy | "
        f"HF generate {hf:.0f} tok/s | ours {ours:.0f} tok/s | ratio {ours / hf:.2f} | "
        f"ours via gRPC server, prefill incl. {grpc_tok_s:.0f} tok/s |")
  if a.out:
    out = pathlib.Path(a.out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result) + "\n")
    os.replace(tmp, out)
  return result


if __name__ == "__main__":
  main()
