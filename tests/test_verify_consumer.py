"""verify --consumer: the real consumers' collation on the packs, and a control for every guard."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packcli.cli import app
from packcli.data import iter_packs
from packcli.verify.consumer import Seen, check_batch, check_consumer

pytestmark = pytest.mark.torch  # TRL and transformers' collators build torch tensors


def without_seq_lengths(packed, tmp_path):
    """A copy whose shards lack seq_lengths, as a contract-1 artifact or a hand-made export has them."""
    from packcli.verify.faults import _reseal

    copy = tmp_path / "no-seq-lengths"
    shutil.copytree(packed, copy)
    for shard in copy.glob("shard-*.parquet"):
        table = pq.read_table(shard)
        pq.write_table(table.drop_columns(["seq_lengths"]), shard, compression="zstd")
    _reseal(copy)
    return copy


def test_trl_keeps_the_seams_and_leaks_without_seq_lengths(packed, tmp_path):
    pytest.importorskip("trl")
    good = check_consumer(packed, "trl")
    assert good.ok and good.result.checked > 1 and good.advice is None, good.result.violations
    assert "seq_lengths" in good.runs and good.versions["trl"]
    bad = check_consumer(without_seq_lengths(packed, tmp_path), "trl")  # the negative control
    assert not bad.ok
    messages = " ".join(v.message for v in bad.result.violations)
    assert "positions do not restart at every seam" in messages and "varlen boundaries" in messages
    assert "seq_lengths" in bad.advice and "rebuild with contract >= 2: packcli pack" in bad.advice


def test_hf_flattening_leaks_on_rows_and_not_on_examples(packed):
    pytest.importorskip("transformers")
    from transformers import DataCollatorWithFlattening

    from packcli.data import split_examples

    report = check_consumer(packed, "hf")
    assert not report.ok and "restarts positions per feature" in report.advice
    # fed one example per feature, as the advice says, the same collator keeps every seam
    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True)
    for pack in list(iter_packs(packed))[:4]:
        out = collator(split_examples(pack))
        seen = Seen(*(np.asarray(out[k]).reshape(-1) for k in ("input_ids", "labels", "position_ids", "cu_seq_lens_q")))
        assert check_batch(seen, [pack], "pack") == []


def test_packcli_loader_keeps_the_seams(packed):
    report = check_consumer(packed, "packcli", batch_packs=3)
    assert report.ok and report.result.checked == -(-len(list(iter_packs(packed))) // 3)


def _good(pack) -> Seen:
    from packcli.verify.consumer import expected_batch

    ids, labels, positions, seams = expected_batch([pack])
    return Seen(ids, labels.copy(), positions.copy(), seams.copy())


def test_each_guard_catches_its_failure(packed):
    pack = next(p for p in iter_packs(packed) if len(p.cu_seqlens) > 3)
    good = _good(pack)
    assert check_batch(good, [pack], "b") == []
    n, seam = len(pack.input_ids), int(pack.cu_seqlens[1])
    cases = {
        "truncated": (Seen(good.input_ids[:n - 5], good.labels[:n - 5], good.position_ids[:n - 5], None),
                      "tokens truncated or changed"),
        "no positions": (Seen(good.input_ids, good.labels, None, good.boundaries), "no position_ids"),
        "positions continue": (Seen(good.input_ids, good.labels, np.arange(n), good.boundaries),
                               "positions do not restart at every seam"),
        "one segment": (Seen(good.input_ids, good.labels, good.position_ids, np.array([0, n])), "varlen boundaries"),
        "seam label": (Seen(good.input_ids, np.where(np.arange(n) == seam, good.input_ids, good.labels),
                            good.position_ids, good.boundaries), "first label of example 1"),
        "padding label": (Seen(np.append(good.input_ids, 0), np.append(good.labels, 7), np.append(good.position_ids, 0),
                               np.append(good.boundaries, n + 1)), "padding tokens carry a label"),
    }
    cases["attention mask"] = (Seen(good.input_ids, good.labels, good.position_ids, good.boundaries, attention_mask=True),
                               "an attention_mask is passed")
    sup = np.flatnonzero(good.labels != -100)
    masked = good.labels.copy()
    masked[sup[-1]] = -100
    cases["supervision lost"] = (Seen(good.input_ids, masked, good.position_ids, good.boundaries), "masked by the consumer")
    for name, (seen, expect) in cases.items():
        problems = check_batch(seen, [pack], "b")
        assert any(expect in p for p in problems), (name, problems)
    # trailing padding as TRL's pad_to_multiple_of adds it is not a violation
    padded = Seen(np.append(good.input_ids, [0, 0]), np.append(good.labels, [-100, -100]),
                  np.append(good.position_ids, [0, 1]), np.append(good.boundaries, n + 2))
    assert check_batch(padded, [pack], "b") == []


def test_cli_consumer_exit_codes(packed, tmp_path):
    pytest.importorskip("trl")
    runner = CliRunner()
    ok = runner.invoke(app, ["verify", str(packed), "--no-reconstruct", "--consumer", "trl", "--consumer", "packcli",
                             "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.output)
    assert [c["consumer"] for c in data["consumers"]] == ["trl", "packcli"] and all(c["ok"] for c in data["consumers"])
    leak = runner.invoke(app, ["verify", str(without_seq_lengths(packed, tmp_path)), "--no-reconstruct",
                               "--consumer", "trl", "--consumer-packs", "4"])
    assert leak.exit_code == 1
    assert "consumer:trl" in leak.output and "why and what to change" in leak.output
    bad = runner.invoke(app, ["verify", str(packed), "--consumer", "axolotl"])
    assert bad.exit_code == 2


CARD_YAML = """configs:
- config_name: default
  data_files:
  - split: train
    path: "{path}"
{extra}"""


def _beside_the_card(packed, tmp_path, path: str = "shard-*.parquet", extra: str = "", poison: bool = False):
    """A copy with a .huggingface.yaml beside the card (nothing pinned touched): what load_dataset(OUT) merges in."""
    copy = tmp_path / "yaml"
    shutil.copytree(packed, copy)
    (copy / ".huggingface.yaml").write_text(CARD_YAML.format(path=path, extra=extra))
    if poison:  # the first pack supervises every token
        table = pq.read_table(copy / "shard-00000.parquet")
        rows = table.to_pylist()
        rows[0]["labels"] = list(rows[0]["input_ids"])
        (copy / "data").mkdir()
        pq.write_table(pq.read_table(copy / "shard-00000.parquet").from_pylist(rows, schema=table.schema),
                       copy / "data" / "train.parquet")
    return copy


@pytest.mark.parametrize("consumer", ["trl", "hf"])
@pytest.mark.parametrize(("options", "phrase"), [
    (dict(path="data/*.parquet", poison=True), "labels the packs do not supervise are supervised by the consumer"),
    (dict(extra="  columns: [input_ids, seq_lengths, position_ids]\n"),
     "labels the packs do not supervise are supervised by the consumer"),
    (dict(extra="  filters: [[num_tokens, '>', 1000]]\n"), "rows, the shards the manifest lists hold"),
], ids=["redirect", "columns-without-labels", "filters"])
def test_the_consumer_reads_what_load_dataset_reads(consumer, options, phrase, packed, tmp_path):
    """Each file changes what load_dataset(OUT) gives a trainer; the consumer check reads it the same way."""
    pytest.importorskip("trl" if consumer == "trl" else "transformers")
    report = check_consumer(_beside_the_card(packed, tmp_path, **options), consumer)
    messages = [v.message for v in report.result.violations]
    assert not report.ok and any(phrase in m for m in messages), messages
    if "columns" in options.get("extra", ""):
        assert "gives no labels column" in report.advice


def test_trl_without_labels_trains_on_every_turn(packed, tmp_path):
    """The same collator TRL runs: with labels left out it makes labels of input_ids (more supervised labels)."""
    pytest.importorskip("trl")
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from packcli.verify.consumer import loaded_dataset, trainer_columns, trl_signature_columns

    narrowed = _beside_the_card(packed, tmp_path, extra="  columns: [input_ids, seq_lengths]\n")
    pack = next(iter_packs(packed))
    with loaded_dataset(narrowed) as ds:
        row = trainer_columns(ds, trl_signature_columns())[0]
    assert sorted(row) == ["input_ids", "seq_lengths"]
    out = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)([row])
    assert int((out["labels"] != -100).sum()) > pack.num_supervised


def test_packcli_loader_refuses_what_load_dataset_would_misread(packed, tmp_path):
    report = check_consumer(_beside_the_card(packed, tmp_path, extra="  columns: [input_ids]\n"), "packcli")
    assert not report.ok
    assert "packcli cannot read the artifact: ContractError" in report.result.violations[0].message
    assert ".huggingface.yaml (a file) is not part of the artifact" in report.result.violations[0].message
