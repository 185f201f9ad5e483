#!/bin/bash
# RL on a Cloud TPU pod slice: the same command on every worker (host) of the slice; JAX finds
# the other workers through the TPU metadata (TMAX_AUTO_DISTRIBUTED=1 asks it to).
#
#   launch/tpu/train_rl.sh my-v5p-32 us-east5-a configs/tmax_qwen3_5_9b.py \
#       --config.model.checkpoint=gs-fuse-mount/Qwen3.5-9B --config.tasks.source=/data/tmax15k
#
# The repository (and a built sandbox base rootfs: python3 -m tmax_jax.sandbox) must be at
# the same path on every worker; the output dir on a shared filesystem (GCS FUSE / Filestore).
set -euo pipefail
TPU=${1:?usage: launch/tpu/train_rl.sh TPU_NAME ZONE CONFIG [--config.field=value ...]}
ZONE=${2:?zone}
CONFIG=${3:?config}
shift 3
REPO=${TMAX_REPO:-$PWD}
SCRIPT=${TMAX_SCRIPT:-launch/train_rl.py}  # launch/train_sft.py for an SFT job
printf -v ARGS ' %q' "$@"
gcloud compute tpus tpu-vm ssh "$TPU" --zone="$ZONE" --worker=all --command \
  "cd $REPO && TMAX_AUTO_DISTRIBUTED=1 python3 $SCRIPT --config=$CONFIG$ARGS"
