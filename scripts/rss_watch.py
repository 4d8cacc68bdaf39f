"""Run a command and sample its memory every 0.5 s: VmRSS, RssAnon and RssFile from /proc/PID/status.

Peak RSS (`ru_maxrss`) says how much; the samples say when and of which kind (anonymous memory vs
file-backed pages such as a memory-mapped file), which is what tells a growing index from a mapped
spill. Linux only. Writes every sample, the peaks and the command's output tails as JSON.

    python scripts/rss_watch.py bench-out/rss200k.json packcli pack bench-out/bench200k.jsonl -t fixtures/tokenizer \\
        --template chatml -c 4096 -o bench-out/rss200k --force --json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import proc_status_mib  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    out, cmd = argv[0], argv[1:]
    t0 = time.time()
    stdout_file, stderr_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # pipes could fill
    proc = subprocess.Popen(cmd, stdout=stdout_file, stderr=stderr_file, text=True)
    samples: list[list] = []
    peak: dict[str, float] = {}
    while proc.poll() is None:
        try:
            values = proc_status_mib(proc.pid, ("VmRSS", "RssAnon", "RssFile"))
        except FileNotFoundError:
            break
        if values:
            samples.append([round(time.time() - t0, 1), values])
            for k, v in values.items():
                peak[k] = max(peak.get(k, 0.0), v)
        time.sleep(0.5)
    proc.wait()
    wall = time.time() - t0
    stdout, stderr = (f.seek(0) or f.read() for f in (stdout_file, stderr_file))
    with open(out, "w") as handle:
        json.dump({"cmd": cmd, "rc": proc.returncode, "wall_s": wall, "peak_mib": peak, "samples": samples,
                   "stdout_tail": stdout[-3000:], "stderr_tail": stderr[-2000:]}, handle)
    print(json.dumps({"rc": proc.returncode, "wall_s": round(wall, 1), "peak_mib": peak}))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
