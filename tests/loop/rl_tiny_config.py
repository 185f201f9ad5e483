"""The tiny RL job of tests/loop/rl_helpers.py as a launch config, for the tests that run
launch/train_rl.py as real processes (multi-process, SIGKILL and resume).

python3 launch/train_rl.py --config=tests/loop/rl_tiny_config.py --config.output_dir=/tmp/run
"""

from tests.loop.rl_helpers import tiny_rl_config
from tmax_jax.config_dict import to_config_dict


def get_config():
  return to_config_dict(tiny_rl_config("runs/rl_tiny", steps=2))
