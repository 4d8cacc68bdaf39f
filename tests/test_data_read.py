"""`packcli.data.read`: the loader a trainer reads packs with."""

from __future__ import annotations

import pytest
from forgery import REDIRECT


def test_the_loader_refuses_a_folder_with_strangers(packed_copy):
    from packcli.data import PackReader
    from packcli.errors import ContractError

    (packed_copy / ".huggingface.yaml").write_text(REDIRECT.format(path="data/*.parquet", extra=""))
    with pytest.raises(ContractError, match=r"\.huggingface\.yaml \(a file\) is not part of the artifact"):
        PackReader(packed_copy)
