#!/usr/bin/env bash
# Attention check on CUDA: every backend (flash-attn if importable, torch varlen, flex, sdpa, hf
# variants, naive, and loader:flash-attn: packcli.data feeding flash_attn_varlen_func) in bf16 and
# fp32 on the fixture packs, in one call. Installs and downloads
# nothing. Prints a table last (stdout) and writes JSON.
#
#   scripts/gpu_check.sh                      # CUDA, defaults
#   scripts/gpu_check.sh --device cpu --backends sdpa,naive,hf:sdpa --dtypes float32
#
# JSON goes to $GPU_CHECK_JSON, else $OUT/gpu_check.json when $OUT is a directory, else
# bench-out/gpu_check.json. The whole run is capped by $GPU_CHECK_TIMEOUT seconds (default 540);
# new rows stop starting after --budget-s (default 300), so the table is printed well before that.
set -euo pipefail
cd "$(dirname "$0")/.."

want_cuda=1
prev=
for arg in "$@"; do
  if [ "$arg" = "--device=cpu" ] || { [ "$prev" = "--device" ] && [ "$arg" = "cpu" ]; }; then want_cuda=0; fi
  prev=$arg
done

# The first interpreter that has torch (with CUDA, unless --device cpu): a device machine may have a
# CUDA torch on its PATH while .venv holds the CPU wheel.
pick_python() {
  local candidates=("${PYTHON:-}" python3 python .venv/bin/python)
  local py
  for py in "${candidates[@]}"; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    if [ "$want_cuda" = 1 ]; then
      "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 && { echo "$py"; return; }
    else
      "$py" -c 'import torch' >/dev/null 2>&1 && { echo "$py"; return; }
    fi
  done
  return 1
}

if ! PY=$(pick_python); then
  echo "gpu_check.sh: no python with torch$([ "$want_cuda" = 1 ] && echo ' and a CUDA device') found" \
       "(tried \$PYTHON, python3, python, .venv/bin/python); use --device cpu for the CPU path" >&2
  exit 2
fi

if [ -n "${GPU_CHECK_JSON:-}" ]; then json=$GPU_CHECK_JSON
elif [ -n "${OUT:-}" ] && [ -d "${OUT}" ]; then json=$OUT/gpu_check.json
else json=bench-out/gpu_check.json
fi

# Offline by construction: nothing below may reach a hub or an index.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "gpu_check.sh: $("$PY" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda)')" >&2
exec timeout --kill-after=15 "${GPU_CHECK_TIMEOUT:-540}" "$PY" scripts/gpu_check.py --json "$json" "$@"
