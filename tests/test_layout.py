"""The package's shape: no import cycles among packcli's modules, and a light ``packcli --help``.

A cycle is two modules that each need the other at import time (module-level imports; imports
inside functions are deliberate late binding and are not counted).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "packcli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(path: Path, modules: set[str]) -> set[str]:
    """packcli modules imported at module level (``TYPE_CHECKING`` blocks excluded)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    body = [node for node in tree.body if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))]
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("packcli"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("packcli"))
    return found & modules


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


def _graph() -> dict[str, set[str]]:
    """Module -> the packcli modules whose import it starts. Importing ``a.b.c`` first runs ``a`` and
    ``a.b`` (their ``__init__``), unless the importer is inside them: its own ancestors are already
    running. A module never counts its own ancestors: Python starts them before it."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        own = set(_ancestors(name))
        edges = set()
        for target in _module_level_imports(path, modules):
            edges |= {a for a in [*_ancestors(target), target] if a in modules and a not in own and a != name}
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph``, as the list of modules around it (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if state.get(nxt) is None and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if state.get(start) is None and (found := visit(start)):
            return found
    return None


def test_no_import_cycles():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_planted_cycle():
    planted = {"packcli.a": {"packcli.b"}, "packcli.b": {"packcli.c"}, "packcli.c": {"packcli.a"}, "packcli.d": set()}
    assert _cycle(planted) == ["packcli.a", "packcli.b", "packcli.c", "packcli.a"]


def test_a_cycle_through_a_package_init_counts(tmp_path, monkeypatch):
    """The cycle that once broke `import packcli.job`: engine/__init__ importing job.spill starts
    job/__init__, which imports job.run, which imports engine."""
    pkg = tmp_path / "packcli"
    for rel, text in {"__init__.py": "", "engine/__init__.py": "from packcli.job.spill import X\n",
                      "job/__init__.py": "from packcli.job.run import Y\n", "job/spill.py": "X = 1\n",
                      "job/run.py": "from packcli.engine import Z\nY = 2\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    assert _cycle(_graph()) == ["packcli.engine", "packcli.job", "packcli.job.run", "packcli.engine"]


def _imported_heavy(args: list[str], heavy: set[str]) -> list[str]:
    """Run ``packcli ARGS`` in a fresh interpreter (from the repository root); the ``heavy`` packages it imported."""
    code = ("import sys; from packcli.cli import app; from typer.testing import CliRunner; "
            f"r = CliRunner().invoke(app, {args!r}); assert r.exit_code == 0, r.output; "
            f"print(sorted({heavy!r} & {{m.split('.')[0] for m in sys.modules}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout
    return eval(out.strip())  # noqa: S307 - our own subprocess printed a list of names


def test_verify_of_a_small_artifact_imports_no_training_stack():
    """``verify`` of a small artifact starts in about a second: no torch, ray, matplotlib, transformers, trl or
    datasets, nor pandas (which ``pq.read_table`` and pyarrow's ``to_numpy`` import): each is most of a second
    of start-up (docs/benchmarks-pipeline.md, "Small jobs"). Nor numba: the plan check re-runs the packing
    kernels, and on a few hundred examples they run as Python (`packcli.pack.kernels.Kernel`)."""
    heavy = {"torch", "ray", "matplotlib", "transformers", "trl", "datasets", "pandas", "numba"}
    assert _imported_heavy(["verify", "fixtures/packed"], heavy) == []


def test_the_import_check_sees_a_heavy_import():
    """The check above is not blind: ``verify`` does import pyarrow and tokenizers (it reads the shards and
    re-tokenizes), and the check reports them."""
    assert _imported_heavy(["verify", "fixtures/packed", "--json"], {"pyarrow", "tokenizers"}) == ["pyarrow",
                                                                                                   "tokenizers"]


def test_help_imports_nothing_heavy():
    code = ("import sys; from packcli.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['pack', '--help']); assert r.exit_code == 0, r.output; "
            "heavy = {'torch', 'ray', 'matplotlib', 'transformers', 'numba', 'pyarrow', 'tokenizers', 'datasets'}; "
            "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_module_needs_a_table_of_contents():
    """Modules stay readable top to bottom (STYLE.md): none over 600 lines."""
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, long
