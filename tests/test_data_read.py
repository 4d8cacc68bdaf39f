"""`packcli.data.read`: the loader a trainer reads packs with."""

from __future__ import annotations

import pytest
from conftest import flip_a_byte
from forgery import REDIRECT

from packcli.data import iter_packs


def test_the_loader_refuses_a_folder_with_strangers(packed_copy):
    from packcli.data import PackReader
    from packcli.errors import ContractError

    (packed_copy / ".huggingface.yaml").write_text(REDIRECT.format(path="data/*.parquet", extra=""))
    with pytest.raises(ContractError, match=r"\.huggingface\.yaml \(a file\) is not part of the artifact"):
        PackReader(packed_copy)


def test_a_shard_failing_its_hash_is_refused(packed_copy):
    from packcli.errors import ContractError

    flip_a_byte(packed_copy / "shard-00001.parquet")
    with pytest.raises(ContractError, match="shard-00001.parquet: sha256 differs from the manifest"):
        list(iter_packs(packed_copy))
