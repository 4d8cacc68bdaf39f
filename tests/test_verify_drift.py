"""`packcli.verify.drift` (the ``contract_drift`` check): the tokenizer and template reconstruction uses are the
pinned ones, special tokens and the template's origin included."""

from __future__ import annotations

from pathlib import Path

from forgery import caught, manifest_of

from packcli.verify import forge, verify_artifact
from packcli.verify.forge import reseal


def test_bos_token_forged(packed_copy):
    reseal(packed_copy, lambda m: m["tokenizer"].update(bos_token="<|im_start|>"))
    caught(packed_copy, "contract_drift", "tokenizer.bos_token")


def test_a_template_origin_renamed(corpus_files, tokenizer_dir, tmp_path):
    """A file template's origin renamed; the file is still found where pack read it (provenance) and hashes as pinned."""
    import shutil

    from packcli.config import PackConfig
    from packcli.job.run import pack_corpus

    template = tmp_path / "mine.jinja"
    shutil.copy(Path(forge.__file__).parent.parent / "templates" / "chatml.jinja", template)
    out = tmp_path / "packed"
    pack_corpus(PackConfig(inputs=tuple(corpus_files[:1]), tokenizer=str(tokenizer_dir), out=out, capacity=1024,
                           template=str(template)))
    assert manifest_of(out)["template"]["origin"] == "file:mine.jinja" and verify_artifact(out).ok
    clean = tmp_path / "clean"
    shutil.copytree(out, clean)
    reseal(out, lambda m: m["template"].update(origin="file:reviewed.jinja"))
    caught(out, "contract_drift", "template.origin is 'file:reviewed.jinja' (name None), but the template was read from")
    reseal(clean, lambda m: m["template"].update(name="tool_use"))
    report = caught(clean, "contract_drift", "(name 'tool_use'), but the template was read from")
    assert any(v["field"] == "template.name" for c in report["checks"] for v in c["violations"])
