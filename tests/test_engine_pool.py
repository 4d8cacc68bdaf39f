"""`SharedPool`'s workers and Ctrl-C: a signal to the whole process group while a worker still starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# A driver that survives SIGINT (its handler ignores it) starts one worker and keeps sending SIGINT to
# its whole process group, as a terminal's Ctrl-C does, while the worker imports and initializes. A
# worker that took the signal before its initializer ignores it would die with a traceback on stderr
# ("Fatal Python error: init_import_site", or KeyboardInterrupt) and break the pool.
DRIVER = textwrap.dedent("""
    import operator, os, signal, time
    from packcli.engine.pool import SharedPool

    signal.signal(signal.SIGINT, lambda signum, frame: None)
    with SharedPool(2, warm=os.getpid) as pool:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            os.killpg(0, signal.SIGINT)
            time.sleep(0.005)
        assert pool.map(operator.add, 10, list(range(8))) == list(range(10, 18))
    print("done")
""")


def test_a_ctrl_c_while_a_worker_starts_neither_kills_it_nor_prints():
    run = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=120,
                         start_new_session=True)
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, "done", "")
