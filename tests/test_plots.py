"""`packcli.plots`: the fill histogram holds every pack, and token axes read as tokens."""

from __future__ import annotations

import numpy as np
import pytest


def test_every_pack_is_in_the_fill_histogram():
    """The least-filled packs too (a pack at 0.14 among packs one token short of full), each pile resolved."""
    from packcli.plots import unused_slot_bins

    capacity = 4096
    fill = np.concatenate([np.full(300, 1.0), np.full(40, 1 - 1 / capacity), np.full(9, 1 - 30 / capacity), [0.14]])
    unused = np.rint((1 - fill) * capacity)
    counts = np.histogram(unused, unused_slot_bins(unused))[0]
    assert counts.sum() == len(fill)  # every pack, the emptiest included
    assert counts[0] == 300 and counts[1] == 40 and counts[-1] + counts[-2] >= 1  # full, one short, the 0.14 pack
    assert np.count_nonzero(counts) == 4


@pytest.mark.parametrize("tokens,label", [(3, "3"), (512, "512"), (1003, "1003"), (1024, "1k"), (1536, "1.5k"),
                                          (4096, "4k"), (32768, "32k"), (1 << 20, "1M"), (2.26, "2.3")])
def test_token_axes_read_as_tokens(tokens, label):
    from packcli.plots import token_label

    assert token_label(tokens) == label
