"""Tokenize rendered text behind a pluggable backend, turn character spans into labels, guard exactness.

    load.py       find and load a tokenizer; choose the backend (`load_tokenizer`)
    hub.py        a Hub name (ORG/NAME, hf:ORG/NAME@REV) resolved in the local Hugging Face cache, offline
    types.py      `Encoded`, `EncodedBatch`, the `TokenizerBackend` protocol, the mismatch error
    reference.py  HF ``tokenizers``, and the labels formula (`labels_from_spans`)
    guard.py      `encode_batch`: encode with the chosen backend, cross-check a sample with the reference
    fast/         fastokens ids with offsets recovered from the ids (docs/tokenizer-backends.md)
"""

from packcli.tokenizer.guard import encode_batch
from packcli.tokenizer.load import LoadedTokenizer, load_tokenizer
from packcli.tokenizer.types import Encoded, EncodedBatch, TokenizerMismatchError

__all__ = ["Encoded", "EncodedBatch", "LoadedTokenizer", "TokenizerMismatchError", "encode_batch", "load_tokenizer"]
