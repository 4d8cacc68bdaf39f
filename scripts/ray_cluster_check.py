"""A real multi-node Ray cluster on this machine, and ``packcli pack --engine ray`` on it.

Three nodes, each started by its own ``ray start`` in its own process group, with its own raylet,
object store and CPUs: a head with no CPUs (so no task runs beside the GCS) and two worker nodes
that join it by address. Then, each ``pack`` a separate driver process:

1. ``pack --engine local`` on the corpus: the reference artifact.
2. ``pack --engine ray --ray-address HEAD --shared-fs`` on the cluster, per corpus given: byte-identical
   to (1)? The driver's RSS is sampled all along (the driver plans and gathers; it should hold no tokens).
3. The same run with one worker node killed mid-run: the first unit to finish tokenizing holds
   (``PACKCLI_PAUSE_AT=unit``, passed on to the Ray tasks), the raylet of the node running it is killed
   with SIGKILL, and the run goes on. Either Ray re-runs the lost tasks on the live node and the
   artifact is identical to (1), or the run fails with a one-line error and leaves nothing at ``--out``.

Every process this starts is stopped at the end, failure included: each node's process group, then
any process still naming the cluster's private temp directory. Installs nothing, reaches no network.
Node death is detected within seconds (``RAY_health_check_*`` on the nodes); Ray's own default is slower.

    python scripts/make_bench_corpus.py --n 20000 --out bench-out/c20k.jsonl
    python scripts/make_bench_corpus.py --n 80000 --out bench-out/c80k.jsonl
    python scripts/ray_cluster_check.py --corpus bench-out/c20k.jsonl --corpus bench-out/c80k.jsonl \\
        --unit-lines 2000 --out bench-out/ray-cluster.json

Prints a table last and writes JSON. Exit 0 when every check held.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package: _common.py is beside us
from _common import load_summary, markdown_table, proc_status_mib, run_environment, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
IP = "127.0.0.1"
MARK = "PACKCLI_RAY_CLUSTER"  # in every cluster process's environment: how leftovers are found
START_TIMEOUT = 120  # seconds for the nodes to start and register
RUN_TIMEOUT = 900  # seconds for one pack


# ----------------------------------------------------------------------------------- the cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((IP, 0))
        return s.getsockname()[1]


def _processes() -> dict[int, tuple[int, int, str, bytes]]:
    """pid -> (parent pid, process group, command line, environment) of every process we can see."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(entry.name)] = (int(fields[1]), int(fields[2]), cmd, environ)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds nothing but its pid, until its parent or init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    cpus: int
    log: Path


@dataclass
class LocalCluster:
    """``ray start --head`` and ``workers`` worker nodes, each a separate ``ray start --block`` process group.

    A context manager: on exit (an exception included) every node's group gets SIGTERM, then SIGKILL,
    and any process left that carries the cluster's mark is killed by pid: Ray's task processes leave
    their node's process group (and rename themselves ``ray::...``), so each node is started with
    ``PACKCLI_RAY_CLUSTER=<its temp dir>`` in its environment, which every process it starts inherits.
    ``env``: extra variables for the nodes (and so for the task processes they start).
    """

    workers: int = 2
    cpus_per_worker: int = 1
    object_store_mib: int = 256
    env: dict[str, str] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    temp_dir: str = ""
    address: str = ""

    def __enter__(self) -> LocalCluster:
        # Short, under /tmp: Ray's socket paths must stay under 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="pcrc-", dir="/tmp")
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _node_env(self) -> dict[str, str]:
        # Token authentication off: the cluster and its drivers are this machine's processes, started here.
        return {**os.environ, MARK: self.temp_dir, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
                "RAY_health_check_timeout_ms": "1000", **self.env}

    def _ray_start(self, name: str, cpus: int, *extra: str) -> Node:
        log = Path(self.temp_dir) / f"{name}.log"
        cmd = [str(Path(sys.executable).with_name("ray")), "start", "--block", "--node-ip-address", IP,
               "--num-cpus", str(cpus), "--object-store-memory", str(self.object_store_mib << 20),
               "--temp-dir", self.temp_dir, "--disable-usage-stats",
               "--dashboard-agent-listen-port", str(_free_port()), *extra]
        with open(log, "w") as handle:
            proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=self._node_env(),
                                    start_new_session=True, cwd=self.temp_dir)  # a directory of its own, as a node has
        node = Node(name, proc, cpus, log)
        self.nodes.append(node)
        return node

    def _start(self) -> None:
        port = _free_port()
        self.address = f"{IP}:{port}"
        self._ray_start("head", 0, "--head", "--port", str(port), "--include-dashboard", "false")
        self._wait_for(1)
        for k in range(self.workers):
            # One at a time, and again if it gives up: ray start waits 30 s (hard-coded) for its raylet to
            # register, which a loaded 2-core machine can exceed.
            for attempt in range(3):
                node = self._ray_start(f"worker-{k + 1}", self.cpus_per_worker, "--address", self.address)
                try:
                    self._wait_for(2 + k)
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
                    self._stop_node(node)
                    self.nodes.remove(node)

    def alive_nodes(self) -> int:
        """Alive nodes as the GCS reports them (a short-lived driver process asks)."""
        code = ("import ray; ray.init(address=%r, log_to_driver=False, logging_level='ERROR'); "
                "print(sum(n['Alive'] for n in ray.nodes())); ray.shutdown()" % self.address)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=self._node_env(),
                             timeout=60)
        return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0

    def alive_after_death(self, expected: int, timeout: float = 90.0) -> int:
        """Alive nodes once the GCS has had time to declare a killed raylet dead: it learns of the death
        by missed health checks (seconds), so a run that finishes first still counts the node as alive.
        Returns the count when it reaches ``expected``, else the last count seen at the deadline."""
        deadline = time.monotonic() + timeout
        while (alive := self.alive_nodes()) != expected and time.monotonic() < deadline:
            time.sleep(1.0)
        return alive

    def _wait_for(self, count: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while self.alive_nodes() < count:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise RuntimeError(f"ray start ({node.name}) exited {node.proc.returncode}: "
                                       f"{node.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} Ray nodes did not come up in {START_TIMEOUT} s")
            time.sleep(1)

    def raylet_of(self, pid: int) -> tuple[Node, int]:
        """The node, and the raylet process, that ``pid`` (a task's worker process) runs under."""
        procs = _processes()
        seen = pid
        while seen in procs:
            parent, group, cmd, _ = procs[seen]
            if "/raylet/raylet " in cmd:
                node = next(n for n in self.nodes if n.proc.pid == group)
                return node, seen
            seen = parent
        raise LookupError(f"process {pid} runs under no raylet of this cluster")

    def leftovers(self) -> list[int]:
        """Processes still running that belong to this cluster: in a node's group, or carrying its mark."""
        groups = {n.proc.pid for n in self.nodes}
        mark = f"{MARK}={self.temp_dir}\0".encode()
        return sorted(pid for pid, (_, group, cmd, environ) in _processes().items()
                      if pid != os.getpid() and (group in groups or (self.temp_dir and mark in environ + b"\0"))
                      and not cmd.startswith("[") and _running(pid))

    def _stop_node(self, node: Node) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(node.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                continue

    def stop(self) -> None:
        for node in reversed(self.nodes):  # workers first, then the head
            try:
                os.killpg(node.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        for node in self.nodes:
            try:
                os.killpg(node.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            node.proc.wait()
        for pid in self.leftovers():  # a process that left its group but names the temp dir
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------ the runs


@dataclass
class PackRun:
    returncode: int
    wall_s: float
    stdout: str
    stderr: str
    rss_mib: list[tuple[float, float]]  # (seconds since start, the driver's VmRSS)

    @property
    def peak_rss_mib(self) -> float:
        return max((r for _, r in self.rss_mib), default=0.0)


def pack_command(corpus: str, out: Path, args: argparse.Namespace, *extra: str) -> list[str]:
    cmd = [sys.executable, "-m", "packcli", "pack", corpus, "-t", args.tokenizer, "-o", str(out), "--force",
           "-c", str(args.capacity), "--unit-lines", str(args.unit_lines), "--packs-per-shard",
           str(args.packs_per_shard), "--json", *extra]
    return cmd + (["--template", args.template] if args.template else [])


def run_pack(cmd: list[str], *, env: dict[str, str] | None = None, on_start=None) -> PackRun:  # noqa: ANN001
    """Run one driver; sample its RSS every 0.25 s; ``on_start(proc)`` runs on a thread meanwhile."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    samples: list[tuple[float, float]] = []

    def sample() -> None:
        while proc.poll() is None:
            try:
                samples.append((round(time.perf_counter() - start, 2), proc_status_mib(proc.pid, ("VmRSS",))["VmRSS"]))
            except (OSError, KeyError):
                pass
            time.sleep(0.25)

    threads = [threading.Thread(target=sample, daemon=True)]
    if on_start is not None:
        threads.append(threading.Thread(target=on_start, args=(proc,), daemon=True))
    for t in threads:
        t.start()
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    for t in threads:
        t.join(timeout=5)
    return PackRun(proc.returncode, time.perf_counter() - start, stdout, stderr, samples)


def artifact_files(directory: Path) -> dict[str, bytes]:
    """Every file of an artifact but its card and manifest (which record where and when it was made)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.is_file() and p.name not in ("manifest.json", "README.md")}


def manifest_sha(run: PackRun) -> str | None:
    try:
        return json.loads(run.stdout)["manifest_sha256"]
    except (ValueError, KeyError):
        return None


def kill_a_node_mid_run(cluster: LocalCluster, corpus: str, work: Path, args: argparse.Namespace) -> dict:
    """The run of step 3 (module docstring): hold the first unit, kill its node's raylet, let the run go on."""
    pause = work / "pause"
    pause.mkdir(parents=True, exist_ok=True)
    killed: dict = {}

    def kill_when_held(proc: subprocess.Popen) -> None:
        marker = pause / "unit"
        deadline = time.monotonic() + RUN_TIMEOUT
        while not marker.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                return
            time.sleep(0.05)
        time.sleep(0.2)
        try:
            node, raylet = cluster.raylet_of(int(marker.read_text()))
        except (LookupError, ValueError) as exc:
            killed["error"] = str(exc)
            return
        os.kill(raylet, signal.SIGKILL)
        killed.update(node=node.name, raylet_pid=raylet, held_pid=int(marker.read_text()))
        marker.unlink(missing_ok=True)  # its holder died with its node; nothing waits on it now

    out = work / "ray-killed"
    run = run_pack(pack_command(corpus, out, args, "--engine", "ray", "--ray-address", cluster.address, "--shared-fs"),
                   env={"PACKCLI_PAUSE_AT": "unit", "PACKCLI_PAUSE_DIR": str(pause), "RAY_AUTH_MODE": "disabled"},
                   on_start=kill_when_held)
    return {"run": run, "out": out, "killed": killed}


def check(args: argparse.Namespace) -> dict:
    # absolute: Ray workers run in their node's directory, and the pause marker must be found from there
    work = Path(tempfile.mkdtemp(prefix="ray-cluster-", dir=os.path.abspath(args.workdir)))
    results: dict = {"corpora": [], "kill": None}
    try:
        references = {}
        for corpus in args.corpus:
            out = work / f"local-{Path(corpus).stem}"
            local = run_pack(pack_command(corpus, out, args, "--engine", "local"))
            if local.returncode:
                raise SystemExit(f"local pack failed: {local.stderr[-2000:]}")
            references[corpus] = (out, local)
        with LocalCluster(workers=2, cpus_per_worker=args.cpus_per_worker) as cluster:
            results["cluster"] = {"address": cluster.address, "nodes": [
                {"name": n.name, "cpus": n.cpus, "pid": n.proc.pid} for n in cluster.nodes]}
            for corpus in args.corpus:
                ref_out, local = references[corpus]
                out = work / f"ray-{Path(corpus).stem}"
                ray = run_pack(pack_command(corpus, out, args, "--engine", "ray", "--ray-address", cluster.address,
                                            "--shared-fs"), env={"RAY_AUTH_MODE": "disabled"})
                same = (ray.returncode == 0 and manifest_sha(ray) == manifest_sha(local)
                        and artifact_files(out) == artifact_files(ref_out))
                results["corpora"].append({
                    "corpus": corpus, "records": json.loads(local.stdout)["counts"]["records"],
                    "local_wall_s": local.wall_s, "local_peak_rss_mib": local.peak_rss_mib,
                    "ray_rc": ray.returncode, "ray_wall_s": ray.wall_s, "ray_stderr": ray.stderr[-2000:],
                    "ray_driver_peak_rss_mib": ray.peak_rss_mib, "ray_driver_rss_samples": ray.rss_mib,
                    "manifest_local": manifest_sha(local), "manifest_ray": manifest_sha(ray), "identical": same})
            if args.kill:
                corpus = args.corpus[0]
                ref_out, _ = references[corpus]
                killed = kill_a_node_mid_run(cluster, corpus, work, args)
                run, out = killed["run"], killed["out"]
                results["kill"] = {
                    "corpus": corpus, "killed": killed["killed"], "rc": run.returncode, "wall_s": run.wall_s,
                    "stderr_tail": run.stderr[-1500:], "out_exists": out.exists(),
                    "identical": run.returncode == 0 and artifact_files(out) == artifact_files(ref_out),
                    "driver_peak_rss_mib": run.peak_rss_mib,
                    "alive_nodes_after": cluster.alive_after_death(len(cluster.nodes) - ("node" in killed["killed"]))}
            results["leftovers_before_stop"] = len(cluster.leftovers())
        results["leftovers_after_stop"] = cluster.leftovers()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def verdict(results: dict) -> tuple[bool, list[str]]:
    notes = []
    ok = all(c["identical"] for c in results["corpora"]) and not results["leftovers_after_stop"]
    kill = results.get("kill")
    if kill is not None:
        if not kill["killed"].get("node"):
            ok = False
            notes.append(f"no node was killed: {kill['killed']}")
        elif kill["rc"] == 0:
            ok &= kill["identical"]
            notes.append(f"{kill['killed']['node']} killed mid-run: the run completed "
                         f"{'byte-identical' if kill['identical'] else 'WITH DIFFERENT BYTES'}")
        else:
            clear = kill["stderr_tail"].strip().startswith("error:") and not kill["out_exists"]
            ok &= clear
            notes.append(f"{kill['killed']['node']} killed mid-run: the run failed "
                         f"{'clearly, nothing at --out' if clear else 'UNCLEARLY or left --out'}: "
                         f"{kill['stderr_tail'].strip().splitlines()[-1] if kill['stderr_tail'].strip() else ''}")
    return ok, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", action="append", required=True, help="JSONL corpus (repeatable: sizes to compare)")
    parser.add_argument("-t", "--tokenizer", default=str(ROOT / "fixtures" / "tokenizer"))
    parser.add_argument("--template", default=None)
    parser.add_argument("-c", "--capacity", type=int, default=4096)
    parser.add_argument("--unit-lines", type=int, default=2000)
    parser.add_argument("--packs-per-shard", type=int, default=256)
    parser.add_argument("--cpus-per-worker", type=int, default=1)
    parser.add_argument("--no-kill", dest="kill", action="store_false", help="skip the node-killed run")
    parser.add_argument("--workdir", default=str(ROOT / "bench-out"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    results = check(args)
    ok, notes = verdict(results)
    results.update(ok=ok, notes=notes, environment=run_environment(ROOT))
    if args.out:
        write_json(args.out, results)
    print(load_summary(load_start))
    rows = [(Path(c["corpus"]).name, f"{c['records']:,}", f"{c['local_wall_s']:.1f}", f"{c['ray_wall_s']:.1f}",
             f"{c['ray_driver_peak_rss_mib']:,.0f}", "yes" if c["identical"] else "NO") for c in results["corpora"]]
    print("\n" + markdown_table(("corpus", "records", "local wall s", "ray wall s (3 nodes)", "ray driver peak RSS MiB",
                                 "byte-identical"), rows, align="lrrrrl"))
    for note in notes:
        print(note)
    print(f"processes left after stopping the cluster: {len(results['leftovers_after_stop'])}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
