"""Write a reproducible corpus of long multi-turn conversations (OpenAI ``messages`` JSONL) for benchmarks.

The text is real dialogue: the Chit Chat Challenge dataset (BYU PCC lab, MIT licence; 7,168
conversations of human chat), fetched once by pip as the pinned wheel ``chitchat-dataset==0.9.0``
into ``.cache/assets/chitchat/`` and never committed. Each output conversation strings together
``k`` source dialogues (drawn with replacement), turn by turn, alternating user and assistant:

    k ~ 1 + Poisson(TAIL_MEAN_DIALOGUES)         most conversations: one or two dialogues
    k ~ U(TAIL_MIN_DIALOGUES, TAIL_MAX_DIALOGUES)  TAIL_SHARE of them: 100k+ tokens (the long tail)
    system prompt on SYSTEM_SHARE of them

so the corpus has what real long-context SFT data has and short-chat benchmarks lack: a mean above
1,000 tokens per conversation and a tail past 100,000 (Qwen3 tokenizer). Seeded: the same
arguments give the same bytes on any machine.

Usage:
    python scripts/make_long_corpus.py --out long.jsonl                 # 17,500 conversations
    python scripts/make_long_corpus.py --n 2000 --out long2k.jsonl --measure
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "scripts"))
from _common import print_facts  # noqa: E402
from fetch_real_assets import Wheel, download_wheels  # noqa: E402

CACHE = REPO_ROOT / ".cache" / "assets" / "chitchat" / "dataset.json"
WHEEL = Wheel("chitchat-dataset==0.9.0", "chitchat_dataset-0.9.0-py3-none-any.whl",
              "7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e")
MEMBER = "chitchat_dataset/dataset.json"
MEMBER_SHA256 = "d2a5d0bf6acf354fef51f3af39cbece2220d3b8f6086b658c3d335105798312a"
TAIL_MEAN_DIALOGUES = 0.5
TAIL_SHARE = 0.002
TAIL_MIN_DIALOGUES, TAIL_MAX_DIALOGUES = 100, 150
SYSTEM_SHARE = 0.3
SYSTEM_PROMPTS = ("You are a friendly conversational partner.", "Keep the conversation going; be curious.",
                  "You are a helpful assistant. Answer in the user's tone.")


def dialogues() -> list[list[str]]:
    """The source dialogues as lists of turns (one sender's consecutive messages joined by spaces)."""
    if not CACHE.is_file() or hashlib.sha256(CACHE.read_bytes()).hexdigest() != MEMBER_SHA256:
        with tempfile.TemporaryDirectory(prefix="packcli-chitchat-") as tmp:
            download_wheels((WHEEL,), Path(tmp))
            with zipfile.ZipFile(Path(tmp) / WHEEL.filename) as wheel:
                data = wheel.read(MEMBER)
        if hashlib.sha256(data).hexdigest() != MEMBER_SHA256:
            raise SystemExit(f"error: {MEMBER} does not match its pin")
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_bytes(data)
    raw = json.loads(CACHE.read_text(encoding="utf-8"))
    found = []
    for key in sorted(raw):  # sorted: the same order on every machine
        turns = [" ".join(m["text"] for m in turn).strip() for turn in raw[key]["messages"]]
        turns = [t for t in turns if t]
        if len(turns) >= 2:
            found.append(turns)
    return found


def conversation(rng: random.Random, source: list[list[str]]) -> dict:
    if rng.random() < TAIL_SHARE:
        k = rng.randint(TAIL_MIN_DIALOGUES, TAIL_MAX_DIALOGUES)
    else:
        k = 1 + _poisson(rng, TAIL_MEAN_DIALOGUES)
    turns = [turn for _ in range(k) for turn in rng.choice(source)]
    if len(turns) % 2:
        turns = turns[:-1]
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    if rng.random() < SYSTEM_SHARE:
        messages.insert(0, {"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    return {"messages": messages}


def _poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: exact, and only the standard library's seeded generator (numpy's differ by version)."""
    limit, k, p = pow(2.718281828459045, -mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def measure(path: Path, tokenizer: Path, template: Path) -> dict:
    """Token counts per conversation with the Qwen3 tokenizer and its training template (packcli's own path)."""
    import numpy as np

    from packcli.chat import Renderer, load_template
    from packcli.choices import LossPolicy
    from packcli.ingest import read_lines
    from packcli.prepare import Preparer
    from packcli.tokenizer import load_tokenizer

    tok = load_tokenizer(tokenizer, backend="auto")
    preparer = Preparer(Renderer(load_template(str(template)), LossPolicy.assistant, bos_token=tok.bos_token,
                                 eos_token=tok.eos_token), tok)
    lengths, batch = [], []
    for line, raw in read_lines(path, 0):
        batch.append((0, line, raw))
        if len(batch) == 1024:
            lengths += [len(e.input_ids) for e in preparer.prepare(batch) if not isinstance(e, str)]
            batch = []
    lengths += [len(e.input_ids) for e in preparer.prepare(batch) if not isinstance(e, str)] if batch else []
    values = np.asarray(lengths)
    return {"conversations": len(values), "tokens": int(values.sum()), "mean": float(values.mean()),
            **{f"p{q}": float(np.percentile(values, q)) for q in (50, 90, 99, 99.9)}, "max": int(values.max()),
            "over_100k": int((values > 100_000).sum())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=17_500, help="conversations (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--measure", action="store_true", help="also print token-length quantiles (Qwen3)")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("--n must be positive")
    source = dialogues()
    rng = random.Random(args.seed)
    with open(args.out, "w", encoding="utf-8") as out:
        for _ in range(args.n):
            out.write(json.dumps(conversation(rng, source), ensure_ascii=False) + "\n")
    print(f"wrote {args.n:,} conversations to {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    if args.measure:
        assets = REPO_ROOT / ".cache" / "assets"
        print_facts(measure(args.out, assets / "qwen3", assets / "templates" / "qwen3_training.jinja"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
