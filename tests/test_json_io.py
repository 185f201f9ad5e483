"""Atomic writers of tmax_jax/json_io.py."""

import json
import threading

from tmax_jax import json_io


def test_threads_of_one_process_write_the_same_path_at_once(tmp_path):
  """Image builds of one task set run in threads of one process: their temp files must not
  collide (a shared per-process temp name lost one thread's rename: FileNotFoundError)."""
  path, errors = tmp_path / "image.json", []

  def write(i):
    try:
      for j in range(200):
        json_io.write_json_atomic(path, {"writer": i, "n": j, "pad": "x" * 4096})
    except OSError as err:  # what the shared temp name raised
      errors.append(err)

  threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert not errors, errors[:2]
  assert json.loads(path.read_text())["n"] == 199  # whole: the last rename of some thread
  assert sorted(p.name for p in tmp_path.iterdir()) == ["image.json"]  # no temp left behind
