"""Shared helpers: tiny random transformers models (the numerical reference) saved as
checkpoints."""

import pathlib

import numpy as np
import torch
import transformers

VOCAB = 128
# One serving shape for the tests: engines with the same model config and shape share compiled
# programs (decode.PagedCore.shared), which keeps the suite's compile time down.
ENGINE = dict(
  max_concurrent_decodes=4,
  max_len=512,
  max_prefill_length=64,
  page_size=8,
  prefill_chunk=16,
  prefill_batch=4,
  max_topk=4,
)

TINY = dict(
  vocab_size=VOCAB,
  hidden_size=64,
  intermediate_size=128,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=16,
  max_position_embeddings=512,
  rope_theta=10000.0,
  rms_norm_eps=1e-6,
  initializer_range=0.3,
)


def hf_config(model_type: str, **overrides):
  kw = dict(TINY, **overrides)
  if model_type == "qwen2":
    return transformers.Qwen2Config(tie_word_embeddings=False, **kw)
  if model_type == "qwen3":
    return transformers.Qwen3Config(tie_word_embeddings=True, **kw)
  if model_type == "qwen3_5":
    return transformers.Qwen3_5TextConfig(tie_word_embeddings=False, **kw)
  raise ValueError(model_type)


def save_tiny(model_type: str, out_dir: pathlib.Path, seed: int = 0, **overrides):
  """Builds a random tiny HF causal LM, saves it (safetensors) and returns the torch model."""
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(hf_config(model_type, **overrides))
  model = model.float().eval()
  model.save_pretrained(out_dir)
  return model


def hf_greedy(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
  """transformers' greedy generate, one prompt at a time (no padding effects), no EOS stop."""
  out = []
  for p in prompts:
    ids = torch.tensor([p])
    with torch.no_grad():
      gen = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
      )
    out.append(gen[0, len(p) :].tolist())
  return out


def prompts(n: int, seed: int = 0, lo: int = 3, hi: int = 40) -> list[list[int]]:
  rng = np.random.default_rng(seed)
  return [rng.integers(1, VOCAB, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]


def collect(scheds, seqs):
  """Submits scheduler.Sequences (`scheds` one scheduler, or one per sequence), steps every
  scheduler until idle -> {handle: [Event, ...]} (also for requests submitted earlier)."""
  events: dict = {}

  def emit(evs):
    for e in evs:
      events.setdefault(e.handle, []).append(e)

  per_seq = scheds if isinstance(scheds, list) else [scheds] * len(seqs)
  everyone = set(scheds) if isinstance(scheds, list) else {scheds}
  for s in everyone:
    s.emit = emit
  # a list of schedulers with no new seqs steps requests submitted earlier: zip stops at seqs
  for sched, seq in zip(per_seq, seqs, strict=False):
    sched.submit(seq)
  while any(s.busy or not s.inbox.empty() for s in everyone):
    for s in everyone:
      s.step()
  return events
