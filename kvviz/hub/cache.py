"""kvviz's cache folder, and publishing a converted model into it so that nothing half-written is
ever taken as ready.

    <cache>/models/smollm2/              a finished folder: config.json, weights, tokenizer, READY
    <cache>/models/.smollm2.part-<pid>/  one being written; renamed into place once READY is in it

The cache is $KVVIZ_CACHE_DIR, else the platform's user cache (~/.cache/kvviz on Linux).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

READY = "READY"  # written last, inside the part folder, before the rename that publishes it
PART = ".part-"
DOWNLOAD = ".download-"  # .KEY.download-PID-RANDOM: a fetch's scratch folder (the wheel, the GGUF)


class FetchError(ValueError):
    """A fetch or a conversion that could not finish; the message is one sentence saying what to do."""


def cache_root() -> Path:
    """$KVVIZ_CACHE_DIR, else the platform's user cache folder for kvviz."""
    if os.environ.get("KVVIZ_CACHE_DIR"):
        return Path(os.environ["KVVIZ_CACHE_DIR"]).expanduser()
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "kvviz" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "kvviz"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvviz"


def models_root() -> Path:
    return cache_root() / "models"


def ready_folder(key: str) -> Path | None:
    """The finished folder for `key`, or None when it was never published or was damaged since: a file
    READY lists is missing or of another size, or a weights file is shorter than its own header says."""
    folder = models_root() / key
    if not ((folder / READY).is_file() and (folder / "config.json").is_file()):
        return None
    return folder if damage(folder) is None else None


def damage(folder: Path, hashes: bool = False) -> str | None:
    """What is wrong with a published folder (one phrase), or None. Sizes always; with `hashes`, every
    file's SHA-256 against READY's too (a second or two for SmolLM2's 542 MB)."""
    listed = read_ready(folder).get("files")
    # READY without its list of files (unreadable, `{}`, damaged) turned every size and hash check off, and a
    # folder whose weights had changed was "ready, nothing to do": such a folder is damaged, fetched again
    if not isinstance(listed, dict) or "config.json" not in listed or not any(
            name.endswith(".safetensors") for name in listed):
        return "its READY lists no files to check"
    for name, entry in listed.items():
        if not (isinstance(entry, list) and len(entry) == 2
                and isinstance(entry[0], int) and isinstance(entry[1], str)):
            return "its READY is damaged"
        size, sha256 = entry
        path = folder / name
        if not path.is_file() or path.stat().st_size != size:
            return f"{name} is missing or cut short"
        if hashes and file_sha256(path) != sha256:
            return f"{name} has changed since it was written"
    for path in sorted(folder.glob("*.safetensors")):
        if not safetensors_complete(path):
            return f"{path.name} is shorter than its header says"
    return None


def safetensors_complete(path: Path) -> bool:
    """Whether a safetensors file holds every byte its header promises (a header of up to 100 MiB)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as file:
            header_length = int.from_bytes(file.read(8), "little")
            if not 2 <= header_length <= min(100 * 2**20, size - 8):
                return False
            header = json.loads(file.read(header_length))
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False
    return size >= 8 + header_length + end


def file_list(folder: Path) -> dict:
    """Every file in a folder about to be published: name -> [bytes, SHA-256], for READY."""
    return {path.name: [path.stat().st_size, file_sha256(path)] for path in sorted(folder.iterdir()) if path.is_file()}


def read_ready(folder: Path) -> dict:
    """What the READY marker says about a published folder (source, sizes, times)."""
    try:
        return json.loads((folder / READY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def new_part_folder(key: str) -> Path:
    """An empty folder to write `key` into, beside where it will be published; clears parts and downloads
    left by processes that are gone (a fetch stopped half-way, or killed)."""
    root = models_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        for stale in [*root.glob(f".{key}{PART}*"), *root.glob(f".{key}{DOWNLOAD}*")]:
            if not _alive(stale.name.removeprefix(f".{key}").split("-")[1]):
                shutil.rmtree(stale, ignore_errors=True)
        part = root / f".{key}{PART}{os.getpid()}"
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir()
    except OSError as error:
        raise FetchError(f"Cannot write in the cache folder {str(root)!r} ({error.strerror}); "
                         "set KVVIZ_CACHE_DIR to a writable folder.") from None
    return part


def publish(part: Path, key: str, marker: dict) -> Path:
    """Write READY into `part` (with every file's size and hash), then rename it to the published folder
    in one step."""
    marker = {**marker, "files": file_list(part)}
    (part / READY).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    folder = models_root() / key
    if folder.exists():  # a damaged or older copy (no READY): the new one replaces it
        shutil.rmtree(folder)
    os.replace(part, folder)
    return folder


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_free_space(where: Path, needed: int, what: str) -> None:
    """Refuse, before writing, a disk without room for `needed` bytes."""
    free = shutil.disk_usage(where).free
    if free < needed:
        raise FetchError(f"{what} needs about {needed / 1e6:,.0f} MB but {str(where)!r} has {free / 1e6:,.0f} MB "
                         "free; free some space or set KVVIZ_CACHE_DIR to a folder on a larger disk.")


def disk_error(error: OSError, where: Path) -> FetchError:
    """An OSError met while writing, as one sentence (a full disk named as such)."""
    if error.errno == 28:  # ENOSPC
        return FetchError(f"The disk holding {str(where)!r} filled up; nothing was kept, free some space "
                          "(or set KVVIZ_CACHE_DIR) and run the command again.")
    return FetchError(f"Writing into {str(where)!r} failed ({error.strerror or type(error).__name__}); "
                      "nothing was kept, check the folder and run the command again.")


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process
        return True
    return True
