#!/usr/bin/env bash
# pack with 1, 2, 4, 8, 16 worker processes on one corpus: the speedup curve and where it flattens
# (scripts/scaling_check.py). Installs and downloads nothing: the corpus is synthetic and written
# here; the tokenizer is Qwen3's if scripts/fetch_real_assets.py fetched it, else the committed one.
# Prints a table last (stdout) and writes JSON.
#
#   scripts/scaling_check.sh                                  # workers 1,2,4,8,16, 100k conversations
#   scripts/scaling_check.sh --workers 1,2 --n 20000          # a small machine
#
# JSON goes to $SCALING_CHECK_JSON, else $OUT/scaling_check.json when $OUT is a directory, else
# bench-out/scaling_check.json. The whole run is capped by $SCALING_CHECK_TIMEOUT seconds (default
# 540); new rows stop starting after --budget-s (default 420), so the table is printed before that.
set -euo pipefail
cd "$(dirname "$0")/.."

# The first interpreter that imports packcli: .venv's, else one on the PATH with packcli installed.
pick_python() {
  local py
  for py in "${PYTHON:-}" .venv/bin/python python3 python; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
    "$py" -c 'import packcli, tokenizers, numba' >/dev/null 2>&1 && { echo "$py"; return; }
  done
  return 1
}

if ! PY=$(pick_python); then
  echo "scaling_check.sh: no python that imports packcli found (tried \$PYTHON, .venv/bin/python, python3, python);" \
       "install it first: pip install -e ." >&2
  exit 2
fi

if [ -n "${SCALING_CHECK_JSON:-}" ]; then json=$SCALING_CHECK_JSON
elif [ -n "${OUT:-}" ] && [ -d "${OUT}" ]; then json=$OUT/scaling_check.json
else json=bench-out/scaling_check.json
fi

# Offline by construction: nothing below may reach a hub or an index.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
echo "scaling_check.sh: $("$PY" -c 'import os, sys; print(sys.executable, len(os.sched_getaffinity(0)), "usable CPUs")')" >&2
exec timeout --kill-after=15 "${SCALING_CHECK_TIMEOUT:-540}" "$PY" scripts/scaling_check.py --out "$json" "$@"
