"""The package's shape: no import cycles among packcli's modules, the layers' rules, and a light ``packcli --help``.

Every import counts, at module level, inside a function or under ``TYPE_CHECKING``: a late import
hides a circle from Python, not from a reader, who must still understand both modules together.
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


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The packcli modules ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
        for target in _imports(path, modules):
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


def test_a_late_import_closes_a_cycle_too(tmp_path, monkeypatch):
    """The kind of circle a lazy import once hid (chat.templates and chat.training): one side imports the
    other inside a function, or only for type checking."""
    pkg = tmp_path / "packcli"
    late = "def f():\n    from packcli.b import g\n"
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from packcli.a import f\ng = 1\n"
    for rel, text in {"__init__.py": "", "a.py": late, "b.py": typing_only}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    assert _cycle(_graph()) == ["packcli.a", "packcli.b", "packcli.a"]


# A layer never imports these packages (directly: a module of the layer names one of them).
FORBIDDEN = {
    "packcli.engine": ("packcli.job", "packcli.verify"),  # engines run any function; they know no job
    "packcli.data": ("packcli.job", "packcli.engine", "packcli.verify", "packcli.tokenizer"),  # a trainer's reader
    "packcli": ("packcli.cli",),  # the library never imports its command line
}
ENTRY_POINTS = {"packcli.cli", "packcli.__main__"}


def _layer_breaches(graph_files: dict[str, Path]) -> list[str]:
    modules = set(graph_files)
    breaches = []
    for name, path in sorted(graph_files.items()):
        for layer, banned in FORBIDDEN.items():
            inside = name == layer or name.startswith(layer + ".")
            entry = any(name == e or name.startswith(e + ".") for e in ENTRY_POINTS)
            if not inside or (layer == "packcli" and entry):
                continue
            for target in sorted(_imports(path, modules)):
                if any(target == b or target.startswith(b + ".") for b in banned):
                    breaches.append(f"{name} imports {target}")
    return breaches


def _files() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def test_layers_import_only_downwards():
    assert _layer_breaches(_files()) == []


def test_the_layer_check_finds_a_planted_breach(tmp_path, monkeypatch):
    pkg = tmp_path / "packcli"
    for rel, text in {"__init__.py": "", "engine/__init__.py": "",
                      "engine/local.py": "def f():\n    from packcli.job.run import x\n",
                      "job/__init__.py": "", "job/run.py": "x = 1\n", "data/__init__.py": "",
                      "data/read.py": "from packcli.tokenizer import y\n", "tokenizer/__init__.py": "y = 1\n",
                      "cli/__init__.py": "", "view.py": "from packcli.cli import app\n"}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    assert _layer_breaches(_files()) == ["packcli.data.read imports packcli.tokenizer",
                                         "packcli.engine.local imports packcli.job.run",
                                         "packcli.view imports packcli.cli"]


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


def _same_names(package: Path) -> dict[str, list[str]]:
    """Module file names (``__init__`` aside) found in more than one place under ``package``."""
    seen: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(package.parent)))
    return {name: sorted(paths) for name, paths in seen.items() if len(paths) > 1}


def test_module_names_are_unique():
    """One name, one module: ``ls`` and a traceback's file name say which one (no render.py in two places)."""
    assert _same_names(PACKAGE) == {}


def test_the_name_check_finds_a_planted_twin(tmp_path):
    for rel in ("pkg/__init__.py", "pkg/a/__init__.py", "pkg/a/run.py", "pkg/b/run.py", "pkg/b/other.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert _same_names(tmp_path / "pkg") == {"run.py": ["pkg/a/run.py", "pkg/b/run.py"]}


# --- the tests mirror the package: `ls tests` names the file that tests a module ---
#
# packcli/<pkg>/<mod>.py is tested in tests/test_<pkg>_<mod>.py (or tests/test_<mod>.py where that name is
# the module's alone); a package's __init__ that defines nothing of its own (re-exports, a lazy __getattr__)
# needs no file. Every other test file is a cross-cutting suite, listed below with what it holds.

TESTS = Path(__file__).resolve().parent

# Modules with no test file of their own, each with the reason.
NO_TEST_FILE = {
    "packcli.__main__": "`python -m packcli`: two lines handing over to the CLI (test_data_memory runs it)",
    "packcli.choices": "pure data: the str Enums of every closed choice; each is tested where it acts",
    "packcli.progress": "an interface (a Protocol) and the reporter that reports nothing; the CLI's bar, "
                        "packcli.cli.console.RichProgress, is what reports",
}

# Modules whose tests live in a suite that exercises them together with others (the file named,
# and what would move them). The check below fails when one gets its own file and is still listed here,
# so this table only shrinks (empty: every module has its file).
TESTED_ELSEWHERE: dict[str, str] = {}

# Test files named for no module: suites that cut across the package, each with what it holds.
CROSS_CUTTING = {
    "test_layout": "the package's shape (this file): imports, layers, names, tests; packcli.verify.layout's "
                   "tests are test_verify_layout.py",
    "test_pack_faults": "`pack` killed at known points, a full disk, a dead worker: --out is never half-written",
    "test_tokenizer_end_to_end": "both tokenizer backends through pack and verify: the same bytes",
    "test_chat_tools": "tool calls and reasoning against transformers' own apply_chat_template",
    "test_cli_fuzz": "every option of every command set to bad values: exit 2, one error line, nothing written",
    "test_cli_paths": "every command against the file system (links, folders, the user's files): nothing lost",
    "test_cli_doc": "docs/cli.md is what scripts/make_cli_doc.py makes of the CLI",
    "test_docs_examples": "the example records of docs/formats.md pack with no reject",
    "test_training_doc": "docs/training.md's blocks run in order, as written",
    "test_recipes": "the training recipes of docs/training.md on tiny CPU models (TRL, torch)",
    "test_data_memory": "the loader's memory follows a row group (tracemalloc, packed by `python -m packcli`)",
    "test_data_memory_cap": "the loader within a fixed budget under a real RLIMIT_DATA cap, in a child process",
    "test_verify_fuzz": "malformed values anywhere in a forged artifact: violations, never a traceback",
    "test_ray_cluster": "a real three-node Ray cluster (scripts/ray_cluster_check.py) for pack and verify",
    "test_fixtures": "the committed fixtures are what the scripts in scripts/ make",
    "test_fixture_artifact": "the committed fixtures/packed still verifies with today's code",
    "test_bench_smoke": "scripts/bench_pipeline.py runs in every mode on a tiny corpus",
    "test_bench_overlong_smoke": "scripts/bench_overlong.py's quick mode and scripts/make_books_corpus.py",
    "test_bench_train_smoke": "scripts/bench_train.py --quick and scripts/bench_vs_trl.py's packcli half",
    "test_make_long_corpus": "scripts/make_long_corpus.py",
    "test_lint": "ruff check over packcli, tests and scripts with pyproject.toml's rules",
}


def _defines_nothing(path: Path) -> bool:
    """A package ``__init__`` with no function or class of its own but a lazy ``__getattr__``: a table of contents."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name != "__getattr__"
                   for n in tree.body)


def _test_names(module: str) -> list[str]:
    """The test file names that name ``module``: ``test_`` and the module's dotted path without ``packcli``,
    from its last part up to the whole path, joined by ``_`` (packcli.verify.replan: test_replan,
    test_verify_replan)."""
    parts = module.split(".")[1:]
    return ["test_" + "_".join(parts[k:]) for k in range(len(parts) - 1, -1, -1)]


def _owners(modules: list[str], test_files: set[str], cross: set[str]) -> dict[str, str | None]:
    """Each module -> the test file named for it (None: none). A name two modules share (test_stats:
    packcli.stats and packcli.cli.stats) belongs to the module whose whole path it spells, else to neither."""
    claims: dict[str, list[str]] = {}
    for module in modules:
        for name in _test_names(module):
            claims.setdefault(name, []).append(module)
    owner = {}
    for name, claimants in claims.items():
        whole = [m for m in claimants if _test_names(m)[-1] == name]
        owner[name] = whole[0] if whole else claimants[0] if len(claimants) == 1 else None
    found: dict[str, str | None] = {}
    for module in modules:
        mine = [n for n in _test_names(module) if n in test_files and n not in cross and owner.get(n) == module]
        found[module] = mine[0] if mine else None
    return found


def _mirror_problems(package: Path, tests: Path, exempt: dict[str, str], elsewhere: dict[str, str],
                     cross: dict[str, str]) -> list[str]:
    """What breaks the rule: a module with no test file (and no listed reason), a listed module that has one
    now, a test file named for no module and not listed as cross-cutting, a listed name that is gone."""
    def name(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name(p): p for p in package.rglob("*.py")}
    test_files = {p.stem for p in tests.glob("test_*.py")}
    modules = sorted(m for m in files if m != package.name)
    owners = _owners(modules, test_files, set(cross))
    problems = []
    for module in modules:
        listed = module in exempt or module in elsewhere
        table_of_contents = files[module].name == "__init__.py" and _defines_nothing(files[module])
        if owners[module] is None and not listed and not table_of_contents:
            problems.append(f"{module} has no test file: tests/{_test_names(module)[-1]}.py")
        elif owners[module] is not None and listed:
            problems.append(f"{module} is listed as having no test file of its own, but tests/{owners[module]}.py is")
    for name in sorted(test_files - {n for n in owners.values() if n} - set(cross)):
        problems.append(f"tests/{name}.py is named for no module: rename it for the module it tests, or list it "
                        "as cross-cutting with what it holds")
    problems += [f"{m} is listed but is no module" for m in sorted((set(exempt) | set(elsewhere)) - set(modules))]
    problems += [f"tests/{n}.py is listed as cross-cutting but does not exist" for n in sorted(set(cross) - test_files)]
    return problems


def test_every_module_has_its_test_file():
    """``ls tests`` says where a module's tests are (STYLE.md: the tests mirror the package)."""
    assert _mirror_problems(PACKAGE, TESTS, NO_TEST_FILE, TESTED_ELSEWHERE, CROSS_CUTTING) == []


def test_the_mirror_check_finds_each_planted_breach(tmp_path):
    pkg, tests = tmp_path / "packcli", tmp_path / "tests"
    for rel, text in {"__init__.py": "", "__main__.py": "", "job/__init__.py": "from packcli.job.plan import f\n",
                      "job/plan.py": "def f(): pass\n", "job/spill.py": "", "job/write.py": "",
                      "verify/__init__.py": "def check(): pass\n", "verify/plan2.py": "", "stats/__init__.py": "",
                      "stats/plan2.py": "", "cli/stats.py": ""}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    tests.mkdir()
    for name in ("test_plan", "test_job_write", "test_pipeline", "test_plan2", "test_spill", "test_stats",
                 "test_gone_module"):
        (tests / f"{name}.py").write_text("")
    problems = _mirror_problems(pkg, tests, {"packcli.__main__": "why", "packcli.job.write": "why",
                                             "packcli.old": "why"}, {"packcli.job.spill": "test_pipeline.py"},
                                {"test_pipeline": "why", "test_vanished": "why"})
    assert problems == [
        "packcli.cli.stats has no test file: tests/test_cli_stats.py",  # test_stats is the package's name
        "packcli.job.spill is listed as having no test file of its own, but tests/test_spill.py is",
        "packcli.job.write is listed as having no test file of its own, but tests/test_job_write.py is",
        "packcli.stats.plan2 has no test file: tests/test_stats_plan2.py",  # test_plan2: two modules' short name
        "packcli.verify has no test file: tests/test_verify.py",  # an __init__ that defines a function
        "packcli.verify.plan2 has no test file: tests/test_verify_plan2.py",
        ("tests/test_gone_module.py is named for no module: rename it for the module it tests, or list it as "
         "cross-cutting with what it holds"),
        ("tests/test_plan2.py is named for no module: rename it for the module it tests, or list it as "
         "cross-cutting with what it holds"),
        "packcli.old is listed but is no module",
        "tests/test_vanished.py is listed as cross-cutting but does not exist",
    ]
