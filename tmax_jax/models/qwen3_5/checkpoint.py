"""Loading Qwen3.5 checkpoints of either layout, saying what is not ported (vision tower, MTP)."""

from __future__ import annotations

import logging
import pathlib
from typing import Any

from tmax_jax.models import hf_io

log = logging.getLogger(__name__)
_NOT_PORTED = (
  "model.visual.",
  "mtp.",
)  # canonical keys (hf_io maps model.language_model. -> model.)


def skipped_tensors(ckpt_dir: str | pathlib.Path) -> dict[str, int]:
  """Prefix -> number of tensors in the checkpoint that the text model does not use."""
  counts: dict[str, int] = {}
  for key in hf_io.index_checkpoint(ckpt_dir):
    for prefix in _NOT_PORTED:
      if key.startswith(prefix):
        counts[prefix] = counts.get(prefix, 0) + 1
  return counts


def load_pretrained(ckpt_dir: str | pathlib.Path, mesh: Any = None, **overrides):
  """hf_io.load_pretrained plus one log line naming the skipped vision/MTP tensors, if any."""
  skipped = skipped_tensors(ckpt_dir)
  if skipped:
    parts = ", ".join(f"{n} tensors under {p}*" for p, n in sorted(skipped.items()))
    log.info("%s: loading the Qwen3.5 text model only; not ported, skipped: %s", ckpt_dir, parts)
  return hf_io.load_pretrained(ckpt_dir, mesh, **overrides)
