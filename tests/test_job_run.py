"""`packcli.job.run.pack_corpus`: `pack` end to end: round trip, determinism, atomicity, budgets, bad input, contract
versions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, ROOT

from packcli.artifact import manifest as mf
from packcli.artifact.shards import load_flat
from packcli.chat import Renderer, load_template
from packcli.config import PackConfig
from packcli.contract import MANIFEST_NAME, REJECTS_NAME, SEAM_TABLE_NAME
from packcli.errors import BudgetError, ContractError, InputError, RecordError
from packcli.ingest import read_lines
from packcli.job.run import pack_corpus
from packcli.prepare import Preparer


def config(inputs, tokenizer_dir, out, **kw) -> PackConfig:
    return PackConfig(inputs=tuple(map(str, inputs)), tokenizer=str(tokenizer_dir), out=out, **kw)


def test_round_trip_equals_unpacked_tokenization(packed, tokenizer):
    """Every packed span equals the example tokenized alone; every record accounted for once."""
    manifest = mf.read_manifest(packed)
    seam = pq.read_table(packed / SEAM_TABLE_NAME).to_pylist()
    shards = {i["name"]: load_flat(pq.read_table(packed / i["name"]), i["name"]) for i in manifest["shards"]}
    tpl = load_template("auto", tokenizer)
    prep = Preparer(Renderer(tpl, "auto", bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token), tokenizer)
    by_line = {(r["input"], r["line"]): r for r in seam}
    total = 0
    paths = manifest["unhashed"]["provenance"]["inputs"]
    for fi, entry in enumerate(manifest["inputs"]):
        assert Path(paths[fi]).name == entry["name"]
        batch = [(fi, line, raw) for line, raw in read_lines(ROOT / paths[fi], fi)]
        for (_, line, _), out in zip(batch, prep.prepare(batch)):
            row = by_line.pop((fi, line))
            assert row["source"] == entry["name"]
            total += 1
            if isinstance(out, str):
                assert row["status"] == "rejected" and row["reason"] == out
                continue
            if row["status"] == "dropped":
                assert len(out.input_ids) > manifest["config"]["capacity"]
                continue
            shard = shards[row["shard"]]
            a = shard.row_offsets[row["row"]] + row["offset"]
            n = row["length"]
            assert np.array_equal(shard.ids[a:a + n], out.input_ids[:n])
            assert np.array_equal(shard.labels[a:a + n], out.labels[:n])
            assert np.array_equal(shard.positions[a:a + n], np.arange(n))
    assert not by_line and total == manifest["counts"]["records"]
    c = manifest["counts"]
    assert c["packed"] + c["truncated"] + c["dropped"] + c["rejected"] == c["records"]


def test_pack_contents(packed):
    manifest = mf.read_manifest(packed)
    assert manifest["counts"]["truncated"] >= 1, "the fixture corpus has over-long examples to truncate"
    rejects = [json.loads(l) for l in (packed / REJECTS_NAME).read_text().splitlines()]
    assert len(rejects) == manifest["counts"]["rejected"]
    # broken.jsonl: one line per bad case (fixtures/README.md); an empty assistant message is valid.
    reasons = sorted(r["reason"].split(":")[0].split(" at byte")[0] for r in rejects if r["source"] == "broken.jsonl")
    assert reasons == sorted(["malformed JSON", "expected a JSON object, got array", "no known field (messages, "
                              "conversations, prompt/completion, text); keys", "messages", "messages[0].role",
                              "messages[0].content", "invalid UTF-8", "no assistant turn to supervise; use --loss all "
                              "to train on the whole text"])
    table = pq.read_table(packed / "shard-00000.parquet")
    assert table.column_names == ["input_ids", "labels", "position_ids", "cu_seqlens", "seq_lengths", "example_ids", "num_tokens",
                                  "num_supervised"]


def test_deterministic_bytes(tmp_path, corpus_files, tokenizer_dir):
    a = pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "a", capacity=512, packs_per_shard=8))
    b = pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "b", capacity=512, packs_per_shard=8))
    assert a.manifest["manifest_sha256"] == b.manifest["manifest_sha256"]
    for info in a.manifest["shards"] + [{"name": SEAM_TABLE_NAME}]:
        assert (tmp_path / "a" / info["name"]).read_bytes() == (tmp_path / "b" / info["name"]).read_bytes()
    c = pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "c", capacity=512, packs_per_shard=8, seed=1))
    assert c.manifest["manifest_sha256"] != a.manifest["manifest_sha256"]


def test_force_replaces_an_artifact_and_never_a_folder_of_the_users(tmp_path, corpus_files, tokenizer_dir):
    out = tmp_path / "out"
    first = pack_corpus(config(corpus_files[:1], tokenizer_dir, out, seed=1)).manifest["manifest_sha256"]
    with pytest.raises(InputError, match=r"exists \(a packcli artifact\); pass `force`"):
        pack_corpus(config(corpus_files[:1], tokenizer_dir, out))
    assert json.loads((out / MANIFEST_NAME).read_text())["manifest_sha256"] == first
    second = pack_corpus(config(corpus_files[:1], tokenizer_dir, out, force=True)).manifest["manifest_sha256"]
    assert second != first and json.loads((out / MANIFEST_NAME).read_text())["manifest_sha256"] == second
    (out / "keep.txt").write_text("mine")  # now the folder holds a file of the user's: never replaced
    for force in (False, True):
        with pytest.raises(InputError, match="holds keep.txt, which its manifest.json does not list"):
            pack_corpus(config(corpus_files[:1], tokenizer_dir, out, force=force))
    assert (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failure_mid_write_leaves_nothing(tmp_path, corpus_files, tokenizer_dir, monkeypatch):
    import packcli.job.write as writing

    calls = []
    real = writing.write_shard

    def failing(table, path):
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("disk full")
        return real(table, path)

    monkeypatch.setattr(writing, "write_shard", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "out", capacity=512, packs_per_shard=4))
    # Only the unit work directory survives (for resume); it holds no manifest and no shard.
    assert [p.name for p in tmp_path.iterdir()] == [".packcli-work-out"]
    assert not list((tmp_path / ".packcli-work-out").glob("*.parquet"))
    assert not list(tmp_path.rglob("manifest.json"))


def test_on_error_fail_names_file_and_line(tmp_path, tokenizer_dir):
    with pytest.raises(RecordError, match=r"broken.jsonl:\d+: "):
        pack_corpus(config([FIXTURES / "corpus" / "broken.jsonl"], tokenizer_dir, tmp_path / "o", on_error="fail"))
    assert not (tmp_path / "o").exists()


def test_budget_failure_writes_nothing(tmp_path, corpus_files, tokenizer_dir):
    with pytest.raises(BudgetError, match="density"):
        pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "o", strategy="sequential", min_density=0.999))
    assert not (tmp_path / "o").exists()


def test_unknown_contract_version_is_refused(packed_copy):
    path = packed_copy / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["contract_version"] = 99
    path.write_text(json.dumps(data))
    with pytest.raises(ContractError, match="contract version 99 is not supported"):
        mf.read_manifest(packed_copy)


def test_empty_input_file(tmp_path, tokenizer_dir):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no records"):
        pack_corpus(config([empty], tokenizer_dir, tmp_path / "o"))


def test_manifest_pins_everything(packed):
    m = mf.read_manifest(packed)
    assert m["manifest_sha256"] == mf.manifest_hash(m)
    assert m["conventions"]["first_label_of_example"] == "ignored"
    assert "versions" not in m  # what packed it is a fact about the run: unhashed
    assert set(m["unhashed"]["versions"]) >= {"packcli", "python", "tokenizers", "pyarrow", "numpy", "numba"}
    assert all(len(i["sha256"]) == 64 and i["size"] > 0 for i in m["inputs"])
    assert m["tokenizer"]["sha256"] and m["template"]["text"]
    assert {"capacity", "strategy", "window", "seed", "shuffle", "overlong"} <= set(m["config"])


def _copy_inputs(root: Path, corpus_files) -> tuple[list[str], str, str]:
    """The fixture corpus, tokenizer and a template file, copied under ``root`` (file names kept)."""
    import shutil

    data = root / "data"
    data.mkdir(parents=True)
    inputs = [str(shutil.copy(f, data)) for f in corpus_files]
    tok = shutil.copytree(FIXTURES / "tokenizer", root / "tok")
    template = root / "chat.jinja"
    template.write_text(json.loads((FIXTURES / "tokenizer" / "tokenizer_config.json").read_text())["chat_template"])
    return inputs, str(tok), str(template)


def test_the_same_content_from_two_directories_gives_the_same_hash_and_bytes(tmp_path, corpus_files, monkeypatch):
    """Hashes name content, not places: two copies of the corpus, tokenizer and template in different
    directories (one given by absolute paths, one relative) pack to the same manifest_sha256 and
    byte-identical shards, examples.parquet and rejects.jsonl; verify passes for either, from where
    pack ran, or from elsewhere with --source-root (found by name and sha256)."""
    from conftest import artifact_bytes

    from packcli.verify import verify_artifact

    a_in, a_tok, a_tpl = _copy_inputs(tmp_path / "a", corpus_files)
    b_root = tmp_path / "b" / "deeper" / "still"
    b_in, b_tok, b_tpl = _copy_inputs(b_root, corpus_files)
    a = pack_corpus(PackConfig(inputs=tuple(a_in), tokenizer=a_tok, template=a_tpl, out=tmp_path / "a" / "out",
                               capacity=512, packs_per_shard=8))
    monkeypatch.chdir(b_root)
    rel = [str(Path(p).relative_to(b_root)) for p in b_in]
    b = pack_corpus(PackConfig(inputs=tuple(reversed(rel)), tokenizer="tok", template="chat.jinja", out=Path("out"),
                               capacity=512, packs_per_shard=8))
    assert a.manifest["manifest_sha256"] == b.manifest["manifest_sha256"]
    assert artifact_bytes(tmp_path / "a" / "out", a.manifest) == artifact_bytes(b_root / "out", b.manifest)
    assert a.manifest["template"]["origin"] == "file:chat.jinja"
    assert a.manifest["unhashed"]["provenance"]["tokenizer"] == a_tok
    assert b.manifest["unhashed"]["provenance"]["inputs"][0].startswith("data/")

    assert verify_artifact(b_root / "out").ok  # relative provenance, from the directory pack ran in
    monkeypatch.chdir(tmp_path)
    assert verify_artifact(tmp_path / "a" / "out").ok  # absolute provenance, from anywhere
    # b's relative paths do not resolve from here; --source-root b finds them by path, a by name and sha256
    assert verify_artifact(b_root / "out", source_root=b_root).ok
    moved = tmp_path / "elsewhere"
    (tmp_path / "a").rename(moved)
    with pytest.raises(InputError, match=r"(?s)not found.*`source_root`"):
        verify_artifact(moved / "out")
    report = verify_artifact(moved / "out", source_root=moved)
    assert report.ok, [v.message for c in report.checks for v in c.violations]


def test_every_seam_row_names_its_input_by_index_and_base_name(packed):
    m = mf.read_manifest(packed)
    seam = pq.read_table(packed / SEAM_TABLE_NAME)
    assert seam.schema.field("input").type == "int32"
    names = [i["name"] for i in m["inputs"]]
    assert all(names[k] == s for k, s in zip(seam["input"].to_pylist(), seam["source"].to_pylist()))
    assert names == sorted(names)  # ordered by name (then content), never by directory
    assert {"inputs", "tokenizer", "template"} <= set(m["unhashed"]["provenance"])
    assert "source" not in m["tokenizer"] and "source" not in m["template"] and "path" not in m["inputs"][0]
    assert m["unhashed"]["created"].endswith("+00:00")


RAISING_TEMPLATE = "{{ raise_exception('this template refuses every record') }}"


def test_a_template_that_raises_on_every_record_fails_and_writes_nothing(tmp_path, tokenizer_dir):
    """Nothing to train on is never a success: 'packed 0, rejected 120' fails before anything is written,
    with the reason and its count, whatever --max-reject-fraction allows."""
    from packcli.errors import BudgetError

    template = tmp_path / "raises.jinja"
    template.write_text(RAISING_TEMPLATE)
    out = tmp_path / "o"
    with pytest.raises(BudgetError) as info:
        pack_corpus(config([FIXTURES / "corpus" / "openai.jsonl"], tokenizer_dir, out, template=str(template),
                           loss="all", max_reject_fraction=1.0))
    message = str(info.value)
    assert message.startswith("no example was packed, nothing written: 120 x ")
    assert "this template refuses every record" in message and "(e.g. openai.jsonl:1)" in message
    # nothing packed: raising the budget would not help, so the hint does not offer it
    assert "fix the rejected records" in info.value.hint and "`max_reject_fraction`" not in info.value.hint
    assert not out.exists() and not list((tmp_path / ".packcli-work-o").glob("tmp-*"))


def test_the_cli_fails_a_run_that_packs_nothing_with_exit_1(tmp_path, tokenizer_dir):
    from typer.testing import CliRunner

    from packcli.cli import app

    template = tmp_path / "raises.jinja"
    template.write_text(RAISING_TEMPLATE)
    result = CliRunner().invoke(app, ["pack", str(FIXTURES / "corpus" / "openai.jsonl"), "-t", str(tokenizer_dir),
                                      "--template", str(template), "--loss", "all", "-o", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: no example was packed, nothing written: 120 x")
    assert not (tmp_path / "o").exists()


def test_rejects_beyond_the_budget_fail_with_the_top_reasons(tmp_path, tokenizer_dir):
    """broken.jsonl: 8 of its 20 records are rejected (40%): within the default 0.5, over 0.3."""
    from packcli.errors import BudgetError

    broken = FIXTURES / "corpus" / "broken.jsonl"
    ok = pack_corpus(config([broken], tokenizer_dir, tmp_path / "ok"))
    assert ok.manifest["counts"]["rejected"] == 8 and ok.manifest["counts"]["records"] == 20
    with pytest.raises(BudgetError) as info:
        pack_corpus(config([broken], tokenizer_dir, tmp_path / "o", max_reject_fraction=0.3))
    message = str(info.value)
    assert message.startswith("8 of 20 records (40.0%) were rejected or dropped, more than `max_reject_fraction` 0.3")
    assert message.count(" x ") == 3 and "and 5 other reasons" in message and "(e.g. broken.jsonl:" in message
    assert "fix the rejected records" in info.value.hint and "`max_reject_fraction`" in info.value.hint
    assert "`capacity`" not in info.value.hint  # nothing was dropped as over-long
    assert not (tmp_path / "o").exists()


def test_over_long_drops_count_against_the_budget(tmp_path, corpus_files, tokenizer_dir):
    """A capacity far below the lengths drops most examples: the run fails instead of training on the rest."""
    from packcli.errors import BudgetError

    with pytest.raises(BudgetError, match=r"were rejected or dropped.*x longer than `capacity` \(e\.g\. ") as info:
        pack_corpus(config(corpus_files, tokenizer_dir, tmp_path / "o", capacity=64))
    assert not (tmp_path / "o").exists()
    assert "raise `capacity` (the longest dropped example has 1,188 tokens) or use `overlong='truncate'`" in \
        info.value.hint and "fix the rejected" not in info.value.hint


def test_when_every_example_is_over_long_the_hint_is_the_capacity(tmp_path, tokenizer_dir):
    from packcli.errors import BudgetError

    with pytest.raises(BudgetError, match="no example was packed") as info:
        pack_corpus(config([FIXTURES / "corpus" / "openai.jsonl"], tokenizer_dir, tmp_path / "o", capacity=8))
    assert info.value.hint == ("raise `capacity` (the longest dropped example has 1,188 tokens) or use "
                               "`overlong='truncate'`")


def test_the_summary_says_what_truncation_cut_and_drops_left_out(tmp_path, corpus_files, tokenizer_dir):
    """Over-long examples at capacity 1024: the supervised tokens cut (truncate) or dropped (drop), counted from
    the seam table, in the terminal summary and in --json."""
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from packcli.cli import app

    def run(overlong, out):
        result = CliRunner().invoke(app, ["pack", *corpus_files, "-t", str(tokenizer_dir), "-c", "1024",
                                          "--overlong", overlong, "-o", str(out), *extra])
        assert result.exit_code == 0, result.output
        return result.stdout

    for overlong, fate in (("truncate", "truncated"), ("drop", "dropped")):
        extra = ["--json"]
        lost = json.loads(run(overlong, tmp_path / f"{overlong}.json"))["lost"]
        seams = pq.read_table(tmp_path / f"{overlong}.json" / "examples.parquet").to_pylist()
        mine = [s for s in seams if s["status"] == fate]
        assert lost[fate] == {"examples": len(mine), "tokens": sum(s["original_length"] - s["length"] for s in mine),
                              "supervised_tokens": sum(s["supervised_lost"] for s in mine)}
        assert lost[fate]["examples"] == 3 and lost[fate]["supervised_tokens"] > 0
        other = "dropped" if fate == "truncated" else "truncated"
        assert lost[other] == {"examples": 0, "tokens": 0, "supervised_tokens": 0}
        extra = []
        text = " ".join(run(overlong, tmp_path / overlong).split())
        what = "cut by truncation" if fate == "truncated" else "dropped as over-long"
        assert (f"{what} │ {lost[fate]['supervised_tokens']:,} supervised tokens ({lost[fate]['tokens']:,} tokens, "
                f"3 examples)") in text
