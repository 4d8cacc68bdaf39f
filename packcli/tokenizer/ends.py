"""What a plain-text document starts and ends with: its BOS and EOS, as the tokenizer's conventions say.

A tokenizer states its convention in two places: its post-processor (what ``encode(text)`` adds: Llama
3's ``<|begin_of_text|>``, nothing for Qwen3) and ``tokenizer_config.json``'s ``bos_token`` and
``eos_token``. ``--text-bos`` and ``--text-eos`` (`packcli.choices.AddToken`) choose from them:

    choice   BOS                                              EOS
    auto     what the post-processor adds (none if nothing)   what the post-processor adds, else eos_token
    yes      the post-processor's, else bos_token            the post-processor's, else eos_token
    no       none                                             none

A token the post-processor adds is left to it (``add_special_tokens=True``), so the ids are exactly
what ``tokenizers`` gives for ``encode(text)``; only when the post-processor adds one that was not
asked for is it switched off and the wanted one written as its text (a special token, encoded as one
id). A token it does not add is written as text. ``auto`` is what packcli always did for a text record
(text, then the EOS) on tokenizers whose post-processor adds no EOS; on one that does, the EOS is
no longer doubled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packcli.choices import AddToken
from packcli.errors import InputError

if TYPE_CHECKING:
    from packcli.tokenizer.load import LoadedTokenizer

PROBE = "a"  # any text: what the post-processor adds around it is what it adds around every text


@dataclass(frozen=True)
class TextEnds:
    """How a text document is encoded: ``prefix + text + suffix``, with the post-processor's own tokens
    (``add_special_tokens``) or without."""

    prefix: str = ""
    suffix: str = ""
    add_special_tokens: bool = True

    def wrap(self, text: str) -> str:
        return self.prefix + text + self.suffix


def post_processor_ends(tokenizer: object) -> tuple[list[int], list[int]]:
    """The ids a ``tokenizers.Tokenizer``'s post-processor puts before and after a text: ([BOS], []) for
    Llama 3, ([], []) for Qwen3. Found by encoding a probe with and without special tokens."""
    plain = tokenizer.encode(PROBE, add_special_tokens=False).ids
    full = tokenizer.encode(PROBE, add_special_tokens=True).ids
    for at in range(len(full) - len(plain) + 1):
        if full[at:at + len(plain)] == plain:
            return full[:at], full[at + len(plain):]
    return [], []  # the post-processor rewrites the text's own ids: leave it to itself


def text_ends(tok: LoadedTokenizer, bos: AddToken | str = AddToken.auto, eos: AddToken | str = AddToken.auto
              ) -> TextEnds:
    """The `TextEnds` the choices give with this tokenizer (the table in the module docstring).

    Raises:
        InputError: ``yes`` for a token the tokenizer neither adds nor names (Qwen3 has no ``bos_token``).
    """
    bos, eos = AddToken(bos), AddToken(eos)
    added_before, added_after = post_processor_ends(tok.tokenizer)
    keep_before = bool(added_before) and bos is not AddToken.no
    keep_after = bool(added_after) and eos is not AddToken.no
    prefix = _named(tok, "bos_token", "`text_bos`") if bos is AddToken.yes and not added_before else ""
    suffix = ""
    if eos is not AddToken.no and not added_after:
        suffix = _named(tok, "eos_token", "`text_eos`") if eos is AddToken.yes else (tok.eos_token or "")
    if (keep_before or not added_before) and (keep_after or not added_after):
        return TextEnds(prefix, suffix, add_special_tokens=True)
    # The post-processor adds a token that was not asked for: encode without it, the wanted ones as text.
    return TextEnds(_as_text(tok, added_before) if keep_before else prefix,
                    _as_text(tok, added_after) if keep_after else suffix, add_special_tokens=False)


def _named(tok: LoadedTokenizer, name: str, flag: str) -> str:
    value = getattr(tok, name)
    if not value:
        raise InputError(f"{flag} yes: the tokenizer {tok.source} adds no such token and names no {name}",
                         f"use {flag} auto or no, or a tokenizer_config.json that names its {name}")
    return value


def _as_text(tok: LoadedTokenizer, ids: list[int]) -> str:
    """The text of special tokens, checked to encode back to exactly those ids."""
    text = "".join(tok.tokenizer.id_to_token(i) for i in ids)
    if tok.tokenizer.encode(text, add_special_tokens=False).ids != ids:
        raise InputError(f"the tokenizer {tok.source} adds tokens {ids} that its text {text!r} does not encode to",
                         "use `text_bos` and `text_eos` both auto")
    return text
