"""Token-in/token-out multi-turn helpers: never re-tokenise what the model generated.

An episode's token sequence is built by appending, never re-rendering:

  prompt ids      = chat template(system, user, tools) with the generation prompt
  generated ids   = exactly what the server returned (ending in <|im_end|>), with logprobs
  observation ids = `continuation_ids(...)`: "\\n" (closing the assistant turn) + the template's
                    rendering of the tool/user message + the next generation prompt

For canonical model text this equals tokenising the chat template's rendering of the whole
conversation (tested); when the model's text is not canonical (odd whitespace, a different split
of the same string) the appended sequence is still exactly what the model saw, which re-rendering
would not be. Observation and prompt tokens carry loss weight 0.
"""

import dataclasses

import numpy as np

_ANCHOR = "TMAX_TURN_ANCHOR"


def encode(tokenizer, text: str) -> list:
  """Token ids of `text` with no BOS/EOS added (Qwen adds none anyway)."""
  return list(tokenizer.encode(text, add_special_tokens=False))


def prompt_ids(tokenizer, messages, tools=None, **template_kwargs) -> list:
  """Ids of the first prompt: the chat template with the assistant generation prompt."""
  text = tokenizer.apply_chat_template(
    messages, tools=tools, tokenize=False, add_generation_prompt=True, **template_kwargs
  )
  return encode(tokenizer, text)


def continuation_text(tokenizer, messages, **template_kwargs) -> str:
  """Text that follows a finished assistant turn's final <|im_end|> to add `messages`.

  `messages` are the new tool results (role `tool`) or user turns. The text is cut out of the chat
  template's own rendering (after an anchor assistant turn), so it follows the template exactly,
  including tool-result grouping, content trimming (Qwen3.5) and the generation prompt for the
  next assistant turn (e.g. `<think>\\n` for Qwen3.5; pass enable_thinking=False to change it).
  """
  base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _ANCHOR}]
  text = tokenizer.apply_chat_template(
    base + list(messages), tokenize=False, add_generation_prompt=True, **template_kwargs
  )
  marker = _ANCHOR + tokenizer.eos_token
  if marker not in text:
    raise ValueError(f"chat template did not end the assistant turn with {tokenizer.eos_token!r}")
  return text[text.index(marker) + len(marker) :]


def continuation_ids(tokenizer, messages, **template_kwargs) -> list:
  """Ids of `continuation_text`; every chunk boundary sits at an added token, so tokenising the
  chunk alone gives the same ids as inside the full conversation."""
  return encode(tokenizer, continuation_text(tokenizer, messages, **template_kwargs))


def assistant_text(tokenizer, message, tools=None, **template_kwargs) -> str:
  """The text a model writes for the assistant `message` (content, tool_calls with arguments as
  objects, reasoning_content) in the chat template's own rendering: what follows the generation
  prompt, up to (without) the end-of-turn token. Canonical replies of scripted policies and of
  chat endpoints (tool calls rendered in the family's syntax) are written with it."""
  probe = [{"role": "user", "content": "q"}]
  prompt = tokenizer.apply_chat_template(
    probe, tools=tools, tokenize=False, add_generation_prompt=True, **template_kwargs
  )
  full = tokenizer.apply_chat_template(
    probe + [message], tools=tools, tokenize=False, **template_kwargs
  )
  eos = tokenizer.eos_token
  if not full.startswith(prompt) or eos not in full[len(prompt) :]:
    raise ValueError(
      "the chat template renders an assistant turn that does not extend its generation prompt; "
      "cannot write canonical replies for it"
    )
  text = full[len(prompt) :]
  return text[: text.index(eos)]


def tool_observation_ids(tokenizer, observation: str, **template_kwargs) -> list:
  """Continuation ids for one tool result (the native bash-tool harness)."""
  return continuation_ids(tokenizer, [{"role": "tool", "content": observation}], **template_kwargs)


def user_observation_ids(tokenizer, observation: str, **template_kwargs) -> list:
  """Continuation ids for an observation sent as a user turn (text-mode harnesses)."""
  return continuation_ids(tokenizer, [{"role": "user", "content": observation}], **template_kwargs)


@dataclasses.dataclass
class TokenTrajectory:
  """One episode as appended token segments.

  tokens[T], loss_mask[T] (1 = model-generated), logprobs[T] (server logprobs; 0 elsewhere),
  versions[T] (policy version that generated the token; -1 elsewhere),
  topk_ids[T] / topk_logprobs[T]: per token, the server's top-K token ids and their logprobs (K
  entries on generated tokens when the server returned top-K, an empty list elsewhere).
  """

  eos_id: int
  tokens: list = dataclasses.field(default_factory=list)
  loss_mask: list = dataclasses.field(default_factory=list)
  logprobs: list = dataclasses.field(default_factory=list)
  versions: list = dataclasses.field(default_factory=list)
  topk_ids: list = dataclasses.field(default_factory=list)
  topk_logprobs: list = dataclasses.field(default_factory=list)

  def _append(self, ids, mask, logprobs, version, topk_ids=None, topk_logprobs=None):
    ids = [int(i) for i in ids]
    self.tokens += ids
    self.loss_mask += [mask] * len(ids)
    self.logprobs += [float(x) for x in logprobs] if logprobs is not None else [0.0] * len(ids)
    self.versions += [version] * len(ids)
    self.topk_ids += [[int(i) for i in row] for row in topk_ids] if topk_ids else [[]] * len(ids)
    self.topk_logprobs += (
      [[float(x) for x in row] for row in topk_logprobs] if topk_logprobs else [[]] * len(ids)
    )

  def add_prompt(self, ids) -> None:
    """Context tokens (system/user prompt): no loss."""
    self._append(ids, 0, None, -1)

  def add_generated(self, ids, logprobs, version: int, topk_ids=None, topk_logprobs=None) -> None:
    """Tokens the policy sampled, with their server logprobs (one per token) and, optionally, the
    server's top-K ids/logprobs per token (`[n][K]` each; None or empty = none returned)."""
    if len(logprobs) != len(ids):
      raise ValueError(f"{len(ids)} generated ids but {len(logprobs)} logprobs")
    topk_ids, topk_logprobs = list(topk_ids or ()), list(topk_logprobs or ())
    if (topk_ids or topk_logprobs) and not (
      len(topk_ids) == len(ids) == len(topk_logprobs)
      and all(len(a) == len(b) for a, b in zip(topk_ids, topk_logprobs, strict=True))
    ):
      raise ValueError(
        f"{len(ids)} generated ids need as many topk_ids and topk_logprobs rows "
        f"of equal K; got {len(topk_ids)} and {len(topk_logprobs)} rows"
      )
    self._append(ids, 1, logprobs, int(version), topk_ids, topk_logprobs)

  def add_observation(self, ids) -> None:
    """Environment tokens after a generated turn: no loss.

    If the turn did not end in <|im_end|> (the response hit its token limit) the turn is closed
    here with an <|im_end|> that carries no loss, so the template structure stays intact.
    """
    ids = list(ids)
    if self.tokens and self.tokens[-1] != self.eos_id and self.loss_mask[-1] == 1:
      ids = [self.eos_id] + ids
    self._append(ids, 0, None, -1)

  @property
  def num_generated(self) -> int:
    return int(sum(self.loss_mask))

  def as_arrays(self) -> dict:
    """int32 tokens/mask/versions and float32 logprobs, each [T]."""
    return {
      "tokens": np.asarray(self.tokens, np.int32),
      "loss_mask": np.asarray(self.loss_mask, np.int32),
      "logprobs": np.asarray(self.logprobs, np.float32),
      "versions": np.asarray(self.versions, np.int32),
    }
