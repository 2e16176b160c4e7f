"""What the commands share: the sampling and engine flags as kvviz objects, the summary they
print, and writing their output safely."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvviz.engine.config import EngineConfig
from kvviz.engine.sampling import SamplingParams


def check_output_path(path: Path) -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    folder = path.parent
    if path.is_dir():
        raise ValueError(f"--out {str(path)!r} is a folder; give a file name such as outputs.jsonl.")
    if not folder.is_dir():
        raise ValueError(f"There is no folder {str(folder)!r} for --out; create it or pick another path.")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ValueError(f"Cannot write in {str(folder)!r} ({error.strerror}); pick a writable --out path.") from None


def write_atomically(path: Path, lines: list[str]) -> None:
    """Write to a temporary file beside `path`, then rename it into place: a failed write keeps the old file."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except (OSError, UnicodeError) as error:
        Path(temporary).unlink(missing_ok=True)
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ValueError(f"Writing {str(path)!r} failed ({reason}); the previous file is unchanged, "
                         "free some space or pick another --out path.") from None


def print_summary(summary: dict, out_path: str) -> None:
    """The job's figures, one a line, as both backends of `generate` print them."""
    width = max(map(len, summary))
    for key, value in summary.items():
        print(f"{key:<{width}}  {value}")
    print(f"wrote {out_path}")


def sampling_params(args) -> SamplingParams:
    """The sampling flags of `generate` (both backends) as one SamplingParams."""
    return SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k,
                          top_p=args.top_p, seed=args.seed, ignore_eos=args.ignore_eos, n=args.n)


def engine_config(args) -> EngineConfig:
    """The engine flags of `generate` as an EngineConfig."""
    return EngineConfig(block_size=args.block_size, num_blocks=args.num_blocks,
                        enable_prefix_caching=not args.no_prefix_caching, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens,
                        speculative_tokens=args.speculative_tokens, preemption_mode=args.preemption_mode,
                        swap_space_blocks=args.swap_space_blocks)
