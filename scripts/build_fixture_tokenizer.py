"""Train the tiny byte-level BPE tokenizer committed under `fixtures/tokenizer/`.

The hermetic tests need a real `tokenizers` tokenizer with ChatML special tokens that loads in
milliseconds and needs no network. This script trains one from text it writes itself (English plus
German, French, Spanish, Russian, Chinese, Japanese, Arabic, Korean, Hindi, Greek, Hebrew,
Vietnamese, Turkish and emoji), so every string in the fixture corpus round-trips through it: the
byte-level alphabet covers all 256 bytes, so a script it has barely seen still encodes, one byte per
token at worst.

    id 0..3    <|endoftext|>  <|im_start|>  <|im_end|>  <s>      special, never split
    id 4..259  the 256 byte-level symbols                       byte fallback for any text
    id 260..   BPE merges learned from training_text()          2816 tokens in all

Trade-off: a small vocabulary makes sequences longer than a production tokenizer would (about 2x
Qwen3's count on the benchmark mix) but keeps tokenizer.json under 200 KB and training under a second. No normalizer
and no post-processor: `encode(text)` returns exactly the tokens of `text`, no BOS added, so the
packer's own BOS/EOS logic is what the tests see.

Deterministic: the same tokenizers version writes the same bytes on every run (BUILT_WITH records
which version wrote the committed files; tests compare bytes only under that version).

Usage:
    python scripts/build_fixture_tokenizer.py                  # writes fixtures/tokenizer/
    python scripts/build_fixture_tokenizer.py --out /tmp/tok   # somewhere else
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "fixtures" / "tokenizer"
BUILT_WITH = "0.23.3"  # tokenizers.__version__ that wrote the committed tokenizer.json
VOCAB_SIZE = 2816  # reached: the training text supports ~2830 tokens at min_frequency=2
SEED = 0
PAD, IM_START, IM_END, BOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END, BOS)

# packcli's built-in ChatML (packcli/templates/chatml.jinja): {% generation %} markers around what the
# assistant must learn to produce (its content, its tool calls and the <|im_end|> that ends its turn; the
# "\n" after <|im_end|> is outside the block); content as a string or a list of text parts.
CHAT_TEMPLATE = (Path(__file__).resolve().parents[1] / "packcli" / "templates" / "chatml.jinja").read_text(encoding="utf-8")

# --- training text -------------------------------------------------------------------------------
# Written for this project. English sentences are assembled from parts so common words and affixes
# get merges; the other languages are whole sentences, repeated enough to earn a few merges each.
_SUBJECTS = (
    "The model", "A tokenizer", "Our training run", "The dataset", "Each worker", "The scheduler",
    "This function", "The packed buffer", "A careful engineer", "The evaluation script",
    "My colleague", "The documentation", "Every shard", "The attention mask", "The new release",
)
_VERBS = (
    "reads", "writes", "splits", "counts", "checks", "stores", "returns", "loads", "packs",
    "sorts", "validates", "computes", "streams", "rejects", "explains", "measures",
)
_OBJECTS = (
    "the conversations", "every message", "a list of tokens", "the labels", "three files",
    "the longest sequence", "a small manifest", "the position ids", "all assistant turns",
    "the system prompt", "twelve examples", "the chat template", "a JSON record", "the padding",
)
_TAILS = (
    "before training starts.", "in under a second.", "without copying the data.",
    "and logs a warning.", "so the loss is correct.", "when the file is large.",
    "because the budget is fixed.", "for each document.", "on every machine.",
    "as described in the contract.", "after the last epoch.", "with a clear error message.",
)
_NOUNS = (
    "apple", "bridge", "garden", "window", "teacher", "student", "library", "mountain", "river",
    "kitchen", "computer", "network", "program", "question", "answer", "village", "city", "country",
    "market", "doctor", "patient", "hospital", "morning", "evening", "weekend", "holiday", "journey",
    "airport", "station", "ticket", "letter", "message", "picture", "painting", "museum", "history",
    "science", "language", "grammar", "sentence", "paragraph", "chapter", "story", "novel", "poem",
    "song", "guitar", "piano", "concert", "festival", "recipe", "bread", "cheese", "vegetable",
    "breakfast", "dinner", "restaurant", "waiter", "customer", "company", "manager", "meeting",
    "project", "deadline", "budget", "invoice", "contract", "lawyer", "engineer", "database", "server",
    "browser", "keyboard", "screen", "battery", "bicycle", "engine", "planet", "galaxy", "telescope",
    "experiment", "theory", "evidence", "argument", "decision", "problem", "solution", "example",
    "exercise", "lesson", "homework", "friend", "neighbor", "family", "children", "animal", "forest",
    "ocean", "island", "desert", "winter", "summer", "autumn", "spring", "temperature", "climate",
    "energy", "electricity", "water", "medicine", "vitamin", "exercise", "muscle", "memory", "dream",
)
_ADJECTIVES = (
    "small", "large", "quiet", "noisy", "bright", "dark", "ancient", "modern", "simple", "difficult",
    "careful", "curious", "friendly", "famous", "expensive", "cheap", "beautiful", "strange", "useful",
    "important", "interesting", "boring", "delicious", "healthy", "dangerous", "safe", "quick", "slow",
    "warm", "cold", "wonderful", "terrible", "reliable", "efficient", "popular", "private", "public",
    "complicated", "obvious", "invisible", "colorful", "gentle", "patient", "honest", "generous",
)
_ACTIONS = (
    "visited", "painted", "described", "repaired", "forgot", "remembered", "discovered", "borrowed",
    "cooked", "carried", "compared", "recommended", "explored", "organized", "translated", "measured",
    "imagined", "delivered", "designed", "improved", "questioned", "celebrated", "watched", "followed",
    "noticed", "protected", "collected", "published", "finished", "started", "learned", "taught",
)
_ENGLISH = (
    "How do I make a cup of tea? Boil water, pour it over the leaves, and wait three minutes.",
    "Could you summarize this article in two sentences, please?",
    "Sure! Here is a short summary of the main points.",
    "What is the difference between a list and a tuple in Python?",
    "A list is mutable; a tuple is immutable and can be used as a dictionary key.",
    "The weather today is sunny with a light breeze from the west.",
    "Please translate the following sentence into French.",
    "I'm sorry, I can't help with that request.",
    "Thanks a lot! That was really helpful.",
    "def pack(sequences, capacity):\n    bins = []\n    for seq in sorted(sequences, key=len, reverse=True):\n        bins.append(seq)\n    return bins\n",
    "for i in range(10):\n\tprint(i * i)\n",
    '{"role": "user", "content": "Hello, world!"}',
    "Step 1: open the file. Step 2: read each line. Step 3: close the file.",
    "The answer is 42, and 3.14159 is close to pi; 1,000,000 is one million.",
    "Dear team, the meeting has moved to Thursday at 10:30 AM (UTC+2).",
    "user: hi\nassistant: Hello! How can I help you today?\n",
    "system: You are a helpful assistant.\n",
    "Recursion is when a function calls itself until it reaches a base case.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The quick brown fox jumps over the lazy dog.",
    "    indented line with four spaces\n        and eight spaces\n",
    "Email me at someone@example.com or visit https://example.org/docs?page=2#intro.",
)
_OTHER = (
    # German
    "Guten Morgen! Wie geht es dir heute?", "Ich möchte gern einen Kaffee mit Milch, bitte.",
    "Die Straße ist nach dem Regen ziemlich nass.", "Können Sie mir bitte helfen? Das wäre großartig.",
    "Über den Wolken muss die Freiheit wohl grenzenlos sein.", "Wir müssen die Daten vor dem Training prüfen.",
    # French
    "Bonjour, je voudrais réserver une table pour deux personnes.", "Où se trouve la gare, s'il vous plaît ?",
    "C'est une très bonne idée ; merci beaucoup !", "L'été dernier, nous sommes allés à la mer.",
    "Le modèle apprend à prédire le mot suivant.", "Ça coûte combien ? Vingt-deux euros.",
    # Spanish
    "¿Cómo estás? Muy bien, gracias.", "El niño comió una manzana en el jardín.",
    "¡Qué día tan bonito para caminar por la montaña!", "Necesito aprender a programar en Python.",
    "La señora González vive en Madrid desde hace años.",
    # Russian
    "Привет! Как у тебя дела?", "Спасибо большое за помощь.", "Москва — столица России.",
    "Я люблю читать книги по вечерам.", "Модель обучается на большом наборе данных.",
    # Chinese
    "你好，世界！", "今天天气很好，我们去公园散步吧。", "请问火车站怎么走？", "机器学习是人工智能的一个分支。",
    "我喜欢喝茶，不太喜欢喝咖啡。",
    # Japanese
    "こんにちは、元気ですか？", "東京は日本の首都です。", "ありがとうございます。とても助かりました。",
    "明日は雨が降るかもしれません。", "カタカナとひらがなと漢字を使います。",
    # Arabic (with and without harakat)
    "مرحبا، كيف حالك؟", "أنا بخير، شكرا جزيلا.", "اللغة العربية جميلة جدا.", "مَرْحَبًا بِكُمْ فِي الدَّرْسِ.",
    # Korean, Hindi, Greek, Hebrew, Vietnamese, Turkish
    "안녕하세요! 만나서 반갑습니다.", "नमस्ते, आप कैसे हैं?", "Καλημέρα, τι κάνεις;", "שלום, מה שלומך?",
    "Xin chào, bạn có khỏe không?", "Türkçe öğrenmek çok eğlenceli.",
    "Könnten wir das Experiment morgen wiederholen? Die Ergebnisse waren überraschend.",
    "Meine Großmutter backt jeden Sonntag einen Apfelkuchen für die ganze Familie.",
    "Der Zug nach Hamburg hat leider zwanzig Minuten Verspätung.",
    "Pourriez-vous m'expliquer comment fonctionne cette fonction récursive ?",
    "Les enfants jouent dans le jardin pendant que leurs parents préparent le dîner.",
    "Nous avons visité le musée du Louvre et la cathédrale Notre-Dame.",
    "¿Podrías recomendarme un libro interesante sobre la historia de España?",
    "Mañana vamos a la playa si no llueve demasiado.",
    "El ordenador se reinició durante la actualización del sistema.",
    "Пожалуйста, объясни, как работает эта программа.", "Вчера мы гуляли в парке и кормили уток.",
    "Зимой в Сибири очень холодно, а летом бывает жарко.",
    "这个函数的时间复杂度是多少？", "我们明天早上八点在图书馆门口见面。", "这本小说讲述了一个关于友谊的故事。",
    "この関数はリストを並べ替えて返します。", "週末は友達と一緒に映画を見に行きました。", "日本語の文法は少し難しいです。",
    "هل يمكنك أن تشرح لي هذه الفكرة مرة أخرى؟", "ذهبنا إلى السوق واشترينا الخبز والفواكه.",
    "오늘 저녁에 무엇을 먹고 싶어요?", "이 프로그램은 데이터를 정렬합니다.",
    "मुझे हिंदी सीखना बहुत पसंद है।", "Η γλώσσα προγραμματισμού Python είναι δημοφιλής.",
    # emoji, including ZWJ sequences, skin tones, flags, keycaps and variation selectors
    "Great job! 🎉🎉 👍🏽 ❤️ 🚀", "Family: 👩‍👩‍👧‍👦, flags: 🇩🇪 🇫🇷 🇯🇵, keycap: 1️⃣", "Weather: ☀️ 🌧️ ❄️ 🌈",
)


def training_text() -> list[str]:
    """The lines the tokenizer is trained on: deterministic (random.Random(SEED)), about 0.9 MB."""
    rng = random.Random(SEED)
    lines = []
    for _ in range(6000):
        lines.append(f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}")
    for _ in range(8000):
        lines.append(f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} {rng.choice(_ACTIONS)} "
                     f"a {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} near the {rng.choice(_NOUNS)}.")
    for _ in range(12):
        lines.extend(_ENGLISH)
        lines.extend(_OTHER)
    rng.shuffle(lines)
    return lines


def train_tokenizer():
    """Train the fixture tokenizer. Returns a `tokenizers.Tokenizer`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        max_token_length=12,  # no whole-sentence CJK tokens from the repeated sentences
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(), trainer=trainer)
    return tokenizer


def tokenizer_config(tokenizer) -> dict:
    """A Hugging Face style tokenizer_config.json for `tokenizer`."""
    added = {
        str(tokenizer.token_to_id(token)): {
            "content": token, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True,
        }
        for token in SPECIAL_TOKENS
    }
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": IM_END,
        "model_max_length": 32768,
        "pad_token": PAD,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def build(out_dir: Path) -> list[Path]:
    """Train and write tokenizer.json and tokenizer_config.json into `out_dir`; return the paths."""
    tokenizer = train_tokenizer()
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_path, cfg_path = out_dir / "tokenizer.json", out_dir / "tokenizer_config.json"
    tok_path.write_bytes(tokenizer.to_str(pretty=True).encode("utf-8") + b"\n")
    config = json.dumps(tokenizer_config(tokenizer), indent=2, sort_keys=True, ensure_ascii=False)
    cfg_path.write_bytes(config.encode("utf-8") + b"\n")
    return [tok_path, cfg_path]


def main(argv: list[str] | None = None) -> int:
    import hashlib

    import tokenizers

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    if tokenizers.__version__ != BUILT_WITH:
        print(f"warning: tokenizers {tokenizers.__version__} != {BUILT_WITH}, which wrote the committed "
              "fixture; the bytes may differ", file=sys.stderr)
    paths = build(args.out)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(paths[0]))
    for path in paths:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{path}  {path.stat().st_size:>8} bytes  sha256 {digest}")
    ids = ", ".join(f"{t}={tok.token_to_id(t)}" for t in SPECIAL_TOKENS)
    print(f"vocab size {tok.get_vocab_size()}; special tokens {ids}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
