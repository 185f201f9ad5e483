"""CLI: write a tokenizer directory (atomically); --family is any registered tokenizer name.

python3 -m tmax_jax.tokenizers.build --family qwen3|qwen3_5 --out DIR [--overwrite]
"""

import argparse
import sys
import time

from tmax_jax.models import registry
from tmax_jax.tokenizers.builder import write_tokenizer_dir


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  names = sorted({s.family for f in registry.families() for s in f.tokenizers.values()})
  parser.add_argument("--family", required=True, choices=names)
  parser.add_argument("--out", required=True, help="directory to write (must not exist)")
  parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  try:
    out = write_tokenizer_dir(args.family, args.out, overwrite=args.overwrite)
  except (FileExistsError, ValueError, FileNotFoundError, ImportError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"wrote {args.family} tokenizer to {out} in {time.perf_counter() - start:.1f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
