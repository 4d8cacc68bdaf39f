"""packcli: pack JSONL chat data into leak-free training buffers, and prove it.

The public API is importable without paying for numba, pyarrow or tokenizers up front: names are
resolved on first use, so ``packcli --help`` stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.6.0"

_EXPORTS = {
    "pack_lengths": "packcli.pack",
    "PackPlan": "packcli.pack",
    "PackMetrics": "packcli.pack",
    "PackConfig": "packcli.config",
    "pack_corpus": "packcli.job.run",
    "load_tokenizer": "packcli.tokenizer",
    "load_template": "packcli.chat",
    "verify_artifact": "packcli.verify",
    "iter_packs": "packcli.data",
    "collate_varlen": "packcli.data",
    "collate_flattening": "packcli.data",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'packcli' has no attribute {name!r}")
