"""Several decode steps per dispatched program (EngineConfig.decode_steps): the same requests
get the same events as with one step per call, including stops inside a call, max_tokens,
running out of max_len, sampling and the prefix cache (whose pages and Qwen3.5 state blocks
must hold exactly the conversation, not the steps a stopped slot would otherwise have run)."""

import dataclasses

import inference_helpers as helpers
import numpy as np
import pytest

from tmax_jax.inference import decode, sampling, scheduler
from tmax_jax.inference import engine as engine_lib
from tmax_jax.models import hf_io

SMALL = engine_lib.EngineConfig(**helpers.ENGINE)
STOPS = frozenset(range(40, 48))  # 8 of the 128 ids: sampled turns hit one now and then


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  out = {}
  for model_type, kw in (("qwen3", {}), ("qwen3_5", dict(num_hidden_layers=4))):
    d = tmp_path_factory.mktemp(model_type)
    helpers.save_tiny(model_type, d, **kw)
    out[model_type] = hf_io.load_pretrained(d)
  return out


def _sched(models, model_type, **kw):
  model_cfg, params = models[model_type]
  cfg = dataclasses.replace(SMALL, **kw)
  sched = engine_lib.TmaxEngine(model_cfg, cfg, lambda: params).replicas[0].start(lambda e: None)
  sched.trace = []
  return sched


def _requests():
  """6 requests on 4 slots: greedy and sampled, stop ids, one that runs out of max_len."""
  out = []
  for i, p in enumerate(helpers.prompts(5, seed=11)):
    sp = sampling.SamplingParams(temperature=1.0, seed=i) if i % 2 else decode_greedy()
    out.append(scheduler.Sequence(i, p, 9 + 3 * i, sp, stop_ids=STOPS if i >= 2 else frozenset()))
  long = helpers.prompts(1, seed=12, lo=500, hi=501)[0]  # max_len 512: 12 tokens fit
  out.append(scheduler.Sequence("long", long, 40, decode_greedy()))
  return out


def decode_greedy():
  return sampling.SamplingParams(temperature=0.0)


def _summary(events):
  return [(e.token, e.finish_reason, e.version) for e in events], [e.logprob for e in events]


def _episode(sched, model_type, seed=7):
  """4 sampled turns (stop ids, <= 10 tokens each) of one conversation -> per turn events."""
  rng = np.random.default_rng(seed)
  history, turns = helpers.prompts(1, seed=5, lo=30, hi=31)[0], []
  for turn in range(4):
    sp = sampling.SamplingParams(temperature=1.0, seed=seed * 100 + turn)
    events = helpers.collect(sched, [scheduler.Sequence(turn, history, 10, sp, stop_ids=STOPS)])
    turns.append(_summary(events[turn]))
    history += [e.token for e in events[turn]] + rng.integers(1, helpers.VOCAB, 9).tolist()
  return turns


@pytest.mark.parametrize(
  "model_type",
  ["qwen3", pytest.param("qwen3_5", marks=pytest.mark.slow)],  # 20 s: slow suite
)
def test_multi_step_decode_serves_what_one_step_serves(models, model_type):
  runs = {}
  for steps in (1, 3):
    sched = _sched(models, model_type, decode_steps=steps)
    out = helpers.collect(sched, _requests())
    batch = [_summary(out[h]) for h in [*range(5), "long"]]
    cached = _sched(models, model_type, decode_steps=steps)
    episode = _episode(cached, model_type)
    plain = _episode(_sched(models, model_type, decode_steps=steps, prefix_cache=False), model_type)
    runs[steps] = (batch, episode, plain, dict(sched.stats), dict(cached.stats))
  (b1, e1, p1, s1, _), (b3, e3, p3, s3, c3) = runs[1], runs[3]
  reasons = [r for events, _ in b1 + e1 for _, r, _ in events if r]
  assert {"stop", "length"} <= set(reasons)  # stops inside a call and the limits both happen
  assert b1[-1][0][-1] == (None, "length", 0)  # ran out of max_len
  for (t1, l1), (t3, l3) in zip(b1 + e1 + p1, b3 + e3 + p3, strict=True):
    assert t3 == t1
    np.testing.assert_allclose(l3, l1, rtol=0, atol=1e-5)
  # The cached episode is the uncached one: the pages and state blocks registered after a stop
  # hold the conversation only.
  assert [t for t, _ in e3] == [t for t, _ in p3] and c3["cached_tokens"] > 0
  assert s3["decode_steps"] > s3["decode_calls"] and s1["decode_steps"] == s1["decode_calls"]
  assert s3["decode_calls"] < s1["decode_calls"]


def test_a_call_of_several_steps_is_one_program_with_one_read_back(models):
  """While nothing prefills every call runs decode_steps steps and returns [steps, B, C]."""
  sched = _sched(models, "qwen3", decode_steps=4)
  helpers.collect(sched, [scheduler.Sequence(0, [5, 6, 7], 16, decode_greedy())])
  calls = [steps for kind, _, steps in sched.trace if kind == "decode"]
  # 16 tokens + the step that writes the last one: 17 live steps in 5 calls of 4 (the prefill
  # ended before the first call was dispatched).
  assert calls == [4] * 5 and sched.stats["decode_steps"] == 20
  served, version = sched.box.get()
  table = sched.table[:, :8].copy()
  state, data = sched.core.decode_program(4)(served, sched.state, table, np.int32(version))
  sched.state = state
  assert data.shape == (4, SMALL.max_concurrent_decodes, 5 + 2 * SMALL.max_topk)


def test_too_many_stop_ids_are_refused_with_the_limit_named(models):
  sched = _sched(models, "qwen3")
  seq = scheduler.Sequence(0, [1, 2], 4, decode_greedy(), stop_ids=frozenset(range(9)))
  with pytest.raises(ValueError, match="at most 8 per request"):
    sched.submit(seq)
  with pytest.raises(ValueError, match="max_stop_ids=2"):
    dataclasses.replace(SMALL, stop_token_ids=(1, 2, 3), max_stop_ids=2)
  with pytest.raises(ValueError, match="decode_steps=0"):
    dataclasses.replace(SMALL, decode_steps=0)
  assert decode.slot_arrays(decode_greedy(), 4, {3, 1}, 4)["stop"].tolist() == [1, 3, -1, -1]
