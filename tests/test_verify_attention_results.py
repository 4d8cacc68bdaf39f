"""`packcli.verify.attention.results`: a pack's arrays are checked where they are made, and a missing torch is
named with the extra that installs it (neither needs torch)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from packcli.verify.attention.results import PackArrays, TorchMissingError, require_torch


def test_pack_arrays_validate_cu_seqlens():
    with pytest.raises(ValueError, match="cu_seqlens"):
        PackArrays(np.zeros(5, np.int32), np.zeros(5, np.int32), np.zeros(5, np.int32), np.array([0, 3, 4], np.int32))


def test_missing_torch_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(TorchMissingError, match=r"pip install 'packcli\[torch\]'"):
        require_torch()
