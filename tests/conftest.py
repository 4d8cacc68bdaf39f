"""Shared fixtures: the bundled tokenizer and corpus, and a small packed artifact built once."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from click.testing import Result

    from packcli.ingest import Record, Rejection
    from packcli.job.run import PackSummary
    from packcli.verify.attention.results import AttentionReport, PackArrays

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
ASSETS = ROOT / ".cache" / "assets"

# The render engines a sandbox test runs on: jinja2's sandbox, and minijinja where installed (the render extra),
# told to render directly, bypassing the start-up probe (docs/render-backends.md).
RENDER_ENGINES = ["jinja2", pytest.param("minijinja", marks=pytest.mark.skipif(
    importlib.util.find_spec("minijinja") is None, reason="minijinja is not installed"))]
TINY_CHAT = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start Ray run one after another in one xdist worker (``--dist loadgroup``): a cluster
    started with ``ray start`` is found by a concurrent ``ray.init()`` on the same machine."""
    for item in items:
        if item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.xdist_group("ray"))


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module (start-up costs seconds); a short temp dir for the socket path limit."""
    ray = pytest.importorskip("ray")
    import tempfile

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             _temp_dir=tempfile.mkdtemp(prefix="pct-", dir="/tmp"))
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _own_trl_mapping_cache(tmp_path_factory, monkeypatch):
    """Each test remembers TRL's template mapping in a folder of its own, never in the user's cache."""
    from packcli.chat import training

    path = tmp_path_factory.mktemp("packcli-cache") / training.MAPPING_CACHE
    monkeypatch.setattr(training, "mapping_cache_path", lambda: path)


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    return FIXTURES / "tokenizer"


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir):
    from packcli.tokenizer.load import load_tokenizer

    return load_tokenizer(tokenizer_dir)


@pytest.fixture(scope="session")
def corpus_files() -> list[str]:
    names = ("openai.jsonl", "sharegpt.jsonl", "prompt_completion.jsonl", "text.jsonl", "openai.jsonl.gz")
    return [str(FIXTURES / "corpus" / n) for n in names]


def _pack_fixture_corpus(out: Path, corpus_files: list[str], tokenizer_dir: Path, overlong: str) -> Path:
    """The fixture corpus and its broken lines packed at a small capacity (many seams a pack)."""
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    pack_corpus(PackConfig(inputs=tuple(corpus_files + [str(FIXTURES / "corpus" / "broken.jsonl")]),
                           tokenizer=str(tokenizer_dir), out=out, capacity=1024, packs_per_shard=16,
                           overlong=overlong))
    return out


@pytest.fixture(scope="session")
def packed(tmp_path_factory, corpus_files, tokenizer_dir) -> Path:
    """A packed artifact of the fixture corpus with a small capacity (many seams per pack)."""
    return _pack_fixture_corpus(tmp_path_factory.mktemp("art") / "packed", corpus_files, tokenizer_dir, "truncate")


@pytest.fixture(scope="session")
def split_packed(tmp_path_factory, tokenizer_dir) -> Path:
    """Documents of 1 to 6 capacities under --overlong split: ids with several segments (their chunks)."""
    import json

    import numpy as np

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    texts = [r["text"] for r in jsonl_records("text.jsonl")]
    rng = np.random.default_rng(0)
    docs = [" ".join(rng.choice(texts, size=int(k))) for k in rng.integers(1, 14, size=40)]
    tmp = tmp_path_factory.mktemp("split")
    src = write_jsonl(tmp / "docs.jsonl", [{"text": d} for d in docs])
    out = tmp / "out"
    pack_corpus(PackConfig(inputs=(str(src),), tokenizer=str(tokenizer_dir), out=out, capacity=256, packs_per_shard=32,
                           overlong="split"))
    assert json.loads((out / "manifest.json").read_text())["counts"]["split"] > 0
    return out


@pytest.fixture()
def packed_copy(packed, tmp_path) -> Path:
    dst = tmp_path / "packed"
    shutil.copytree(packed, dst)
    return dst


@pytest.fixture()
def plan_file_backed_too(monkeypatch, tmp_path) -> Iterator[None]:
    """Every plan check the test runs runs file-backed as well, with the same report (`forgery.plan_both_ways`);
    each file-backed run must have made its columns' files."""
    from forgery import plan_both_ways

    made = plan_both_ways(monkeypatch, tmp_path / "plan-scratch")
    yield
    assert all(any(folder.iterdir()) for folder in made), made


@pytest.fixture(scope="session")
def packed_drop(tmp_path_factory, corpus_files, tokenizer_dir) -> Path:
    """The fixture corpus with over-long examples dropped (the `packed` fixture truncates them)."""
    return _pack_fixture_corpus(tmp_path_factory.mktemp("drop") / "packed", corpus_files, tokenizer_dir, "drop")


@pytest.fixture()
def drop_copy(packed_drop, tmp_path) -> Path:
    shutil.copytree(packed_drop, tmp_path / "drop")
    return tmp_path / "drop"


def flip_a_byte(path: Path) -> None:
    """One bit of ``path`` flipped in its middle: the file still reads as Parquet, its sha256 no longer matches."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def run_cli(*args: object) -> Result:
    """``packcli ARGS`` in this process (typer's runner; stderr apart), each argument as its ``str``."""
    from typer.testing import CliRunner

    from packcli.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def seam_rows(directory: Path) -> list[dict]:
    """An artifact's seam table (examples.parquet), a dict a row."""
    import pyarrow.parquet as pq

    return pq.read_table(directory / "examples.parquet").to_pylist()


def cjk_row(packed: Path) -> dict:
    """The seam row of a packed record whose text has multi-byte characters split over byte-level tokens."""
    corpus = (FIXTURES / "corpus" / "openai.jsonl").read_text(encoding="utf-8").split("\n")
    wanted = {i + 1 for i, line in enumerate(corpus) if "東" in line or "京" in line or "語" in line}
    return next(r for r in seam_rows(packed) if r["source"].endswith("openai.jsonl") and r["line"] in wanted
                and r["status"] == "packed")


def pack_inputs(inputs: Sequence[str | Path], tokenizer_dir: Path, out: Path, **config: Any) -> PackSummary:
    """``pack_corpus`` of ``inputs`` with the tokenizer in ``tokenizer_dir`` into ``out`` (capacity 512 by default)."""
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    config.setdefault("capacity", 512)
    return pack_corpus(PackConfig(inputs=tuple(map(str, inputs)), tokenizer=str(tokenizer_dir), out=out, **config))


def token_columns(directory: Path, manifest: dict) -> list[dict]:
    """The shards' token columns: what training reads (example ids differ with the input's sha256)."""
    import pyarrow.parquet as pq

    cols = ["input_ids", "labels", "position_ids", "cu_seqlens", "num_tokens", "num_supervised"]
    return [pq.read_table(directory / s["name"], columns=cols).to_pydict() for s in manifest["shards"]]


def parse_line(obj_or_bytes: dict | bytes, fmt: str = "auto") -> Record | Rejection:
    """One input line (a dict as its JSON, or raw bytes), read as line 7 of input 0 (`parse_record`)."""
    from packcli.choices import Format
    from packcli.ingest import parse_record

    raw = obj_or_bytes if isinstance(obj_or_bytes, bytes) else json.dumps(obj_or_bytes).encode()
    return parse_record(raw, file_index=0, line=7, fmt=Format(fmt))


# The attention check's packs and report, shared by tests/test_attention.py and test_verify_attention_*.py (torch).
ATTENTION_CORRECT_HF = ("hf:eager", "hf:sdpa")
ATTENTION_HF_TRAPS = ("hf:sdpa+attention_mask", "hf:eager+cache", "hf:sdpa+default_kwargs")


def attention_pack(lengths: Sequence[int], seed: int, vocab: int = 64) -> PackArrays:
    """Random ids; per example a masked prompt span (first label always -100), then supervised."""
    import numpy as np

    from packcli.contract import IGNORE_INDEX
    from packcli.verify.attention.results import PackArrays

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, sum(lengths)).astype(np.int32)
    labels, positions, cu = ids.copy(), [], [0]
    for n in lengths:
        start = cu[-1]
        labels[start:start + int(rng.integers(1, max(2, n // 2)))] = IGNORE_INDEX
        positions += range(n)
        cu.append(start + n)
    return PackArrays(ids, labels, np.array(positions, np.int32), np.array(cu, np.int32))


@contextlib.contextmanager
def one_thread(torch: ModuleType) -> Iterator[None]:
    """Tiny matmuls gain nothing from threads, and on a busy 2-core CI box OpenMP spin-waits made a
    32x32 linear take 30 ms with 2 threads vs 30 us with 1."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    with one_thread(pytest.importorskip("torch")):
        yield


@pytest.fixture(scope="session")
def attention_packs() -> list[PackArrays]:
    # varied lengths, a one-token example, and an example whose labels are all masked
    return [attention_pack([7, 13, 5, 9], 0), attention_pack([20, 1, 11, 4], 1)]


@pytest.fixture(scope="session")
def attention_report(attention_packs: list[PackArrays]) -> AttentionReport:
    """Every CPU backend and the HF traps on `attention_packs`, run once (7 backends: seconds)."""
    torch = pytest.importorskip("torch")
    from packcli.verify.attention import check_packs

    with one_thread(torch):  # a session fixture is built before the module's one_torch_thread
        return check_packs(attention_packs, backends=["sdpa", "naive", "hf", *ATTENTION_HF_TRAPS])


def real_asset(*parts: str) -> Path:
    """A real tokenizer/template fetched by scripts/fetch_real_assets.py; CI fetches them first."""
    path = ASSETS.joinpath(*parts)
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} missing: .ci/run must run scripts/fetch_real_assets.py")
        pytest.skip(f"{path} missing: run python scripts/fetch_real_assets.py")
    return path


def load_script(name: str) -> ModuleType:
    """Import ``scripts/<name>.py`` (the benchmarks are scripts, not a package) for a smoke test."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def faulted_copy(artifact: Path, fault, tmp_path: Path) -> Path:  # noqa: ANN001 - a verify.faults.Fault
    """A fresh copy of ``artifact`` with ``fault`` applied (skips the test where the fault finds nothing to damage)."""
    from packcli.verify.faults import NotApplicable, prepare_workspace

    copy = prepare_workspace(artifact, tmp_path / "ws")
    try:
        fault.apply(copy, tmp_path / "ws")
    except NotApplicable:
        pytest.skip("the fixture artifact has nothing this fault damages")
    return copy


def artifact_bytes(directory: Path, manifest: dict) -> dict[str, bytes]:
    """The bytes of an artifact's shards, seam table and rejects file: what "byte-identical" compares."""
    from packcli.contract import REJECTS_NAME, SEAM_TABLE_NAME

    names = [s["name"] for s in manifest["shards"]] + [SEAM_TABLE_NAME, REJECTS_NAME]
    return {n: (directory / n).read_bytes() for n in names}



def jsonl_records(*names: str) -> list[dict]:
    """The records of fixture corpus files, in order (blank lines skipped)."""
    import json

    return [json.loads(line) for name in names
            for line in (FIXTURES / "corpus" / name).read_text(encoding="utf-8").split("\n") if line.strip()]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    import json

    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def write_parquet(path: Path, records: list[dict], row_group_size: int | None = None) -> Path:
    """Records as a Parquet file with one schema for all of them, inferred over every record (a field a
    record lacks is null in its row), as a JSON-to-Parquet conversion writes it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_struct_array(pa.array(records)), path, row_group_size=row_group_size)
    return path


def hub_cache(root: Path, name: str, split_files: dict[str, Path]) -> Path:
    """A local Hugging Face datasets cache holding ``name`` (owner/dataset) with the given Parquet splits,
    laid out as ``load_dataset`` leaves it after an online load; returns the cache directory."""
    import json

    import datasets

    build = root / "build"
    datasets.load_dataset("parquet", data_files={k: str(v) for k, v in split_files.items()}, cache_dir=str(build))
    made = next(p for p in build.glob("parquet/*/*/*") if p.is_dir())
    owner, dataset = name.split("/")
    target = root / "cache" / f"{owner}___{dataset}" / "default" / "0.0.0" / "0123abcd"
    target.mkdir(parents=True)
    for f in made.iterdir():
        if f.suffix == ".arrow":
            shutil.copy(f, target / f.name.replace("parquet-", f"{dataset}-"))
    info = json.loads((made / "dataset_info.json").read_text())
    info.update(builder_name=dataset, dataset_name=dataset)
    (target / "dataset_info.json").write_text(json.dumps(info))
    return root / "cache"


@pytest.fixture(scope="module")
def nfc_fixture(tmp_path_factory) -> Path:
    """The fixture tokenizer with an NFC normalizer (Qwen3's kind), in a module's temporary folder."""
    from tokenizer_cases import variant

    return variant(tmp_path_factory.mktemp("tok"), "nfc", normalizer={"type": "NFC"})


@pytest.fixture(scope="module")
def pairs(nfc_fixture):
    """(reference, fast) per tokenizer, loaded once a module: the real ones take seconds each."""
    from tokenizer_cases import FIXTURE_JSON, pair

    loaded = {"fixture": pair(FIXTURE_JSON), "fixture+nfc": pair(nfc_fixture)}

    def get(name: str):
        if name not in loaded:
            loaded[name] = pair(real_asset(name))
        return loaded[name]
    return get
