"""The pass@1 bar chart (matplotlib, Agg backend)."""

from __future__ import annotations

import os
import pathlib


def plot_categories(summary: dict, path: pathlib.Path, title: str) -> None:
  """PNG bar chart: pass@1 per category and overall, stderr error bars (written atomically)."""
  import matplotlib  # noqa: PLC0415  (slow import: only to plot)

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # noqa: PLC0415  (after the backend is set)

  cats = list(summary["categories"])
  names = cats + ["all"]
  means = [summary["categories"][c]["pass@1"] for c in cats] + [
    summary["aggregate"]["pass@1"]["mean"]
  ]
  errs = [summary["categories"][c]["stderr"] for c in cats] + [
    summary["aggregate"]["pass@1"]["stderr"]
  ]
  fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 2), 4.0))
  ax.bar(
    range(len(names)), means, yerr=errs, capsize=4, color=["tab:blue"] * len(cats) + ["tab:gray"]
  )
  ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
  ax.set_ylim(0, 1.05)
  ax.set_ylabel("pass@1 (mean ± stderr over tasks)")
  ax.set_title(title)
  fig.tight_layout()
  tmp = path.with_name(f".{path.name}.tmp.png")
  fig.savefig(tmp, format="png", dpi=100)
  plt.close(fig)
  os.replace(tmp, path)
