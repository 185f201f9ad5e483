"""Offline Qwen tokenizers (Qwen3 151k, Qwen3.5 248k) with the official chat templates."""

from tmax_jax.tokenizers.builder import (CONFIG_FILES, cache_root, copy_tokenizer_files,
                                         load_tokenizer, tokenizer_dir, write_tokenizer_dir)
from tmax_jax.tokenizers.specs import SPECS, TokenizerSpec, get_spec

__all__ = ["CONFIG_FILES", "SPECS", "TokenizerSpec", "cache_root", "copy_tokenizer_files",
           "get_spec", "load_tokenizer", "tokenizer_dir", "write_tokenizer_dir"]
