"""`packcli.contract`: the names, ids and hashes every artifact shares."""

from __future__ import annotations


def test_example_ids_differ_by_occurrence_record_and_copy_and_never_by_place():
    from packcli.contract import example_id

    sha = "ab" * 32
    ids = {example_id(sha, occ, rec, copy) for occ in range(3) for rec in range(50) for copy in range(3)}
    assert len(ids) == 3 * 50 * 3 and all(0 <= i < 2**63 for i in ids)
    assert example_id(sha, 0, 7) == example_id(sha, 0, 7, 0)  # a record's first copy is the record's id
