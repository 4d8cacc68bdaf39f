"""`packcli.verify.bookkeeping` (the ``global`` check): the seam table and the packs are a bijection and
every count adds up, against forgers who re-seal every hash (`packcli.verify.forge`, tests/forgery.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from forgery import caught, manifest_of, roomiest

from packcli.contract import IGNORE_INDEX
from packcli.verify import forge
from packcli.verify.forge import Segment, follow_packs, read_segments, reseal, rewrite_seam, write_segments


def _smuggle(d: Path, ids: list[int], labels: list[int], eid: int) -> None:
    """Add a segment to the roomiest pack with a seam row that repeats a real, packed line."""
    k, r, _ = roomiest(d)
    packs = read_segments(d, k)
    packs[r].append(Segment(eid, ids, labels))
    write_segments(d, k, packs)

    def add_row(rows: list[dict]) -> None:
        twin = next(i for i, row in enumerate(rows) if row["status"] == "packed")
        rows.insert(twin + 1, dict(rows[twin], example_id=eid, original_length=len(ids),
                                   supervised=0, supervised_lost=0))
    rewrite_seam(d, add_row)
    follow_packs(d)
    reseal(d, recount_counts=True)


def test_a_second_row_for_a_line_cannot_smuggle_in_supervised_garbage(packed_copy):
    ids = [random.Random(0).randrange(4, 2000) for _ in range(40)]
    _smuggle(packed_copy, ids, [IGNORE_INDEX] + ids[1:], eid=123_456_789)
    caught(packed_copy, "global", "both name")
    caught(packed_copy, "global", "is not the id of its input, line and copy")


def test_a_trailing_padding_segment_is_not_an_example(packed_copy):
    _, _, room = roomiest(packed_copy)
    _smuggle(packed_copy, [0] * room, [IGNORE_INDEX] * room, eid=987_654_321)
    caught(packed_copy, "global", "both name")


def test_a_whole_pack_duplicated_under_fresh_ids(packed_copy):
    packs = read_segments(packed_copy, 3)
    fresh = {s.example_id: s.example_id + 1 for s in packs[0]}
    packs.append([Segment(fresh[s.example_id], s.input_ids, s.labels) for s in packs[0]])
    write_segments(packed_copy, 3, packs)
    rewrite_seam(packed_copy, lambda rows: rows.extend(dict(r, example_id=fresh[r["example_id"]])
                                                       for r in list(rows) if r["example_id"] in fresh))
    follow_packs(packed_copy)
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "global", "both name")


def test_every_id_renumbered(packed_copy):
    for k in range(len(manifest_of(packed_copy)["shards"])):
        packs = read_segments(packed_copy, k)
        write_segments(packed_copy, k, [[Segment(s.example_id + 1, s.input_ids, s.labels) for s in p] for p in packs])
    rewrite_seam(packed_copy, lambda rows: [r.update(example_id=r["example_id"] + 1) for r in rows])
    reseal(packed_copy, recount_counts=True)
    caught(packed_copy, "global", "is not the id of its input, line and copy")


def test_rejects_jsonl_edited_and_resealed(packed_copy):
    forge.rewrite_rejects(packed_copy, lambda rows: rows[0].update(reason="looked fine to me"))
    reseal(packed_copy)
    caught(packed_copy, "global", "rejects.jsonl line 1 is not what pack writes")


def test_inputs_records_forged(packed_copy):
    reseal(packed_copy, lambda m: m["inputs"][0].update(records=m["inputs"][0]["records"] + 1))
    caught(packed_copy, "global", "inputs[0].records")
    caught(packed_copy, "reconstruction", "inputs[0].records says")


def test_a_seam_row_pointing_nowhere(packed_copy):
    rewrite_seam(packed_copy, lambda rows: next(r for r in rows if r["status"] == "packed").update(row=999))
    reseal(packed_copy)
    caught(packed_copy, "global", "the packs say")


def test_a_reject_re_encoded_with_a_duplicate_key(packed_copy):
    """The same parsed object, other bytes: a reader that keeps the first key sees another reason."""
    path = packed_copy / "rejects.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n")
    first = json.loads(lines[0])
    lines[0] = json.dumps(first)[:-1] + ', "reason": ' + json.dumps(first["reason"]) + "}"
    lines[0] = lines[0].replace('"reason": ' + json.dumps(first["reason"]), '"reason": "looked fine to me"', 1)
    assert json.loads(lines[0]) == first
    path.write_text("\n".join(lines), encoding="utf-8")
    reseal(packed_copy)
    caught(packed_copy, "global", "rejects.jsonl line 1 is not what pack writes")


def test_rejects_jsonl_with_crlf_line_ends_is_not_what_pack_writes(packed_copy):
    """pack ends every line with \\n alone; the same lines ended \\r\\n and re-sealed are other bytes, and verify
    compares bytes (not the lines Python's newline translation would read)."""
    path = packed_copy / "rejects.jsonl"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    reseal(packed_copy)
    caught(packed_copy, "global", "rejects.jsonl line 1 is not what pack writes")
