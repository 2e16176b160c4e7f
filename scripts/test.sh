#!/usr/bin/env bash
# Install everything the tests need on a fresh machine, then run the whole suite.
#   bash scripts/test.sh            (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then  # Debian's Chromium drives the browser tests
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
fi
if ! command -v cc >/dev/null && ! command -v gcc >/dev/null; then  # builds the paged-attention kernel
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q gcc
fi
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
pip install -q --disable-pip-version-check -r requirements-dev.txt -e .
# vLLM's own environment, for tests/test_vllm.py (about 6 minutes the first time on a 2-core CPU; a no-op once made)
if [ -z "${KVVIZ_VLLM_PYTHON:-}" ] && [ "${KVVIZ_SKIP_VLLM:-0}" != 1 ]; then
  bash scripts/setup_vllm.sh || echo "vLLM's environment could not be made; tests/test_vllm.py will be skipped"
fi
python -m pytest -q "$@"
