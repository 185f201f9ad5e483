"""Builds both tokenizer families once per session into a temporary directory (~10 s)."""

import pytest
from transformers import AutoTokenizer

from tmax_jax.tokenizers import write_tokenizer_dir


@pytest.fixture(scope="session")
def built_dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp("tokenizers")
  return {f: write_tokenizer_dir(f, root / f) for f in ("qwen3", "qwen3_5")}


@pytest.fixture(scope="session")
def toks(built_dirs):
  return {f: AutoTokenizer.from_pretrained(str(d)) for f, d in built_dirs.items()}
