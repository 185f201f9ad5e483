"""Any OpenAI-compatible chat endpoint as a harness policy (the teacher and the probe agent).

The harnesses are token in / token out (`generate(token_ids, max_tokens) -> Completion`). This
adapter decodes the conversation so far (rendered by the student's own chat template, so the
system prompt already explains the tool-call syntax of the harness), splits it into chat messages
at the template's turn markers and sends them to `{base_url}/chat/completions` through the
generator's `ChatClient`; the teacher's reply text is tokenised with the student's tokenizer and
returned as the turn's tokens (logprob 0, version -1: not sampled from our policy). The trajectory
is therefore exactly what the student model would train on, in its own format.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tmax_jax.agents.scripted import ScriptedCompletion
from tmax_jax.formats.tokens import encode
from tmax_jax.tasks.generator.llm import ChatClient

_TURN = re.compile(r"<\|im_start\|>(system|user|assistant)\n(.*?)<\|im_end\|>", re.S)
_THINK_PREFILL = "<think>\n"


def chat_messages(text: str) -> tuple[list[dict[str, str]], str]:
  """Rendered conversation -> (messages, generation prefill). Tool results (rendered by Qwen
  templates as user turns wrapped in <tool_response>) are sent as user messages, verbatim."""
  messages = [{"role": m.group(1), "content": m.group(2)} for m in _TURN.finditer(text)]
  tail = text[text.rfind("<|im_end|>") + len("<|im_end|>") :] if messages else text
  prefill = tail.split("<|im_start|>assistant\n", 1)[1] if "<|im_start|>assistant\n" in tail else ""
  if not messages:
    raise ValueError(
      "the prompt has no <|im_start|>role ... <|im_end|> turns; is this a Qwen "
      "chat-template rendering?"
    )
  return messages, prefill


@dataclasses.dataclass
class ChatTeacher:
  """`generate(token_ids, max_tokens)` backed by a chat endpoint (one request per turn)."""

  client: ChatClient
  tokenizer: object
  calls: int = 0
  seed: int | None = None  # sent with every request (reproducible sampling where supported)

  def __call__(self, token_ids: Sequence[int], max_tokens: int) -> ScriptedCompletion:
    text = self.tokenizer.decode(list(token_ids), skip_special_tokens=False)
    messages, prefill = chat_messages(text)
    seed = {} if self.seed is None else {"seed": self.seed}
    reply = self.client.complete(messages, max_tokens=max_tokens, **seed).strip()
    self.calls += 1
    if prefill.endswith(_THINK_PREFILL) and "</think>" not in reply:
      reply = "\n</think>\n\n" + reply  # the template opened a reasoning block: close it empty
    ids = encode(self.tokenizer, reply + self.tokenizer.eos_token)
    finish = "stop" if len(ids) <= max_tokens else "length"
    ids = ids[:max_tokens]
    return ScriptedCompletion(ids, [0.0] * len(ids), [-1] * len(ids), finish)
