"""The plan's verdict counts the weight push: the sync's temp and new served params beside what
the trainer (and, colocated, the server) holds between programs can be the job's peak per chip.
No compiler needed: Programs with the memory a compile reports."""

import dataclasses
import pathlib

import pytest

from tmax_jax import jobs
from tmax_jax.aot import chips
from tmax_jax.config_dict import load_config_file
from tmax_jax.plan import programs

ROOT = pathlib.Path(__file__).resolve().parents[1]
GB = 1e9
H200 = chips.CHIPS["h200"]


def _program(side: str, argument: float, temp: float, output: float = 0.0, live: float = 0.0):
  memory = {"argument": argument * GB, "output": output * GB, "alias": 0.0, "temp": temp * GB}
  memory["total"] = memory["argument"] + memory["temp"] + memory["output"]
  return programs.Program(side, side, memory, 0.0, 0.0, 0.0, live_bytes=live * GB)


def _job(placement: str):
  """The shipped 9B recipe with its serving placement replaced."""
  job = jobs.job_config(load_config_file(str(ROOT / "configs/tmax_qwen3_5_9b.py")))
  return dataclasses.replace(
    job,
    serving=dataclasses.replace(
      job.serving, placement=placement, devices=4 if placement == "disaggregated" else 0
    ),
  )


# trainer step: 10 GB of arguments + 6 of optimizer state beside it, 40 of temp; server: 30 GB of
# params and pages, 5 of temp; the sync: 80 GB of temp, 14 of new served params
PROGRAMS = [
  _program("trainer", 10, 40, live=6),
  _program("server", 30, 5),
  _program("sync", 10, 80, output=14),
]


def test_a_colocated_push_holds_both_sides_and_the_sync():
  v = programs.verdict(_job("colocated"), PROGRAMS, H200)
  assert v["trainer_peak"] == 56 * GB and v["server_peak"] == 35 * GB
  assert v["sync_peak"] == pytest.approx((10 + 6 + 30 + 80 + 14) * GB)  # 140 > 56 + 35
  assert v["peak"] == v["sync_peak"] and v["fits"]  # 140 of 141
  heavier = [*PROGRAMS[:2], _program("sync", 10, 82, output=14)]
  v = programs.verdict(_job("colocated"), heavier, H200)
  assert not v["fits"] and v["peak"] == pytest.approx(142 * GB)


def test_on_separate_devices_the_push_holds_only_the_trainer_side():
  v = programs.verdict(_job("disaggregated"), PROGRAMS, H200)
  assert v["sync_peak"] == pytest.approx((10 + 6 + 80 + 14) * GB)
  assert v["peak"] == v["sync_peak"] and v["fits"]


def test_without_a_sync_the_sides_decide():
  v = programs.verdict(_job("colocated"), PROGRAMS[:2], H200)
  assert v["sync_peak"] == 0.0 and v["peak"] == 91 * GB and v["fits"]
  table = programs.table(
    PROGRAMS, chips.parse_node("h200"), programs.verdict(_job("colocated"), PROGRAMS, H200), 1
  )
  assert "at a weight push 140.00 GB: 140.00 GB of 141: FITS" in table, table


def test_a_sync_of_several_programs_holds_all_outputs_and_the_largest_temp():
  """The sync runs one program per group of leaves, one after another (loop/weight_sync.py):
  their outputs accumulate, only one temp is live."""
  parts = [_program("sync", 4, 30, output=5), _program("sync", 6, 80, output=9)]
  merged = programs.merged_sync(parts)
  assert merged.side == "sync" and "2 programs" in merged.name
  m = merged.memory
  assert (m["argument"], m["temp"], m["output"]) == (10 * GB, 80 * GB, 14 * GB)
  assert m["total"] == 104 * GB
  v = programs.verdict(_job("colocated"), [*PROGRAMS[:2], merged], H200)
  assert v["sync_peak"] == pytest.approx((10 + 6 + 30 + 80 + 14) * GB)  # as PROGRAMS' one sync
  assert programs.merged_sync(parts[:1]).name == "weight sync (cast + reshard)"
