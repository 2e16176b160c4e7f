"""A GGUF file (llama.cpp's one-file format, often 4-bit quantized) as a folder kvviz loads in a
second: config.json, float32 safetensors, the tokenizer and generation_config.json.

transformers reads a GGUF whose architecture it knows (`from_pretrained(folder, gguf_file=name)`)
and dequantizes its weights, but will not `save_pretrained` a model it loaded that way; the same
weights in a fresh model of the same class save like any other checkpoint.

    folder = converted_gguf("/path/model.Q4_1.gguf")   # once per file: <cache>/models/gguf-<sha256>/
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from kvviz.hub.cache import (FetchError, check_free_space, disk_error, file_sha256, folder_bytes, models_root,
                             new_part_folder, publish, ready_folder)

Report = Callable[[str], None]


def _quiet(_line: str) -> None:
    pass


def read_gguf_config(gguf_path: Path):
    """The transformers config a GGUF file describes; one sentence for a file transformers cannot read."""
    try:
        return AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, local_files_only=True,
                                          trust_remote_code=False)
    except ValueError as error:
        if "not supported" in str(error):  # "GGUF model with architecture X is not supported yet."
            raise FetchError(f"{gguf_path.name!r} holds a model whose architecture transformers cannot read from "
                             "GGUF; pick a Llama, Mistral, Qwen, Gemma, Phi-3 or GPT-2 GGUF, or the "
                             "model's Hugging Face folder.") from None
        raise FetchError(_unreadable(gguf_path, error)) from None
    except Exception as error:  # a truncated or foreign file: gguf's reader raises several kinds
        raise FetchError(_unreadable(gguf_path, error)) from None


def _unreadable(gguf_path: Path, error: Exception) -> str:
    return (f"{gguf_path.name!r} could not be read as a GGUF file ({type(error).__name__}); check that the "
            "file is complete, or download it again.")


def convert_gguf(gguf_path: Path, out: Path, report: Report = print) -> dict:
    """Write `gguf_path`'s model into the folder `out` as float32 safetensors; the model's facts back.

    The weights are dequantized: a 4-bit GGUF takes about 8 times its size on disk here.
    """
    config = read_gguf_config(gguf_path)
    started = time.perf_counter()
    try:
        gguf_model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                          dtype=torch.float32, local_files_only=True,
                                                          trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name,
                                                  local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError, NotImplementedError, RuntimeError) as error:
        raise FetchError(f"transformers could not build a model from {gguf_path.name!r} ({type(error).__name__}: "
                         f"{str(error).splitlines()[0][:100]}); try the model's Hugging Face folder instead.") from None
    settings = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path"):  # the saved folder is plain float32, not a GGUF
        settings.pop(key, None)
    config = type(config).from_dict(settings)
    model = type(gguf_model)(config)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    parameters = sum(p.numel() for p in model.parameters())
    report(f"dequantized {parameters / 1e6:.1f}M parameters to float32 in {time.perf_counter() - started:.1f} s")
    check_free_space(out, parameters * 4 + 50_000_000, "The float32 copy")
    try:
        started = time.perf_counter()
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    except OSError as error:
        raise disk_error(error, out) from None
    report(f"wrote float32 safetensors and the tokenizer: {folder_bytes(out) / 1e6:,.1f} MB "
           f"in {time.perf_counter() - started:.1f} s")
    return {"architecture": config.model_type, "parameters": parameters, "layers": config.num_hidden_layers,
            "gguf": gguf_path.name, "gguf_bytes": gguf_path.stat().st_size}


def converted_gguf(gguf_path: str | Path, check_config: Callable | None = None, report: Report = _quiet) -> Path:
    """The converted folder of a GGUF file, converting it into the cache the first time (keyed by the
    file's contents, so a renamed or moved copy is not converted twice).

    check_config(config): called before the slow part; raises to refuse a model (kvviz.models passes
    its decoder-only and memory checks).
    """
    gguf_path = Path(gguf_path).expanduser()
    if not gguf_path.is_file():
        raise FetchError(f"There is no file at {str(gguf_path)!r}; give the path of a .gguf file.")
    key = "gguf-" + file_sha256(gguf_path)[:20]
    if (folder := ready_folder(key)) is not None:
        return folder
    config = read_gguf_config(gguf_path)
    if check_config is not None:
        check_config(config)
    part = new_part_folder(key)
    try:
        facts = convert_gguf(gguf_path, part, report)
        return publish(part, key, {"source": str(gguf_path.resolve()), **facts, "converted": time.time()})
    except OSError as error:
        raise disk_error(error, models_root()) from None
    finally:
        if part.exists():  # anything not published is thrown away
            shutil.rmtree(part, ignore_errors=True)
