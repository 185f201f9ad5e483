"""Offline tokenizers (built from tiktoken ranks) with the official chat templates; the specs are
registered by the model families (registry.Family.tokenizers). The face (`__all__`, checked by
tests/test_faces.py): import these names from here; builder.py is internal."""

from tmax_jax.tokenizers.builder import (
  CONFIG_FILES,
  cache_root,
  copy_tokenizer_files,
  load_tokenizer,
  tokenizer_dir,
  write_tokenizer_dir,
)

__all__ = [
  "CONFIG_FILES",
  "cache_root",
  "copy_tokenizer_files",
  "load_tokenizer",
  "tokenizer_dir",
  "write_tokenizer_dir",
]
