"""TMAX-9B on the paper's cluster: 2 training nodes + 6 inference nodes of 8 x H100 on Ray, the
episodes' sandboxes on the cluster's sandbox hosts (tmax_jax/recipes.py). Start the cluster with
its sandbox nodes (README "Scaling out"), then on the head:

python3 launch/cluster.py --address=auto --rl_config=configs/tmax_qwen3_5_9b_2x6_h100.py \\
    --gpus_per_replica=8 --trainer_gpus=8 \\
    --rl_config.model.checkpoint=runs/sft_9b/hf --rl_config.tasks.source=/data/tmax15k
Memory per node kind: python3 -m tmax_jax.plan --config=configs/tmax_qwen3_5_9b_2x6_h100.py
"""

from tmax_jax import recipes
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(recipes.tmax_qwen3_5_9b_2x6_h100())
