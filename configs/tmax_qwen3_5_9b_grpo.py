"""The recipe's stability ablation: TMAX-9B (configs/tmax_qwen3_5_9b.py) with GRPO's clipped PPO
objective (behaviour logprobs as pi_old, clip low 0.2 / high 0.272) and GRPO's std-normalised group
advantages, (R - mean) / (std + 1e-8), in place of DPPO and its centred ones; every other setting is
the same run's. The loss alone, with centred advantages: --config.train.loss.advantage=centered

python3 launch/train_rl.py --config=configs/tmax_qwen3_5_9b_grpo.py \
    --config.model.checkpoint=/ckpt/Qwen3.5-9B --config.tasks.source=/data/tmax15k
Any recipe config switches the same way: --config.train.loss.policy_loss=grpo.
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.with_policy_loss(recipes.tmax_qwen3_5_9b(), "grpo"))
