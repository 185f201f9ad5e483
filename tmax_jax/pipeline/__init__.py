"""The TMAX task pipeline as one resumable, parallel command (the recipe's dataset step).

  python3 -m tmax_jax.pipeline --endpoint URL --model NAME --n N --workers W --out DIR
      [--resume] [--benchmark TB2_DIR ...] [--calibrate_endpoint URL --calibrate_model NAME]

Stages per task: sample (the 9-axis sampler) -> write (the writer model, strict parse with the
error fed back) -> build (the task image, cached layers) -> validate (the sampled fixture exists,
the smoke test and the oracle pass, doing nothing fails) -> calibrate (a reference policy's pass@1
moved into the band by the verifier knob) -> decontaminate (13-gram overlap with benchmark tasks)
-> publish (a task set every job reads; report with kept/rejected and reasons per axis value,
the domain balance score, calibration histograms). Layout and resume rules: state.py, publish.py;
concurrency and failure handling: run.py.

The face (`__all__`, checked by tests/test_faces.py): the names below and the scripted module.
"""

from tmax_jax.pipeline.config import STAGES, CalibrationConfig, PipelineConfig
from tmax_jax.pipeline.run import run

__all__ = [
  "STAGES",
  "CalibrationConfig",
  "PipelineConfig",
  "run",
  "scripted",  # public module: a scripted OpenAI-compatible endpoint on loopback (dry runs, bench)
]
