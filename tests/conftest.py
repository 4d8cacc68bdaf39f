"""Shared fixtures: the bundled tokenizer and corpus, and a small packed artifact built once."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
ASSETS = ROOT / ".cache" / "assets"


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


@pytest.fixture(scope="session")
def packed(tmp_path_factory, corpus_files, tokenizer_dir) -> Path:
    """A packed artifact of the fixture corpus with a small capacity (many seams per pack)."""
    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    out = tmp_path_factory.mktemp("art") / "packed"
    pack_corpus(PackConfig(inputs=tuple(corpus_files + [str(FIXTURES / "corpus" / "broken.jsonl")]),
                           tokenizer=str(tokenizer_dir), out=out, capacity=1024, packs_per_shard=16,
                           overlong="truncate"))
    return out


@pytest.fixture()
def packed_copy(packed, tmp_path) -> Path:
    dst = tmp_path / "packed"
    shutil.copytree(packed, dst)
    return dst


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


def artifact_bytes(directory: Path, manifest: dict) -> dict[str, bytes]:
    """The bytes of an artifact's shards, seam table and rejects file: what "byte-identical" compares."""
    from packcli.contract import REJECTS_NAME, SEAM_TABLE_NAME

    names = [s["name"] for s in manifest["shards"]] + [SEAM_TABLE_NAME, REJECTS_NAME]
    return {n: (directory / n).read_bytes() for n in names}

