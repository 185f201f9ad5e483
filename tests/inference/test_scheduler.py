"""The paged engine through its scheduler (no gRPC): parity with transformers, pages admitted /
exhausted / freed, batched and chunked prefill, prefix-cache exactness (dense and Qwen3.5), top-K
parity with the trainer's chunked head, JetStream's Engine API."""

import inference_helpers as helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tmax_jax.inference import engine as engine_lib
from tmax_jax.inference import sampling, scheduler
from tmax_jax.models import hf_io, logprobs, registry
from tmax_jax.train import topk as topk_lib

GREEDY = sampling.SamplingParams(temperature=0.0)
SMALL = engine_lib.EngineConfig(**helpers.ENGINE)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """model_type -> (ModelConfig, params, torch model)."""
  out = {}
  for model_type, kw in (("qwen3", {}), ("qwen3_5", dict(num_hidden_layers=4))):
    d = tmp_path_factory.mktemp(model_type)
    torch_model = helpers.save_tiny(model_type, d, **kw)
    cfg, params = hf_io.load_pretrained(d)
    out[model_type] = (cfg, params, torch_model)
  return out


def _sched(models, model_type="qwen3", cfg=SMALL):
  model_cfg, params, _ = models[model_type]
  engine = engine_lib.TmaxEngine(model_cfg, cfg, lambda: params)
  sched = engine.replicas[0].start(lambda events: None)
  sched.trace = []
  return sched


def _seq(i, prompt, n, params=GREEDY, **kw):
  return scheduler.Sequence(i, list(prompt), n, params, **kw)


def _tokens(events):
  return [e.token for e in events]


def test_greedy_matches_transformers_with_batched_and_chunked_prefill(models):
  sched = _sched(models)
  prompts = helpers.prompts(6, seed=1, hi=40)  # 6 prompts, 4 slots: slots and pages are reused
  out = helpers.collect(sched, [_seq(i, p, 20) for i, p in enumerate(prompts)])
  ref = helpers.hf_greedy(models["qwen3"][2], prompts, 20)
  assert [_tokens(out[i]) for i in range(6)] == ref
  prefills = [t for t in sched.trace if t[0] == "prefill"]
  assert max(rows for _, rows, _ in prefills) == 4  # waiting requests prefill together
  assert any(tokens > 16 for _, _, tokens in prefills)  # several rows' chunks in one call
  assert sched.status()["pages_used"] == 0 and sched.pool.reserved == 0


def test_status_is_published_before_a_request_s_last_event(models):
  """A client that holds a request's last token and asks for the status sees the request
  retired (the flake hunt's seed 338907177 read pages_used 5, active_requests 1)."""
  sched, seen = _sched(models), []
  sched.emit = lambda events: seen.extend((e, sched.status()) for e in events)
  sched.submit(_seq(0, helpers.prompts(1, seed=8)[0], 6))
  sched.run_until_idle()
  assert [e.finish_reason for e, _ in seen] == [""] * 5 + ["length"]
  assert seen[0][1]["active"] == 1  # while it streams, the request is counted
  assert seen[-1][1]["active"] == 0 and seen[-1][1]["pages_used"] == 0


def test_pages_admitted_exhausted_and_freed(models):
  """6 pages of 8 tokens: each request may need 3 (12 + 12 tokens), so 2 run and 2 wait for
  pages although slots are free; all finish correctly, and every page is free again."""
  cfg = dataclasses_replace(
    SMALL, max_len=32, max_prefill_length=16, num_pages=6, prefix_cache=False
  )
  sched = _sched(models, cfg=cfg)
  prompts = helpers.prompts(4, seed=2, lo=12, hi=13)
  for i, p in enumerate(prompts):
    sched.submit(_seq(i, p, 12))
  sched.step()
  st = sched.status()
  assert (st["waiting"], st["pages_reserved"] + st["pages_used"]) == (2, 6)
  out = helpers.collect(sched, [])
  assert [_tokens(out[i]) for i in range(4)] == helpers.hf_greedy(models["qwen3"][2], prompts, 12)
  st = sched.status()
  assert (st["pages_free"], st["pages_used"], st["pages_reserved"]) == (6, 0, 0)
  assert sched.stats["peak_pages_in_use"] == 6


def test_long_prompt_prefills_in_chunks_while_others_stream(models):
  sched = _sched(models)
  short, long = helpers.prompts(1, seed=3)[0], helpers.prompts(1, seed=4, lo=90, hi=91)[0]
  sched.submit(_seq("short", short, 40))
  while not sched.decoding:  # the short request is decoding before the long one arrives
    sched.step()
  out = helpers.collect(sched, [_seq("long", long, 8)])
  kinds = [t[0] for t in sched.trace]
  first_decode = kinds.index("decode")
  chunks = [i for i, t in enumerate(sched.trace) if t[0] == "prefill" and i > first_decode]
  assert len(chunks) == 6  # the long prompt's 89 tokens in 16-token chunks
  assert all(kinds[i + 1] == "decode" for i in chunks)  # a decode step after every chunk
  ref = helpers.hf_greedy(models["qwen3"][2], [short, long], 40)
  assert _tokens(out["short"]) == ref[0][: len(out["short"])]
  assert _tokens(out["long"]) == ref[1][:8]


def _episode(sched, prompt, turns, obs_len, seed):
  """A multi-turn episode: each turn appends the completion and an observation -> (tokens,
  logprobs) per turn."""
  rng = np.random.default_rng(seed)
  history, result = list(prompt), []
  for turn in range(turns):
    sp = sampling.SamplingParams(temperature=1.0, seed=seed * 100 + turn)
    events = helpers.collect(sched, [_seq(turn, history, 6, sp)])[turn]
    result.append((_tokens(events), [e.logprob for e in events]))
    history += _tokens(events) + rng.integers(1, helpers.VOCAB, obs_len).tolist()
  return result


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_5"])
def test_multi_turn_episode_identical_with_and_without_prefix_cache(models, model_type):
  prompt = helpers.prompts(1, seed=5, lo=30, hi=31)[0]
  runs, stats = [], []
  for cache in (False, True):
    sched = _sched(models, model_type, dataclasses_replace(SMALL, prefix_cache=cache))
    runs.append(_episode(sched, prompt, turns=4, obs_len=11, seed=7))
    stats.append(dict(sched.stats))
  (plain, cached), (s_plain, s_cached) = runs, stats
  for (t0, l0), (t1, l1) in zip(plain, cached, strict=True):
    assert t0 == t1
    np.testing.assert_allclose(l1, l0, rtol=0, atol=1e-5)
  assert s_plain["cached_tokens"] == 0 and s_cached["cached_tokens"] > 0
  # Later turns prefill only the new tokens: the completion's last token and the observation.
  assert s_cached["prefill_tokens"] + s_cached["cached_tokens"] == s_plain["prefill_tokens"]
  assert s_cached["prefill_tokens"] < s_plain["prefill_tokens"] / 2


@pytest.mark.slow  # the default suite's budget (docs/design/ci.md)
@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_5"])
def test_unrolled_serving_matches_the_scanned_stack(models, model_type):
  """One pool buffer per layer and unstacked params (`unrolled_layers`) serve what the scanned stack
  over the stacked pool serves: a multi-turn episode with the prefix cache (page copies,
  Qwen3.5's state blocks) and a sampled batch, same tokens, logprobs to fp32 rounding."""
  prompt = helpers.prompts(1, seed=5, lo=30, hi=31)[0]
  runs = []
  for unrolled in (False, True):
    cfg = dataclasses_replace(SMALL, unrolled_layers=unrolled)
    episode = _episode(_sched(models, model_type, cfg), prompt, turns=3, obs_len=11, seed=7)
    batch = [
      _seq(i, p, 12, sampling.SamplingParams(temperature=1.0, seed=i) if i % 2 else GREEDY)
      for i, p in enumerate(helpers.prompts(5, seed=2))
    ]
    out = helpers.collect(_sched(models, model_type, cfg), batch)
    runs.append(episode + [(_tokens(out[i]), [e.logprob for e in out[i]]) for i in range(5)])
  for (t0, l0), (t1, l1) in zip(*runs, strict=True):
    assert t0 == t1
    np.testing.assert_allclose(l1, l0, rtol=0, atol=1e-5)


@pytest.mark.parametrize("model_type", ["qwen3", pytest.param("qwen3_5", marks=pytest.mark.slow)])
def test_an_unscanned_config_is_served_in_both_layouts(models, model_type):
  """A model config with scan_layers=False (params `model/layers_{i}`) is served as it is over
  the stacked pool, or as given over the per-layer pool (nothing to unstack): the same tokens
  as the scanned config."""
  model_cfg, params, _ = models[model_type]
  flat_cfg = dataclasses_replace(model_cfg, scan_layers=False)
  flat = registry.build_model(model_cfg).stack.unstack_params(model_cfg, params)
  outs = []
  for cfg, p, unrolled in (
    (model_cfg, params, False),
    (flat_cfg, flat, False),
    (flat_cfg, flat, True),
  ):
    engine = engine_lib.TmaxEngine(
      cfg, dataclasses_replace(SMALL, unrolled_layers=unrolled), lambda p=p: p
    )
    sched = engine.replicas[0].start(lambda events: None)
    out = helpers.collect(sched, [_seq(i, q, 8) for i, q in enumerate(helpers.prompts(3, seed=1))])
    outs.append([_tokens(out[i]) for i in range(3)])
  assert outs[1] == outs[0] and outs[2] == outs[0]


def test_unrolled_decode_step_copies_no_weights_and_no_pool(models):
  """The compiled decode step of the unrolled layout slices no weight stack and copies no
  layer's pool (the scanned one slices every [L, ...] weight per layer,
  docs/design/inference.md "Decode profile"): no dynamic-slice at all, and no copy as large as a
  page buffer or an MLP kernel."""
  from tmax_jax import hlo_cost

  sched = _sched(models, cfg=dataclasses_replace(SMALL, unrolled_layers=True))
  core, (served, version) = sched.core, sched.box.get()
  table = np.zeros((core.shape.slots, 2), np.int32)
  text = core.decode.lower(served, sched.state, table, np.int32(version)).compile().as_text()
  pages = sched.state["pool"][0]["k_pages"]
  mlp = served["params"]["model"]["layers_0"]["mlp"]["up_proj"]["kernel"]
  limit = min(pages.size * pages.dtype.itemsize, mlp.size * mlp.dtype.itemsize)
  ops = [ln.split(" = ", 1)[1] for ln in text.splitlines() if " = " in ln and "%" in ln]
  big = [
    op[:120] for op in ops if " copy(" in op and hlo_cost.type_bytes(op.split(" copy(")[0]) >= limit
  ]
  assert not [op for op in ops if " dynamic-slice(" in op]
  assert not big


def _tensor_sched(models, model_type, tensor=2, cfg=SMALL):
  model_cfg, params, _ = models[model_type]
  engine = engine_lib.TmaxEngine(
    model_cfg, cfg, lambda: params, mesh=engine_lib.serving_mesh(replicas=1, tensor=tensor)
  )
  return engine.replicas[0].start(lambda events: None)


def test_qwen3_5_state_blocks_split_over_tensor_devices(models):
  """The Gated DeltaNet state (slot + prefix-cache blocks) is split like the params that make it
  (recurrent heads, conv channels), not one full copy per tensor device; so are the served params
  (also when `prepare` unstacks them)."""
  for unrolled in (False, True):  # the stacked pool (default) and one entry per layer
    cfg = dataclasses_replace(SMALL, unrolled_layers=unrolled)
    sched = _tensor_sched(models, "qwen3_5", cfg=cfg)
    pool, served = sched.state["pool"], sched.box.get()[0]["params"]
    assert any("tensor" in tuple(x.sharding.spec) for x in jax.tree.leaves(served))
    subs = pool if unrolled else list(pool.values())
    states = [sub for sub in subs if "recurrent" in sub]
    assert states and all("k_pages" in sub for sub in subs if "recurrent" not in sub)
    for sub in states:
      for name, dim in (("recurrent", 2), ("conv", 3)):
        x = sub[name]
        assert {s.data.shape[dim] for s in x.addressable_shards} == {x.shape[dim] // 2}, name


@pytest.mark.slow
def test_qwen3_5_tensor_parallel_episode_matches_single_device(models):
  """Qwen3.5 on 2 tensor devices, prefix cache on (state blocks saved and restored while split):
  a multi-turn episode's tokens and logprobs equal the single-device engine's (fp32 1e-5)."""
  prompt = helpers.prompts(1, seed=5, lo=30, hi=31)[0]
  one = _episode(_sched(models, "qwen3_5"), prompt, turns=3, obs_len=11, seed=7)
  sched = _tensor_sched(models, "qwen3_5")
  two = _episode(sched, prompt, turns=3, obs_len=11, seed=7)
  assert sched.stats["cached_tokens"] > 0
  for (t0, l0), (t1, l1) in zip(one, two, strict=True):
    assert t0 == t1
    np.testing.assert_allclose(l1, l0, rtol=0, atol=1e-5)


def test_group_of_identical_prompts_prefills_once(models):
  sched = _sched(models)
  prompt = helpers.prompts(1, seed=6, lo=41, hi=42)[0]
  seqs = [_seq(i, prompt, 5, sampling.SamplingParams(seed=i)) for i in range(4)]
  out = helpers.collect(sched, seqs)
  assert sched.stats["prefill_tokens"] == 40 and sched.stats["cached_tokens"] == 3 * 40
  assert len({tuple(_tokens(out[i])) for i in range(4)}) > 1  # different seeds, own samples


def test_topk_logprobs_match_trainer_chunked_head(models):
  """Each token's top-K under the tempered full-vocabulary distribution = the trainer's
  train/topk.py at those ids; the ids are the trainer's top-K; the sampled token's logprob is
  the same distribution's."""
  cfg, params, _ = models["qwen3"]
  sched = _sched(models)
  prompt, t = helpers.prompts(1, seed=8)[0], 0.7
  ev = helpers.collect(
    sched, [_seq(0, prompt, 12, sampling.SamplingParams(temperature=t, seed=2), topk=4)]
  )[0]
  completion = _tokens(ev)
  seq = jnp.asarray([prompt + completion])
  model = registry.build_model(cfg)
  hidden, _ = model.apply(
    {"params": params}, seq, jnp.arange(seq.shape[1])[None], jnp.ones_like(seq)
  )
  hidden = hidden[:, len(prompt) - 1 : -1]  # the positions that predicted each completion token
  head = registry.head_weight(params, cfg)
  full = jax.nn.log_softmax(logprobs.full_logits(hidden, head) / t, axis=-1)[0]  # [n,V]
  ids = np.asarray([e.topk_ids for e in ev])
  np.testing.assert_array_equal(ids, np.argsort(-np.asarray(full), axis=-1)[:, :4])
  want = topk_lib.topk_logprobs(hidden, head, jnp.asarray(ids)[None], chunk_size=8, temperature=t)[
    0
  ]
  # End to end (the served body vs the trainer's cache-free forward): the 1e-4 of the standard.
  np.testing.assert_allclose(np.asarray([e.topk_logprobs for e in ev]), want, atol=1e-4, rtol=0)
  np.testing.assert_allclose(
    [e.logprob for e in ev], np.asarray(full)[np.arange(len(ev)), completion], atol=1e-4, rtol=0
  )
  # The same distribution: a sampled token inside its own top-K has exactly that logprob.
  for e, tok in zip(ev, completion, strict=True):
    if tok in e.topk_ids:
      assert e.topk_logprobs[e.topk_ids.index(tok)] == pytest.approx(e.logprob, abs=1e-6)


def test_jetstream_engine_api_prefill_insert_generate(models):
  """The stock Engine API still drives a replica: prefill -> insert(slot) -> generate."""
  cfg, params, torch_model = models["qwen3"]
  engine = engine_lib.TmaxEngine(cfg, SMALL, lambda: params)
  rep = engine.replicas[0]
  box = rep.load_params()
  state = rep.init_decode_state()
  prompts = helpers.prompts(2, seed=9)
  for slot, p in enumerate(prompts):
    padded = np.zeros((64,), np.int32)
    padded[: len(p)] = p
    state = rep.insert(
      rep.prefill(params=box, padded_tokens=padded, true_length=len(p)), state, slot
    )
  got = [[], []]
  for _ in range(10):
    state, result = rep.generate(box, state)
    for slot in range(2):
      got[slot].append(int(result.get_result_at_slot(slot).tokens[0, 0]))
  assert got == helpers.hf_greedy(torch_model, prompts, 10)


def dataclasses_replace(cfg, **kw):
  import dataclasses

  return dataclasses.replace(cfg, **kw)


@pytest.mark.parametrize("model_type", ["qwen3", "qwen3_5"])
def test_batch_invariant_request_is_bit_identical_alone_and_in_company(models, model_type):
  """With batch_invariant (deterministic RL runs), a sampled request's tokens and logprobs are the
  same bits whether it runs alone or shares its prefill and decode steps with longer requests
  (which move every bucketed shape: chunk, rows, block-table pages)."""
  cfg = dataclasses_replace(SMALL, prefix_cache=False, batch_invariant=True)
  prompt = helpers.prompts(1, seed=8, lo=9, hi=10)[0]
  company = helpers.prompts(3, seed=9, lo=60, hi=120)
  sp = sampling.SamplingParams(temperature=1.0, seed=3)
  alone = helpers.collect(_sched(models, model_type, cfg), [_seq("x", prompt, 24, sp)])["x"]
  seqs = [
    _seq(i, p, 40, sampling.SamplingParams(temperature=1.0, seed=i)) for i, p in enumerate(company)
  ]
  sched = _sched(models, model_type, cfg)
  together = helpers.collect(sched, seqs[:2] + [_seq("x", prompt, 24, sp)] + seqs[2:])["x"]
  assert max(rows for kind, rows, *_ in sched.trace if kind == "prefill") > 1
  assert _tokens(together) == _tokens(alone)
  np.testing.assert_array_equal(
    np.array([e.logprob for e in together], np.float32),
    np.array([e.logprob for e in alone], np.float32),
  )


def test_the_first_call_of_each_program_logs_its_compile(models, caplog):
  sched = _sched(models)
  with caplog.at_level("DEBUG", logger="tmax_jax.inference.scheduler"):
    helpers.collect(sched, [_seq(0, helpers.prompts(1, seed=3, hi=20)[0], 6)])
    helpers.collect(sched, [_seq(1, helpers.prompts(1, seed=4, hi=20)[0], 6)])  # shapes seen
  info = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
  assert [m.split(" (")[0] for m in info] == [
    "compiling the prefill program",
    "compiled the prefill program",
    "compiling the decode program",
    "compiled the decode program",
  ], info
  assert info[0].endswith("; requests wait for it") and " s" in info[1]
  again = [r for r in caplog.records if "compiling" in r.getMessage()]
  assert len({r.getMessage() for r in again}) == len(again)  # each shape once
