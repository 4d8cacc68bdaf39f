"""Tokenizers by Hub name, offline: a fake local cache laid out as huggingface_hub writes it, resolved by
packcli and by huggingface_hub and transformers themselves (where installed), which must agree."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES

from packcli.artifact import manifest as mf
from packcli.checks import tokenizer_problems
from packcli.config import PackConfig
from packcli.errors import InputError
from packcli.job.run import pack_corpus
from packcli.tokenizer.hub import HubName, hub_cache_dir, parse_hub_name, resolve_tokenizer_path
from packcli.tokenizer.load import cached_tokenizer, load_tokenizer

MAIN, V1 = "1" * 40, "2" * 40
HUB_VARS = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")


def add_snapshot(cache: Path, repo_id: str, commit: str, files: dict[str, bytes], refs: tuple[str, ...] = ()) -> Path:
    """Write files as huggingface_hub does: content in blobs/<sha256>, linked from snapshots/<commit>/, and
    refs/<branch or tag> holding the commit."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    for ref in refs:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
    return snapshot


def fixture_files(**config_changes) -> dict[str, bytes]:
    config = json.loads((FIXTURES / "tokenizer" / "tokenizer_config.json").read_text())
    config.update(config_changes)
    return {"tokenizer.json": (FIXTURES / "tokenizer" / "tokenizer.json").read_bytes(),
            "tokenizer_config.json": json.dumps(config).encode()}


@pytest.fixture()
def model_cache(tmp_path, monkeypatch) -> Path:
    """A cache with org/tok at main (and tag v1 on another commit) and org/weights without a tokenizer."""
    for var in HUB_VARS:
        monkeypatch.delenv(var, raising=False)
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    add_snapshot(cache, "org/tok", MAIN, fixture_files(), refs=("main",))
    add_snapshot(cache, "org/tok", V1, fixture_files(eos_token="<|endoftext|>"), refs=("v1",))
    add_snapshot(cache, "org/weights", MAIN, {"config.json": b"{}"}, refs=("main",))
    return cache


def test_names_are_parsed_as_huggingface_hub_validates_them():
    assert parse_hub_name("Qwen/Qwen3-8B") == HubName("Qwen/Qwen3-8B", "main")
    assert parse_hub_name("hf:Qwen/Qwen3-8B@v1.0") == HubName("Qwen/Qwen3-8B", "v1.0")
    assert parse_hub_name("hf:gpt2") == HubName("gpt2", "main")
    for path in ("gpt2", "tok/", "./tok", "a/b/c", "/abs/tok", "org/bad--name", "org/..", "tok/tokenizer.json.gz/x"):
        assert parse_hub_name(path) is None, path


def test_resolution_agrees_with_huggingface_hub(model_cache):
    hub = pytest.importorskip("huggingface_hub")
    for spec, repo_id, revision in (("org/tok", "org/tok", "main"), ("hf:org/tok@v1", "org/tok", "v1"),
                                    (f"hf:org/tok@{V1}", "org/tok", V1)):
        ours = resolve_tokenizer_path(spec)
        theirs = hub.try_to_load_from_cache(repo_id, "tokenizer.json", cache_dir=model_cache, revision=revision)
        assert ours / "tokenizer.json" == Path(theirs)
        assert ours == Path(hub.snapshot_download(repo_id, cache_dir=model_cache, revision=revision,
                                                  local_files_only=True))
    assert load_tokenizer("hf:org/tok@v1").eos_token == "<|endoftext|>"
    assert load_tokenizer("org/tok").eos_token == "<|im_end|>"


def test_the_same_blob_under_two_revisions_keeps_each_revisions_config(model_cache):
    """Both snapshots link one tokenizer.json blob; the per-process cache must not serve main's config for v1."""
    assert cached_tokenizer("org/tok").eos_token == "<|im_end|>"
    assert cached_tokenizer("hf:org/tok@v1").eos_token == "<|endoftext|>"


@pytest.mark.parametrize("env,expected", [
    ({"HF_HOME": "{t}/home"}, "{t}/home/hub"),
    ({"XDG_CACHE_HOME": "{t}/xdg"}, "{t}/xdg/huggingface/hub"),
    ({"HF_HOME": "{t}/home", "HUGGINGFACE_HUB_CACHE": "{t}/old"}, "{t}/old"),
    ({"HF_HOME": "{t}/home", "HUGGINGFACE_HUB_CACHE": "{t}/old", "HF_HUB_CACHE": "{t}/new"}, "{t}/new"),
    ({}, "~/.cache/huggingface/hub"),
])
def test_the_cache_is_where_huggingface_hub_puts_it(env, expected, tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    child = {k: v for k, v in os.environ.items() if k not in HUB_VARS}
    child.update({k: v.format(t=tmp_path) for k, v in env.items()})
    theirs = subprocess.run([sys.executable, "-c", "from huggingface_hub import constants; print(constants.HF_HUB_CACHE)"],
                            env=child, capture_output=True, text=True, check=True).stdout.strip()
    for var in HUB_VARS:
        monkeypatch.delenv(var, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v.format(t=tmp_path))
    assert str(hub_cache_dir()) == theirs == os.path.expanduser(expected.format(t=tmp_path))


@pytest.mark.slow  # imports transformers in a child process
def test_transformers_finds_the_same_files(model_cache):
    pytest.importorskip("transformers")
    code = ("import sys; from transformers.utils import cached_file; "
            "print(cached_file('org/tok', 'tokenizer.json', revision=sys.argv[1], local_files_only=True))")
    for revision, spec in (("main", "org/tok"), ("v1", "hf:org/tok@v1")):
        theirs = subprocess.run([sys.executable, "-c", code, revision], capture_output=True, text=True, check=True,
                                env=dict(os.environ, HF_HUB_OFFLINE="1")).stdout.strip().splitlines()[-1]
        assert Path(theirs) == resolve_tokenizer_path(spec) / "tokenizer.json"


def test_a_miss_says_so_and_how_to_get_it(model_cache):
    with pytest.raises(InputError) as info:
        resolve_tokenizer_path("Qwen/Qwen3-8B")
    assert info.value.message == (f"tokenizer Qwen/Qwen3-8B: no such file or directory, and not in the local Hugging "
                                  f"Face cache ({model_cache} has no models--Qwen--Qwen3-8B)")
    assert "hf download Qwen/Qwen3-8B --include 'tokenizer*' 'chat_template*'" in info.value.hint
    with pytest.raises(InputError, match="revision v2 is not in the local Hugging Face cache \\(cached revisions: "
                                         "main, v1\\)") as info:
        resolve_tokenizer_path("hf:org/tok@v2")
    assert "hf download org/tok --revision v2 --include 'tokenizer*' 'chat_template*'" in info.value.hint
    with pytest.raises(InputError, match="the cached snapshot .* has no tokenizer.json"):
        resolve_tokenizer_path("org/weights")
    [problem] = tokenizer_problems("--tokenizer", "Qwen/Qwen3-8B")
    assert problem.startswith("--tokenizer Qwen/Qwen3-8B: no such file or directory, and not in the local Hugging "
                              "Face cache") and "hf download Qwen/Qwen3-8B --include" in problem


def test_a_local_path_that_looks_like_a_name_is_the_path(model_cache, tmp_path, monkeypatch, tokenizer_dir):
    """As transformers: an existing directory wins over the cache."""
    monkeypatch.chdir(tmp_path)
    local = tmp_path / "org" / "tok"
    local.mkdir(parents=True)
    for name, data in fixture_files(eos_token="<s>").items():
        (local / name).write_bytes(data)
    assert resolve_tokenizer_path("org/tok") == Path("org/tok")
    assert load_tokenizer("org/tok").eos_token == "<s>"
    assert load_tokenizer("hf:org/tok").eos_token == "<|im_end|>"  # hf: always means the cache


def test_pack_by_name_pins_the_same_tokenizer_and_bytes_as_by_path(model_cache, tmp_path, tokenizer_dir):
    data = FIXTURES / "corpus" / "openai.jsonl"
    by_name = pack_corpus(PackConfig(inputs=(str(data),), tokenizer="org/tok", out=tmp_path / "a", capacity=1024))
    by_path = pack_corpus(PackConfig(inputs=(str(data),), tokenizer=str(tokenizer_dir), out=tmp_path / "b",
                                     capacity=1024))
    assert by_name.manifest["manifest_sha256"] == by_path.manifest["manifest_sha256"]
    assert by_name.manifest["tokenizer"]["sha256"] == hashlib.sha256(fixture_files()["tokenizer.json"]).hexdigest()
    assert by_name.manifest["unhashed"]["provenance"]["tokenizer"] == "org/tok"
    from packcli.verify.locate import find_tokenizer  # verify and show find it again by its name

    found = find_tokenizer(mf.Manifest.of(by_name.manifest), None)
    assert found == model_cache / "models--org--tok" / "snapshots" / MAIN


def test_the_cli_names_the_miss_and_the_command(model_cache, tmp_path):
    from typer.testing import CliRunner

    from packcli.cli import app

    result = CliRunner().invoke(app, ["pack", str(FIXTURES / "corpus" / "openai.jsonl"), "-t", "Qwen/Qwen3-8B",
                                      "-o", str(tmp_path / "o")])
    assert result.exit_code == 2 and not (tmp_path / "o").exists()
    assert "not in the local Hugging Face cache" in result.output
    assert "hf download Qwen/Qwen3-8B --include 'tokenizer*' 'chat_template*'" in result.output
    ok = CliRunner().invoke(app, ["pack", str(FIXTURES / "corpus" / "openai.jsonl"), "-t", "hf:org/tok", "-o",
                                  str(tmp_path / "p"), "-c", "1024", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["counts"]["records"] == 120


def test_verify_and_show_take_a_tokenizer_by_name(model_cache, tmp_path):
    from packcli.verify import verify_artifact
    from packcli.view import show_artifact

    out = tmp_path / "a"
    pack_corpus(PackConfig(inputs=(str(FIXTURES / "corpus" / "openai.jsonl"),), tokenizer=str(FIXTURES / "tokenizer"),
                           out=out, capacity=1024))
    assert verify_artifact(out, tokenizer="hf:org/tok").ok
    assert show_artifact(out, pack=0, tokenizer="org/tok").examples[0].tokens
