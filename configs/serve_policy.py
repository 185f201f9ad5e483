"""The server of one inference node of an RL job whose serving.placement is 'nodes': that job's
policy, serving shape and the engine settings the job derives (loop/config.node_server_config).
launch/cluster.py --rl_config=... starts one on every inference node; by hand:

python3 launch/serve.py --config=configs/serve_policy.py:configs/tmax_qwen3_5_9b_2x6_h100.py
"""

from tmax_jax import jobs
from tmax_jax.config_dict import load_config_file, to_config_dict
from tmax_jax.errors import UserError
from tmax_jax.loop import node_server_config


def get_config(rl_config: str = "configs/tmax_qwen3_5_9b_2x6_h100.py"):
  if not rl_config:
    raise UserError(
      "configs/serve_policy.py needs the RL job's config after a colon: "
      "--config=configs/serve_policy.py:configs/X.py"
    )
  try:
    cd = load_config_file(rl_config)
  except FileNotFoundError as e:
    raise UserError(f"configs/serve_policy.py:{rl_config}: no such file") from e
  return to_config_dict(node_server_config(jobs.job_config(cd, "rl", rl_config)))
