"""What the commands share: the sampling flags as SamplingParams, the summary they print, and
writing their output safely. The engine flags are kvviz/cli/engine_flags.py's."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from kvviz.engine.sampling import SamplingParams


def check_output_path(path: Path, flag: str = "--out") -> None:
    """Refuse an output path that cannot be written, before any work is done.

    The output replaces a regular file whole (see write_atomically), so the path must name a
    regular file or nothing yet: a link, a device such as /dev/stdout or /dev/full, or a pipe is
    refused, since renaming over it would replace the link or the device node itself.
    """
    folder = path.parent
    if path.is_dir() and not path.is_symlink():
        example = "results.json" if flag == "--json" else "outputs.jsonl"
        raise ValueError(f"{flag} {str(path)!r} is a folder; give a file name such as {example}.")
    status = _refuse_special(path, flag)
    if status is not None and not os.access(path, os.W_OK):  # renaming over it would replace it anyway
        raise ValueError(f"{flag} {str(path)!r} is read-only; make it writable or pick another path.")
    if not folder.is_dir():
        raise ValueError(f"There is no folder {str(folder)!r} for {flag}; create it or pick another path.")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise ValueError(f"Cannot write in {str(folder)!r} ({error.strerror}); pick a writable {flag} path.") from None


def _refuse_special(path: Path, flag: str) -> os.stat_result | None:
    """The path's own status (None if there is nothing there yet); refuses all but a regular file."""
    try:
        status = os.lstat(path)
    except OSError:  # nothing there, or a folder that cannot be read: the folder checks say which
        return None
    if not stat.S_ISREG(status.st_mode):
        kind = ("a symbolic link" if stat.S_ISLNK(status.st_mode) else "a folder" if stat.S_ISDIR(status.st_mode)
                else "a pipe" if stat.S_ISFIFO(status.st_mode) else "a socket" if stat.S_ISSOCK(status.st_mode)
                else "a device")
        raise ValueError(f"{flag} {str(path)!r} is {kind}, not a regular file, and writing would replace it; "
                         "give the path of a regular file or a new one.")
    return status


def write_atomically(path: Path, lines: list[str], flag: str = "--out") -> None:
    """Write to a temporary file beside `path`, then rename it into place: a failed write keeps the old file.

    `path` must be a regular file, which keeps its permissions, or a new one (made as any new file,
    under the umask); anything else there is refused (check_output_path says why).
    """
    existing = _refuse_special(path, flag)
    mode = stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask()
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, mode)  # mkstemp makes 0600
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.writelines(lines)
            out.flush()
            os.fsync(out.fileno())
        _refuse_special(path, flag)  # still nothing, or a regular file, after the work
        os.replace(temporary, path)
    except (OSError, UnicodeError, ValueError) as error:
        Path(temporary).unlink(missing_ok=True)
        if type(error) is ValueError:
            raise
        reason = getattr(error, "strerror", None) or type(error).__name__
        raise ValueError(f"Writing {str(path)!r} failed ({reason}); the previous file is unchanged, "
                         f"free some space or pick another {flag} path.") from None


def _umask() -> int:
    """The process's umask, read without changing it (Linux); 0o022 where it cannot be read."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


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

