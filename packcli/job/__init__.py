"""The ``pack`` job (`pack_corpus`): see `packcli.job.run` for its stages and design."""

from packcli.job.run import PackSummary, pack_corpus

__all__ = ["PackSummary", "pack_corpus"]
