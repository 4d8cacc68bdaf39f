"""Mixtures (``--mix``): how many copies of each usable record go into the packs.

``--mix a.jsonl=0.7,b.parquet=0.3`` asks for proportions: the mixture has as many examples as the
mixed sources have usable records (packed or truncated, after rejects, ``--dedupe`` and the over-long
policy), of which 70% come from ``a.jsonl`` and 30% from ``b.parquet``. ``--mix a.jsonl=3x,b.parquet=0.5x``
asks for repeats: every usable record of ``a.jsonl`` three times (three epochs of it), half of
``b.parquet``'s records once. Proportions and repeats do not mix in one run; with repeats, a source
that ``--mix`` does not name counts ``1x``, with proportions every source must be named.

How counts become copies (``draw_copies``), per source: its target ``t`` examples (repeats:
``round(r * n)``; proportions: ``p * total`` rounded by largest remainder so the targets add up to the
total exactly), then every usable record gets ``t // n`` copies and ``t % n`` of them, drawn without
replacement, one more. The draw is seeded by ``--seed`` and the source's place among the sources,
so the same inputs and flags give the same copies; ``verify`` recomputes it from the manifest and the
seam table and checks each record has exactly its number of copies. The copies are then shuffled and
packed like any other examples (docs/mixtures.md compares this with axolotl and MosaicML streaming).

A source, for ``--mix``, is what a key names: an input argument as given (a glob names every file it
matched: they are mixed as one source), an input's path, or an input's file name when no other input
has it. Everything recorded in the manifest is location-free: each source as the indices of its
inputs, with its weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from packcli.errors import InputError

PROPORTION, REPEAT = "proportion", "repeat"
SEED_SALT = 0x6D6978  # "mix": keeps these draws apart from the packer's shuffles of the same --seed
MAX_REPEAT = 1_000_000.0  # a repeat above this is no training set (and its count would overflow the arithmetic)


@dataclass(frozen=True)
class MixSpec:
    """``--mix`` as written: ``(key, weight)`` pairs, all proportions or all repeat factors."""

    by: str
    weights: tuple[tuple[str, float], ...]

    def __str__(self) -> str:
        return ",".join(f"{k}={describe(self.by, w)}" for k, w in self.weights)


@dataclass(frozen=True)
class MixSource:
    """One source of a resolved mixture: its inputs (indices into the run's sorted inputs), weight, key."""

    inputs: tuple[int, ...]
    weight: float
    key: str


@dataclass(frozen=True)
class Mixture:
    """A resolved mixture: every input in exactly one source."""

    by: str
    sources: tuple[MixSource, ...]

    def to_manifest(self) -> dict:
        """The hashed, location-free form: the mode, and each source's inputs and weight."""
        return {"by": self.by, "sources": [{"inputs": list(s.inputs), "weight": s.weight} for s in self.sources]}

    def renumbered(self, new: Sequence[int]) -> Mixture:
        """The same mixture with input ``i`` renumbered ``new[i]`` (sources kept in input order)."""
        sources = (MixSource(tuple(sorted(new[i] for i in s.inputs)), s.weight, s.key) for s in self.sources)
        return Mixture(self.by, tuple(sorted(sources, key=lambda s: s.inputs[0])))

    @classmethod
    def from_manifest(cls, data: dict) -> Mixture:
        """From the manifest's ``config.mix`` (check it with `manifest_problems` first: it is not trusted)."""
        return cls(data["by"], tuple(MixSource(tuple(s["inputs"]), float(s["weight"]), "") for s in data["sources"]))


def manifest_problems(data: object, num_inputs: int) -> list[str]:
    """What makes a manifest's ``config.mix`` something ``pack`` never writes, one line each (empty: nothing):
    the mode, each source's inputs (every input of the manifest in exactly one source) and weight (as
    ``--mix`` accepts it: finite, >= 0, repeats at most `MAX_REPEAT`, proportions not all 0)."""
    if not isinstance(data, dict) or set(data) != {"by", "sources"}:
        return ["config.mix is not {by, sources}"]
    by, sources = data["by"], data["sources"]
    problems = [] if by in (PROPORTION, REPEAT) else [f"config.mix.by {by!r} is not {PROPORTION} or {REPEAT}"]
    if not isinstance(sources, list) or not sources:
        return problems + ["config.mix.sources is not a list of sources"]
    owner: dict[int, int] = {}
    for k, source in enumerate(sources):
        where = f"config.mix.sources[{k}]"
        if not isinstance(source, dict) or set(source) != {"inputs", "weight"}:
            problems.append(f"{where} is not {{inputs, weight}}")
            continue
        inputs, weight = source["inputs"], source["weight"]
        if not isinstance(inputs, list) or not inputs or not all(
                type(i) is int and 0 <= i < num_inputs for i in inputs):
            problems.append(f"{where}.inputs {inputs!r} is not a list of input indices (0..{num_inputs - 1})")
            continue
        for i in inputs:
            if i in owner:
                problems.append(f"input {i} is in config.mix.sources[{owner[i]}] and {where}")
            owner[i] = k
        if type(weight) not in (int, float) or not math.isfinite(weight) or weight < 0 or \
                (by == REPEAT and weight > MAX_REPEAT):
            problems.append(f"{where}.weight {weight!r} is not a weight `mix` accepts (finite, >= 0"
                            f"{f', at most {MAX_REPEAT:,.0f}x' if by == REPEAT else ''})")
    left = sorted(set(range(num_inputs)) - set(owner))
    if left:
        problems.append(f"inputs {left[:6]} are in no source of config.mix (pack puts every input in one)")
    weights = [s["weight"] for s in sources if isinstance(s, dict) and type(s.get("weight")) in (int, float)]
    if by == PROPORTION and not problems and not sum(weights) > 0:
        problems.append("config.mix's proportions add up to 0 (`mix` refuses that)")
    return problems


def describe(by: str, weight: float) -> str:
    """A weight as ``--mix`` spells it: ``0.7`` or ``3x``."""
    return f"{weight:g}x" if by == REPEAT else f"{weight:g}"


def parse_mix(text: str) -> tuple[MixSpec | None, list[str]]:
    """Parse ``KEY=WEIGHT[,KEY=WEIGHT...]``; return the spec (None when it has problems) and the problems."""
    problems: list[str] = []
    pairs: list[tuple[str, float]] = []
    modes = set()
    for item in (part.strip() for part in text.split(",")):
        key, sep, value = item.rpartition("=")
        if not sep or not key.strip():
            problems.append(f"`mix`: {item!r} is not SOURCE=WEIGHT (e.g. a.jsonl=0.7 or a.jsonl=3x)")
            continue
        key, value = key.strip(), value.strip()
        repeat = value.lower().endswith("x")
        try:
            weight = float(value[:-1] if repeat else value)
        except ValueError:
            problems.append(f"`mix`: {key}={value}: the weight does not parse; write a number (0.7) or a repeat (3x)")
            continue
        if not math.isfinite(weight) or weight < 0 or (repeat and weight > MAX_REPEAT):
            most = f" and at most {MAX_REPEAT:,.0f}x" if repeat else ""
            problems.append(f"`mix`: {key}={value}: the weight must be a finite number >= 0{most}")
            continue
        if any(key == k for k, _ in pairs):
            problems.append(f"`mix`: {key} is named twice")
            continue
        modes.add(REPEAT if repeat else PROPORTION)
        pairs.append((key, weight))
    if len(modes) > 1:
        problems.append("`mix`: proportions (0.7) and repeats (3x) cannot be mixed; use one kind for every source")
    if modes == {PROPORTION} and pairs and not sum(w for _, w in pairs) > 0:
        problems.append("`mix`: the proportions add up to 0")
    if problems or not pairs:
        return None, problems or ["`mix`: empty; write SOURCE=WEIGHT,..."]
    return MixSpec(modes.pop(), tuple(pairs)), []


def resolve_mix(spec: MixSpec, patterns: Sequence[str], inputs: Sequence[str],
                matched: Sequence[Sequence[str]]) -> Mixture:
    """Match each key of ``spec`` to inputs; every input ends up in exactly one source.

    Args:
        patterns: the input arguments as given; ``matched[k]`` are the inputs ``patterns[k]`` gave.
        inputs: the run's inputs (paths or ``hf:`` names), sorted as the run orders them.

    Raises:
        InputError: a key that names no input, an input named twice, a proportion mixture that
            leaves an input out.
    """
    position = {path: i for i, path in enumerate(inputs)}
    names: dict[str, list[int]] = {}
    for i, path in enumerate(inputs):
        names.setdefault(Path(path).name, []).append(i)
    owner: dict[int, str] = {}
    sources = []
    problems = []
    for key, weight in spec.weights:
        if key in patterns:
            members = sorted({position[p] for p in matched[list(patterns).index(key)]})
        elif key in position:
            members = [position[key]]
        elif len(names.get(key, [])) == 1:
            members = names[key]
        elif key in names:
            problems.append(f"`mix`: {key} is the name of {len(names[key])} inputs; use the path as given")
            continue
        else:
            problems.append(f"`mix` names {key}, which is not an input (inputs: {', '.join(inputs[:6])}"
                            f"{', ...' if len(inputs) > 6 else ''})")
            continue
        for i in members:
            if i in owner:
                problems.append(f"`mix`: {inputs[i]} is named by both {owner[i]} and {key}")
            owner[i] = key
        sources.append(MixSource(tuple(members), weight, key))
    left = [i for i in range(len(inputs)) if i not in owner]
    if left and spec.by == PROPORTION and not problems:
        problems.append(f"`mix` gives no proportion for {', '.join(inputs[i] for i in left[:4])}; name every input, "
                        f"or use repeats (3x), where an input not named counts 1x")
    if problems:
        raise InputError("; ".join(problems),
                         "name inputs as given on the command line, e.g. `mix='a.jsonl=0.7,b.parquet=0.3'`")
    sources += [MixSource((i,), 1.0, inputs[i]) for i in left]
    return Mixture(spec.by, tuple(sorted(sources, key=lambda s: s.inputs[0])))


def targets(mixture: Mixture, usable: Sequence[int]) -> list[int]:
    """How many examples each source contributes, given its number of usable records.

    Raises:
        InputError: a source asked for examples has no usable record.
    """
    if mixture.by == REPEAT:
        wanted = [math.floor(s.weight * n + 0.5) for s, n in zip(mixture.sources, usable)]
    else:
        total = sum(usable)
        weights = [s.weight for s in mixture.sources]
        shares = [w / sum(weights) * total for w in weights]
        wanted = [math.floor(x) for x in shares]
        # largest remainder, ties to the earlier source: the targets add up to the total exactly
        for k in sorted(range(len(shares)), key=lambda k: (-(shares[k] - wanted[k]), k))[:total - sum(wanted)]:
            wanted[k] += 1
    for s, n, t in zip(mixture.sources, usable, wanted):
        if t and not n:
            raise InputError(f"`mix` asks for {t} examples from {s.key or s.inputs}, which has no usable record",
                             "check its rejects (rejects.jsonl of a run without `mix`), or leave it out")
    return wanted


def draw_copies(mixture: Mixture, usable: npt.NDArray[np.bool_], file_index: npt.NDArray[np.int32],
                seed: int) -> npt.NDArray[np.int64]:
    """Copies of each record (0 for one that is not usable): see the module docstring.

    Args:
        usable: per record (input order), whether it can go into a pack (packed or truncated).
        file_index: per record, its input.
        seed: ``--seed``.
    """
    sizes = [int(np.count_nonzero(usable & np.isin(file_index, s.inputs))) for s in mixture.sources]
    return draw_some_copies(mixture, usable, file_index, seed, targets(mixture, sizes), sizes, [0] * len(sizes))


def draw_some_copies(mixture: Mixture, usable: npt.NDArray[np.bool_], file_index: npt.NDArray[np.int32], seed: int,
                     wanted: Sequence[int], sizes: Sequence[int], before: Sequence[int]) -> npt.NDArray[np.int64]:
    """`draw_copies` for a run of consecutive records (``verify`` judges them a part at a time): per source,
    ``wanted`` its target, ``sizes`` its usable records in all, ``before`` how many of them precede these.
    The draw is the whole source's, so a part gets exactly the copies the whole gives it."""
    copies = np.zeros(len(usable), dtype=np.int64)
    for k, (source, t, n) in enumerate(zip(mixture.sources, wanted, sizes)):
        rows = np.flatnonzero(usable & np.isin(file_index, source.inputs))
        if not n or not len(rows):
            continue
        whole, extra = divmod(t, n)
        copies[rows] = whole
        if extra:
            rng = np.random.default_rng([seed, SEED_SALT, k])
            chosen = np.sort(rng.choice(n, size=extra, replace=False)) - before[k]
            copies[rows[chosen[(chosen >= 0) & (chosen < len(rows))]]] += 1
    return copies
