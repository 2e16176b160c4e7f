import functools
import os
from pathlib import Path

import pytest

FOLDER_MARKERS = {"browser": pytest.mark.browser, "vllm": pytest.mark.vllm,  # tests/<folder>/ -> its tier
                  "rooms": pytest.mark.rooms}
# tests of the quick tier that take about a second or more (scripts/slow_tests.py times them): marked slow
SLOW_LIST = Path(__file__).parent / "slow_tests.txt"
SLOW_TESTS = frozenset(line.strip() for line in (SLOW_LIST.read_text().splitlines() if SLOW_LIST.exists() else ())
                       if line.strip() and not line.startswith("#"))
LONG_MARKERS = ("browser", "vllm", "slow")  # a file holding such a test starts first (pytest_collection_modifyitems)


def pytest_configure(config):
    """Every session opens on the bundled model (KVVIZ_DEFAULT_MODEL) unless a test says otherwise.
    Under pytest-xdist (scripts/test.sh runs two workers), each worker's torch takes its share of the
    cores, not all of them, and so do the app servers and scripts a test starts (OMP_NUM_THREADS): two
    workers with two threads each on two cores spend their time waiting for each other. Streamlit's scan
    for installed components runs once a session, not once an AppTest (share_component_scan)."""
    share_component_scan()
    # the tests assert the bundled model's numbers: a session opens on it even where SmolLM2 is fetched
    # (tests/pages/test_page_default_model.py checks the default itself, with this unset)
    os.environ.setdefault("KVVIZ_DEFAULT_MODEL", "bundled")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        threads = max(1, (os.cpu_count() or 1) // workers)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the app servers and scripts a test starts


def share_component_scan() -> None:
    """Every AppTest scans each installed package's metadata for Streamlit components (0.1 s here, a few
    hundred times a run); the packages do not change while the tests run, so the session's first scan,
    a real one, answers the rest."""
    from streamlit.components.v2 import manifest_scanner

    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)


def needs_vllm(item) -> bool:
    """Whether a test is skipped without vLLM's environment (its module's needs_vllm mark)."""
    return any(mark.name == "skipif" and str(mark.kwargs.get("reason", "")).startswith("vLLM tests skipped")
               for mark in item.iter_markers())


def pytest_collection_modifyitems(items):
    """Tests under tests/browser/ carry the browser marker, and those under tests/vllm/ that need vLLM
    the vllm marker, and those tests/slow_tests.txt lists the slow marker, so `-m "not browser and not vllm and
    not slow"` (scripts/test.sh --quick) leaves them out; tests/vllm/'s refusals and cache arithmetic, which need
    no vLLM, stay in the quick tier.

    Files with a long test (browser, vllm or slow) come first: where xdist keeps that order (scripts/test.sh
    --quick: --dist loadfile --no-loadscope-reorder), the many short files even out the two workers' ends;
    xdist's own order (most tests first), which the whole suite keeps, leaves long single-test files last."""
    for item in items:
        if item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        folder = Path(item.fspath).parent.name
        if folder in ("browser", "rooms") or (folder == "vllm" and needs_vllm(item)):
            item.add_marker(FOLDER_MARKERS[folder])
    long_files = {item.path for item in items if any(item.get_closest_marker(name) for name in LONG_MARKERS)}
    items.sort(key=lambda item: item.path not in long_files)  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def a_server_that_has_timed_nothing():
    """Each test starts where a fresh server does: its estimates at kvviz.lessons.budget.RATES until its
    own clicks are timed (budget.Pace), so that what a test expects does not hang on the tests before it."""
    from kvviz.lessons.budget import forget_paces

    forget_paces()


@pytest.fixture(scope="session")
def bundled():
    """The bundled model on the CPU in float32, on any machine: the figures the tests assert (bytes, the
    compiled CPU kernel) are a CPU's. scripts/gpu_check.py runs the engine's settings on CUDA against it."""
    from kvviz import load_model

    return load_model("bundled", device="cpu")


@pytest.fixture(scope="session")
def tiny_lm(bundled):
    """A tiny random-weight llama (tests/support/tiny_models.py) that reads the bundled model's tokenizer,
    so a lesson's prompts can be text."""
    import torch
    from transformers import AutoModelForCausalLM

    from kvviz.models import LoadedModel

    from tiny_models import tiny_config

    torch.manual_seed(0)
    config = tiny_config("llama")
    config.vocab_size = len(bundled.tokenizer)
    model = AutoModelForCausalLM.from_config(config).eval()
    return LoadedModel(model, bundled.tokenizer, torch.device("cpu"), torch.float32, "tiny llama", "custom", 256)


def pytest_sessionfinish(session):
    """Stop the browser tests' shared app server and Chromium (tests/support/chromium.py), if started."""
    import sys

    if "chromium" in sys.modules:
        sys.modules["chromium"].close_shared()
