"""``verify --render-oracle transformers``: every example rendered again by transformers, not by packcli.

Reconstruction re-runs packcli's own parser and renderer, so a rendering bug (a message field dropped,
list content flattened where the template wanted the list, a system prompt lost) reproduces itself
and passes. The oracle reads each record as pack reads it (pack's own reader for every input kind,
JSONL, Parquet and ``datasets`` tables, and the pinned column mapping: reading is not rendering) and
hands it to transformers as a user's training code would: chat records to ``apply_chat_template(
messages, tools=..., chat_template=<pinned text>, return_assistant_tokens_mask=True)`` with the
messages exactly as the record has them, the record's ``tools`` and ``documents`` (a JSON string of
tools parsed, as TRL does) and its ``chat_template_kwargs``, the template seeing transformers' own
globals with ``strftime_now`` on the pinned ``template_date``; other records to the tokenizer itself
with its offsets; both on a fresh ``PreTrainedTokenizerFast`` of the pinned tokenizer file. Its own
reading of a record is deliberately small: ShareGPT turns are renamed (``from``/``value`` to
``role``/``content``, a top-level ``system`` prepended), and records that need packcli's own
conventions to mean anything (a per-turn ``weight``, LLaMA-Factory's ``function_call``/``observation``
turns) are not judged: the check's note counts them, and a check that judged no record is not ok.

The tokens and labels must equal the pack span token for token (a dropped example's length and token
hash the seam table's), under the contract's rules applied to transformers' output: the assistant mask
under the loss policy, the first label ignored; ``last-assistant`` keeps the final assistant message's
tokens, from where transformers' own render of the messages before it parts from the full text (two
assistant messages in a row are two turns, however their masks touch); a token is supervised for the
characters of a generation block it holds, so an empty block supervises nothing, where transformers'
mask also marks a token that straddles an empty block's position (docs/chat-data.md, "Empty
generation blocks"). A difference names the record and the first differing token.

Sampling (``--sample N``) draws records with a fixed seed, so a re-run checks the same ones.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, time
from pathlib import Path

import numpy as np

from packcli.artifact.manifest import Manifest
from packcli.contract import IGNORE_INDEX, IN_PACKS, token_hash
from packcli.errors import InputError
from packcli.ingest import FieldMap, read_source
from packcli.ingest.messages import SHAREGPT_ROLES
from packcli.job.chunks import SplitRule, chunk_labels, pinned_rule
from packcli.tokenizer.ends import text_ends
from packcli.tokenizer.load import LoadedTokenizer
from packcli.verify.locate import locate_input
from packcli.verify.packs import PackIndex
from packcli.verify.report import CheckResult, Violation

ORACLES = ("transformers",)
SAMPLE_SEED = 0


ORACLE_FUNCTIONS = ("_compile_jinja_template", "render_jinja_template")


def require_oracle(name: str) -> None:
    """Refuse an oracle this packcli does not have, or whose library is not installed (before any work).

    Raises:
        InputError: an unknown oracle, transformers missing, or a transformers without the functions
            the oracle renders through (`ORACLE_FUNCTIONS`).
    """
    import importlib.util

    if name not in ORACLES:
        raise InputError(f"`render_oracle` {name!r}: not an oracle ({', '.join(ORACLES)})")
    if importlib.util.find_spec("transformers") is None:
        raise InputError("`render_oracle='transformers'` needs transformers, which is not installed",
                         "pip install transformers (it is in packcli's dev extra)")
    import transformers
    from transformers.utils import chat_template_utils

    # The oracle renders through these two, as apply_chat_template does; one is private, so a release
    # may rename it: say so before any work rather than fail inside the check.
    missing = [name for name in ORACLE_FUNCTIONS if not hasattr(chat_template_utils, name)]
    if missing:
        raise InputError(f"`render_oracle='transformers'` renders through {' and '.join(missing)} of "
                         f"transformers.utils.chat_template_utils, which transformers {transformers.__version__} "
                         "does not have", "install a transformers release that has them, or leave out `render_oracle`")


class NotJudged(Exception):
    """A record whose meaning rests on packcli's own conventions, which transformers has no notion of."""


def check_render_oracle(manifest: Manifest, rows: dict[str, list], packs: PackIndex,
                        tokenizer: LoadedTokenizer, result: CheckResult, *, source_root: Path | None,
                        sample: int | None = None) -> None:
    """Render the chosen records with transformers and compare them with the artifact.

    Args:
        rows: the seam table's columns (`packcli.verify.columns.SeamColumns`; each reads as a list).
        sample: check this many records, drawn with a fixed seed (None: every record in the artifact).

    Raises:
        InputError: transformers is not installed, or a source cannot be found.
    """
    oracle = _Oracle(manifest, tokenizer)
    chosen = [i for i, status in enumerate(rows["status"]) if status != "rejected"]
    if sample is not None and sample < len(chosen):
        picked = np.random.Generator(np.random.PCG64(SAMPLE_SEED)).choice(len(chosen), size=sample, replace=False)
        chosen = [chosen[j] for j in sorted(picked.tolist())]
    by_input: dict[int, dict[int, list[int]]] = defaultdict(dict)
    for i in chosen:
        by_input[rows["input"][i]].setdefault(rows["line"][i], []).append(i)  # its copies and chunks
    rule = pinned_rule(manifest.config)
    fields = FieldMap.of(manifest.config.fields)
    not_judged: dict[str, int] = defaultdict(int)
    with oracle.on_pinned_date():
        for k, wanted in sorted(by_input.items()):
            for line, payload in read_source(locate_input(manifest, k, source_root)):  # as pack reads it
                mine = wanted.get(line)
                if mine is None:
                    continue
                i = mine[0]
                loc = dict(example_id=rows["example_id"][i], source=rows["source"][i], line=line)
                try:
                    ids, labels = oracle.render(fields.apply(_record(payload)))
                except NotJudged as why:
                    not_judged[str(why)] += 1
                    continue
                except Exception as exc:  # noqa: BLE001 - any failure of transformers' rendering is the finding
                    result.checked += 1
                    result.fail(Violation(f"transformers cannot render this record ({type(exc).__name__}: {exc}); "
                                          f"packcli made it {rows['status'][i]}", **loc))
                    continue
                result.checked += 1
                for i in mine:
                    chunked = sum(rows["example_id"][j] == rows["example_id"][i] for j in mine) > 1
                    _compare(rows, i, ids, labels, packs, rule, result, dict(loc, example_id=rows["example_id"][i]),
                             chunked)
    if not_judged:
        result.note = "not judged (transformers has no such notion): " + ", ".join(
            f"{count} with {why}" for why, count in sorted(not_judged.items()))
    if chosen and not result.checked:
        result.skipped = (f"no record could be judged: {len(chosen)} chosen, none rendered by transformers "
                          f"({result.note or 'none found in the sources'})")


def _record(payload: bytes | dict) -> dict:
    """A record as pack's reader hands it over: a JSONL line's bytes decoded, a table row as it is.

    Raises:
        ValueError: the line is not a JSON object (such a record is rejected, so never chosen).
    """
    record = payload if isinstance(payload, dict) else json.loads(payload.decode("utf-8"))
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__}, not an object")
    return record


class _Oracle:
    """transformers' rendering of one record under the artifact's pinned template and policy."""

    def __init__(self, manifest: Manifest, tokenizer: LoadedTokenizer) -> None:
        require_oracle("transformers")
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerFast

        pinned = manifest.tokenizer
        # A fresh tokenizer object from the pinned file (drift has checked its sha256): no state shared with packcli.
        self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer.tokenizer.to_str()),
                                                 bos_token=pinned.bos_token, eos_token=pinned.eos_token)
        self.template = manifest.template.text
        self.policy = manifest.loss_policy
        self.input_format = manifest.config.input_format
        self.eos = pinned.eos_token or ""
        config = manifest.config
        # A text document's BOS and EOS are the choice packcli resolved (`packcli.tokenizer.ends`, its own
        # tests compare it with tokenizers); transformers tokenizes what they make.
        self.text_ends = text_ends(tokenizer, config.text_bos, config.text_eos)
        self.moment = datetime.combine(date.fromisoformat(manifest.config.template_date), time())

    @contextmanager
    def on_pinned_date(self) -> Iterator[None]:
        """transformers' own template globals, with ``strftime_now`` on the pinned date instead of today.

        A callable passed as a template variable reaches the template as an inert string (transformers
        rebuilds every variable from plain JSON types), so the date can only be pinned where transformers
        defines the global: on the environment it compiles this template into, restored afterwards.
        """
        from transformers.utils.chat_template_utils import _compile_jinja_template

        env = _compile_jinja_template(self.template).environment
        before = env.globals["strftime_now"]
        env.globals["strftime_now"] = self.moment.strftime
        try:
            yield
        finally:
            env.globals["strftime_now"] = before

    def render(self, record: dict) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, labels) of one record, as the artifact's contract defines them.

        Raises:
            NotJudged: the record means something only under packcli's own conventions.
        """
        kind = self._kind(record)
        if kind in ("messages", "sharegpt"):
            return self._chat(record, kind)
        if kind == "prompt-completion":
            prompt, completion = record["prompt"], record["completion"]
            policy = "completion" if self.policy == "auto" else self.policy
            return self._text(prompt + completion + self.eos, 0 if policy == "all" else len(prompt))
        policy = "all" if self.policy == "auto" else self.policy
        if policy != "all":
            raise ValueError(f"loss policy {policy} does not apply to a text record")
        return self._text(self.text_ends.wrap(record["text"]), 0, self.text_ends.add_special_tokens)

    def _kind(self, record: dict) -> str:
        if self.input_format != "auto":
            return self.input_format
        for key, kind in (("messages", "messages"), ("conversations", "sharegpt"), ("prompt", "prompt-completion"),
                          ("completion", "prompt-completion"), ("text", "text")):
            if key in record:
                return kind
        raise ValueError("no known field")

    def _chat(self, record: dict, kind: str) -> tuple[np.ndarray, np.ndarray]:
        turns = record["messages"] if kind == "messages" else record["conversations"]
        if any(isinstance(turn, dict) and "weight" in turn for turn in turns):
            raise NotJudged("a per-turn weight")
        if kind == "sharegpt":  # the one renaming: ShareGPT's turns as transformers' messages
            if any(str(turn.get("from")).lower() in ("function_call", "observation") for turn in turns):
                raise NotJudged("LLaMA-Factory's function_call/observation turns")
            system = [{"role": "system", "content": record["system"]}] if record.get("system") else []
            messages = system + [{"role": SHAREGPT_ROLES[turn["from"].lower()], "content": turn["value"]}
                                 for turn in turns]
        else:
            messages = turns
        extra = dict(record.get("chat_template_kwargs") or {})
        for key in ("tools", "documents"):
            if record.get(key) is not None:
                value = record[key]
                extra[key] = json.loads(value) if key == "tools" and isinstance(value, str) else value  # as TRL
        out = self.tokenizer.apply_chat_template(
            messages, chat_template=self.template, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True, add_generation_prompt=False, **extra)
        ids = np.asarray(out["input_ids"], dtype=np.int32)
        mask = np.asarray(out["assistant_masks"], dtype=bool)
        policy = "assistant" if self.policy == "auto" else self.policy
        if policy == "all":
            return ids, _labels(ids, np.ones_like(mask))
        if policy not in ("assistant", "last-assistant"):
            raise ValueError(f"loss policy {policy} does not apply to a chat record")
        text = self.tokenizer.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                                  add_generation_prompt=False, **extra)
        offsets = np.asarray(self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
                             ["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        mask &= ~_only_empty_blocks(self._blocks(messages, extra), offsets)
        if policy == "last-assistant":
            last = max(i for i, m in enumerate(messages) if m.get("role") == "assistant")
            before = self.tokenizer.apply_chat_template(messages[:last], chat_template=self.template, tokenize=False,
                                                        add_generation_prompt=False, **extra) if last else ""
            mask &= offsets[:, 1] > len(os.path.commonprefix([before, text]))  # the final assistant message on
        return ids, _labels(ids, mask)

    def _blocks(self, messages: list, extra: dict) -> list[tuple[int, int]]:
        """The generation blocks' character spans, as transformers' renderer finds them."""
        from transformers.utils.chat_template_utils import render_jinja_template

        kwargs = {**self.tokenizer.special_tokens_map, **extra}
        tools, documents = kwargs.pop("tools", None), kwargs.pop("documents", None)
        _, indices = render_jinja_template(conversations=[messages], tools=tools, documents=documents,
                                           chat_template=self.template, return_assistant_tokens_mask=True, **kwargs)
        return [tuple(span) for span in indices[0]]

    def _text(self, text: str, supervised_from: int, special: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Tokens of ``text`` with special tokens added (``special``); supervised: those overlapping
        ``text[supervised_from:]``, and the added ones when that is the whole text."""
        enc = self.tokenizer(text, add_special_tokens=special, return_offsets_mapping=True,
                             return_special_tokens_mask=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int32)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
        added = np.asarray(enc["special_tokens_mask"], dtype=bool)
        mask = (offsets[:, 0] < len(text)) & (offsets[:, 1] > supervised_from)
        if supervised_from == 0:
            mask |= added
        return ids, _labels(ids, mask)


def _only_empty_blocks(blocks: list[tuple[int, int]], offsets: np.ndarray) -> np.ndarray:
    """Tokens that hold no character of a generation block but straddle an empty one's position: transformers'
    mask marks them, the contract's rule (the characters a block holds) does not."""
    straddle = np.zeros(len(offsets), dtype=bool)
    holds = np.zeros(len(offsets), dtype=bool)
    for start, end in blocks:
        if start == end:
            straddle |= (offsets[:, 0] < start) & (offsets[:, 1] > start)
        else:
            holds |= (offsets[:, 0] < end) & (offsets[:, 1] > start)
    return straddle & ~holds


def _labels(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    labels = np.where(mask, ids, IGNORE_INDEX).astype(np.int32)
    if len(labels):
        labels[0] = IGNORE_INDEX  # the contract: an example's first label is never a target
    return labels


def _compare(rows: dict[str, list], i: int, ids: np.ndarray, labels: np.ndarray, packs: PackIndex,
             rule: SplitRule, result: CheckResult, loc: dict, chunked: bool) -> None:
    """Row ``i`` against transformers' ``ids`` and ``labels`` of its record: a whole example, its first
    ``capacity`` tokens when truncated, or the chunk at ``chunk_start`` masked as a chunk is (``chunked``:
    the row is one of a split example's)."""
    status, k, start = rows["status"][i], rows["chunk"][i], rows["chunk_start"][i]
    if status not in IN_PACKS:  # dropped: in no pack; its full length and tokens (a chunk's: its own) are pinned
        mine = ids[start:start + rule.capacity] if chunked else ids
        if len(ids) != rows["original_length"][i] or token_hash(mine) != rows["token_hash"][i]:
            result.fail(Violation(f"transformers renders {len(ids)} tokens (token_hash {token_hash(mine)}); the "
                                  f"dropped {'chunk' if chunked else 'example'} has {rows['original_length'][i]} "
                                  f"({rows['token_hash'][i]})", **loc))
        return
    where = (rows["shard"][i], rows["row"][i], rows["offset"][i], rows["length"][i])
    keep = len(ids) if status == "packed" else min(rule.capacity, len(ids) - start)  # truncated: chunk 0
    ids, labels = ids[start:start + keep], chunk_labels(labels, k, start, keep, rule)
    kept = packs.digests_at(rows["example_id"][i], where)
    if kept is not None and keep == where[3] and (token_hash(ids), token_hash(labels)) == kept:
        return  # the digests of the pack's span agree: no need to read it again
    span = packs.tokens(*where)
    if span is None:
        return  # integrity or global reported it
    for what, got, want in (("input_ids", span[0], ids), ("labels", span[1], labels)):
        if len(got) == len(want) and np.array_equal(got, want):
            continue
        n = min(len(got), len(want))
        differ = np.flatnonzero(got[:n] != want[:n])
        at = int(differ[0]) if len(differ) else n
        result.fail(Violation(f"{what} differ from transformers' rendering at token {at} (pack "
                              f"{got[at:at + 3].tolist()}, transformers {want[at:at + 3].tolist()}; lengths "
                              f"{len(got)} vs {len(want)})", shard=where[0], row=where[1], field=what, **loc))
        return
