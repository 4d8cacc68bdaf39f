"""Write a large synthetic JSONL corpus of OpenAI-format conversations for benchmarks.

Text comes from a pool built from the committed fixture corpus (fixtures/corpus/openai.jsonl and
text.jsonl: a dozen languages, emoji, code), shuffled and repeated to POOL_CHARS characters. Each
message is a slice of that pool at a random offset (snapped to a space), with a lognormal length, so
generation is a memcpy plus json.dumps per record: 200k conversations take seconds, not minutes.

    conversation = [system]? (user, assistant) x 1..6
    user chars      ~ lognormal(median USER_MEDIAN, sigma USER_SIGMA)
    assistant chars ~ lognormal(median ASSISTANT_MEDIAN, sigma ASSISTANT_SIGMA), capped at MAX_MESSAGE

With the fixture tokenizer that gives a median of a few hundred tokens per conversation and a tail
to ~16k (see `--measure` and the constants below). Trade-off: slices cut sentences
and mix languages mid-message, which is fine for throughput and packing-efficiency benchmarks and
useless for anything that reads the text. `--source chatterbot` replaces CHATTERBOT_SHARE of the
conversations with real multilingual exchanges from chatterbot-corpus (needs
`python scripts/fetch_real_assets.py` first and PyYAML).

Usage:
    python scripts/make_bench_corpus.py --n 50000 --out bench-out/bench.jsonl
    python scripts/make_bench_corpus.py --n 200000 --out bench-out/chatterbot.jsonl --source chatterbot
    python scripts/make_bench_corpus.py --n 100000 --out bench-out/cb-nfc.jsonl --source chatterbot --nfc
    python scripts/make_bench_corpus.py --n 2000 --out bench-out/b.jsonl --measure 2000   # token percentiles
    python scripts/make_bench_corpus.py --n 1000000 --short --out bench-out/short1m.jsonl  # ~100 tokens each
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
import unicodedata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURE_CORPUS = REPO_ROOT / "fixtures" / "corpus"
FIXTURE_TOKENIZER = REPO_ROOT / "fixtures" / "tokenizer" / "tokenizer.json"
CHATTERBOT_DIR = REPO_ROOT / ".cache" / "assets" / "chatterbot"
POOL_CHARS = 2_000_000
# Characters. Tuned so that --n 50000 --measure 50000 gives p50 ~380, p99 ~2.9k, max ~16k tokens with
# the fixture tokenizer (Qwen3: p50 ~210, max ~8k); the fixture tokenizer needs ~1.9x Qwen3's tokens.
USER_MEDIAN, USER_SIGMA = 45, 1.0
ASSISTANT_MEDIAN, ASSISTANT_SIGMA = 150, 1.2
MAX_MESSAGE = 28_000
EXCHANGE_WEIGHTS = (35, 25, 15, 10, 8, 7)  # 1..6 user/assistant exchanges
SYSTEM_SHARE = 0.3
CHATTERBOT_SHARE = 0.25
SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a concise assistant. Answer in at most three sentences.",
    "Du bist ein hilfsbereiter Assistent.",
    "Tu es un assistant serviable.",
    "你是一个乐于助人的助手。",
)


def _jsonl_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line]


def build_pool(seed: int) -> str:
    """POOL_CHARS characters of fixture text: every message and document, shuffled, repeated."""
    texts = []
    # split on "\n" only: str.splitlines() also splits at the raw U+2028 inside one fixture record
    for line in _jsonl_lines(FIXTURE_CORPUS / "openai.jsonl"):
        for message in json.loads(line)["messages"]:
            content = message["content"]
            texts.append(content if isinstance(content, str) else "".join(p["text"] for p in content))
    for line in _jsonl_lines(FIXTURE_CORPUS / "text.jsonl"):
        texts.append(json.loads(line)["text"])
    rng = random.Random(seed)
    chunks, size = [], 0
    while size < POOL_CHARS:
        rng.shuffle(texts)
        chunks.extend(texts)
        size += sum(len(t) + 1 for t in texts)
    return " ".join(chunks)[:POOL_CHARS]


def load_chatterbot() -> list[list[tuple[str, str]]]:
    """Exchanges from chatterbot-corpus, grouped by language folder (sorted, so deterministic)."""
    try:
        import yaml
    except ImportError:
        raise SystemExit("error: --source chatterbot needs PyYAML; pip install pyyaml") from None
    files = sorted(CHATTERBOT_DIR.glob("*/*.yml"))
    if not files:
        raise SystemExit(f"error: no chatterbot data under {CHATTERBOT_DIR}; run python scripts/fetch_real_assets.py")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    by_language: dict[str, list[tuple[str, str]]] = {}
    for path in files:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader) or {}
        for conv in data.get("conversations") or []:
            if not isinstance(conv, list):
                continue
            turns = [str(t).strip() for t in conv]
            pairs = [(turns[i], turns[i + 1]) for i in range(0, len(turns) - 1, 2) if turns[i] and turns[i + 1]]
            by_language.setdefault(path.parent.name, []).extend(pairs)
    return [pairs for _, pairs in sorted(by_language.items()) if pairs]


class ConversationMaker:
    """Draws conversations from one seeded random.Random; the same seed gives the same sequence."""

    def __init__(self, seed: int, *, chatterbot: list[list[tuple[str, str]]] | None = None,
                 max_exchanges: int = len(EXCHANGE_WEIGHTS), max_message: int = MAX_MESSAGE) -> None:
        self.rng = random.Random(seed)
        self.pool = build_pool(seed)
        self.chatterbot = chatterbot
        self.weights = EXCHANGE_WEIGHTS[:max_exchanges]
        self.max_message = max_message

    def _slice(self, median: float, sigma: float) -> str:
        rng, pool = self.rng, self.pool
        length = min(self.max_message, max(1, int(rng.lognormvariate(math.log(median), sigma))))
        start = rng.randrange(0, len(pool) - length)
        space = pool.find(" ", start, start + 40)
        start = space + 1 if space >= 0 else start
        return pool[start:start + length].strip() or pool[start]

    def conversation(self) -> list[dict]:
        rng = self.rng
        exchanges = rng.choices(range(1, len(self.weights) + 1), weights=self.weights)[0]
        messages = []
        if rng.random() < SYSTEM_SHARE:
            messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        if self.chatterbot and rng.random() < CHATTERBOT_SHARE:
            pairs = rng.choice(self.chatterbot)
            for user, assistant in (rng.choice(pairs) for _ in range(exchanges)):
                messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
            return messages
        for _ in range(exchanges):
            messages.append({"role": "user", "content": self._slice(USER_MEDIAN, USER_SIGMA)})
            messages.append({"role": "assistant", "content": self._slice(ASSISTANT_MEDIAN, ASSISTANT_SIGMA)})
        return messages


def write_bench(out: Path, n: int, *, seed: int = 0, source: str = "synthetic", nfc: bool = False,
                max_exchanges: int = len(EXCHANGE_WEIGHTS), max_message: int = MAX_MESSAGE) -> int:
    """Write `n` conversations to `out` as JSONL; return the number of bytes written.

    ``max_exchanges``, ``max_message``: at most that many user/assistant exchanges (the weights cut there)
    and characters a message; ``--short`` (1 and 300) makes conversations of about a hundred tokens, for
    runs of millions where the per-conversation costs are the point.

    ``nfc``: every message in Unicode NFC, as most real corpora are. The pool's fixture texts include
    decomposed characters on purpose (about 1 conversation in 10 is not NFC otherwise), which is
    the fast tokenizer backend's slow path with an NFC tokenizer.
    """
    chatterbot = load_chatterbot() if source == "chatterbot" else None
    maker = ConversationMaker(seed, chatterbot=chatterbot, max_exchanges=max_exchanges, max_message=max_message)
    norm = (lambda m: {**m, "content": unicodedata.normalize("NFC", m["content"])}) if nfc else (lambda m: m)
    written = 0
    with out.open("wb") as f:
        for start in range(0, n, 1000):
            block = "".join(json.dumps({"messages": [norm(m) for m in maker.conversation()]}, ensure_ascii=False)
                            + "\n" for _ in range(min(1000, n - start)))
            data = block.encode("utf-8")
            f.write(data)
            written += len(data)
    return written


def ensure_bench(out: Path, n: int) -> Path:
    """`out`, written with `n` conversations (seed 0) unless it exists: the benchmarks' default corpora."""
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        write_bench(out, n)
    return out


def measure_tokens(path: Path, limit: int, tokenizer_path: Path) -> dict[str, int]:
    """Token-count percentiles of the first `limit` conversations rendered as ChatML."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    texts = []
    with path.open(encoding="utf-8") as f:
        for line, _ in zip(f, range(limit)):
            texts.append("".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                                 for m in json.loads(line)["messages"]))
    counts = sorted(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    pick = lambda q: counts[min(len(counts) - 1, int(q * len(counts)))]  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": counts[-1], "n": len(counts)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000, help="conversations (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench.jsonl"), help="output file (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", choices=("synthetic", "chatterbot"), default="synthetic")
    parser.add_argument("--nfc", action="store_true", help="every message in Unicode NFC (real corpora mostly are)")
    parser.add_argument("--measure", type=int, default=0, metavar="N", help="tokenize the first N and print percentiles")
    parser.add_argument("--tokenizer", type=Path, default=FIXTURE_TOKENIZER, help="for --measure (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--short", action="store_true",
                        help="one exchange, messages of at most 300 characters: about a hundred tokens a conversation")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error(f"--n must be >= 1, got {args.n}")

    started = time.perf_counter()
    short = {"max_exchanges": 1, "max_message": 300} if args.short else {}
    size = write_bench(args.out, args.n, seed=args.seed, source=args.source, nfc=args.nfc, **short)
    summary = {"out": str(args.out), "conversations": args.n, "bytes": size, "source": args.source, "nfc": args.nfc,
               "short": args.short, "seed": args.seed, "seconds": round(time.perf_counter() - started, 2)}
    if args.measure:
        summary["tokens"] = measure_tokens(args.out, args.measure, args.tokenizer)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:<14} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
