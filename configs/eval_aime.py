"""The AIME check (math ability after terminal RL): a problem file you give (JSONL or parquet with
`problem` and `answer`; AIME answers are integers 0-999, checked at load) sampled k = 8 times per
problem through the inference server, scored by the last boxed answer (pass@1 mean +- stderr).

python3 launch/math_eval.py --config=configs/eval_aime.py --config.problems=aime.jsonl \
    --config.output_dir=runs/aime
Serve a checkpoint for the run instead of using the running server (its family is derived):
python3 launch/math_eval.py --config=configs/eval_aime.py --config.problems=aime.jsonl \
    --config.address='' --config.family='' --config.model.checkpoint=/ckpt/hf
Settings: the recipe's sampling (T = 1, no top-p/k) and per-turn cap (16384 generated tokens), its
prompt cap (2048); the model family's chat template with its default thinking mode; k = 8 is this
config's choice (the recipe names none). A running server must hold 2048 + 16384 tokens per
sequence; one started here is sized for that.
"""

from tmax_jax.agents import EpisodeConfig
from tmax_jax.config_dict import to_config_dict
from tmax_jax.inference.engine import EngineConfig
from tmax_jax.loop import ModelSpec, ServingConfig
from tmax_jax.loop.math_eval import MathEvalConfig
from tmax_jax.recipes import MAX_PROMPT

MAX_TOKENS = EpisodeConfig().turn_max_tokens  # the recipe's 16384 per turn


def get_config():
  return to_config_dict(
    MathEvalConfig(
      problems="",
      output_dir="runs/eval_aime",
      address="127.0.0.1:9000",
      family="qwen3_5",
      samples_per_problem=8,
      integer_answers=True,
      max_prompt_tokens=MAX_PROMPT,
      max_tokens=MAX_TOKENS,
      model=ModelSpec(checkpoint="", preset=""),
      serving=ServingConfig(
        engine=EngineConfig(
          max_concurrent_decodes=32,
          max_len=MAX_PROMPT + MAX_TOKENS,
          max_prefill_length=MAX_PROMPT,
        )
      ),
    )
  )
