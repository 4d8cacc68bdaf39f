"""The committed fixtures are exactly what the scripts in scripts/ produce, and behave as documented.

Regenerate after changing a script:
    python scripts/build_fixture_tokenizer.py && python scripts/make_fixture_corpus.py
and update the tables in fixtures/README.md from `python scripts/make_fixture_corpus.py --readme-tables`.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "fixtures"
ROLES = {"system", "user", "assistant"}


def _load_script(name: str):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


corpus_script = _load_script("make_fixture_corpus")
tokenizer_script = _load_script("build_fixture_tokenizer")
bench_script = _load_script("make_bench_corpus")
assets_script = _load_script("fetch_real_assets")


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(FIXTURES / "tokenizer" / "tokenizer.json"))


def jsonl_records(path: Path) -> list[dict]:
    """Parse a JSONL file, splitting on b"\\n" only (a record holds a raw U+2028, which splitlines breaks)."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return [json.loads(line) for line in data.decode("utf-8").split("\n") if line]


def content_text(content) -> str:
    return content if isinstance(content, str) else "".join(part["text"] for part in content)


def check_chat(messages: list[dict]) -> None:
    """What every valid conversation in the fixtures satisfies."""
    assert messages, "empty conversation"
    assert all(m["role"] in ROLES for m in messages), [m["role"] for m in messages]
    for m in messages:
        assert isinstance(m["content"], str) or all(p["type"] == "text" and isinstance(p["text"], str)
                                                    for p in m["content"])
    assert any(m["role"] == "assistant" and content_text(m["content"]) for m in messages)
    assert messages[-1]["role"] == "assistant"


# --- the committed bytes are the generators' bytes ------------------------------------------------
def test_corpus_matches_generator(tmp_path):
    written = corpus_script.write_corpus(tmp_path)
    committed = sorted(p.name for p in (FIXTURES / "corpus").iterdir())
    assert committed == sorted(p.name for p in written), "fixtures/corpus/ has files the script does not write"
    for path in written:
        expected, actual = path.read_bytes(), (FIXTURES / "corpus" / path.name).read_bytes()
        if path.suffix == ".gz":  # deflate bytes may differ between zlib builds; header and payload may not
            assert actual[:10] == corpus_script.GZIP_HEADER
            assert gzip.decompress(actual) == gzip.decompress(expected), path.name
        else:
            assert actual == expected, f"{path.name} differs; rerun python scripts/make_fixture_corpus.py"


def test_tokenizer_matches_builder(tmp_path):
    import tokenizers

    if tokenizers.__version__ != tokenizer_script.BUILT_WITH:
        pytest.skip(f"committed tokenizer was built with tokenizers {tokenizer_script.BUILT_WITH}, "
                    f"not {tokenizers.__version__}")
    for path in tokenizer_script.build(tmp_path):
        assert path.read_bytes() == (FIXTURES / "tokenizer" / path.name).read_bytes(), (
            f"{path.name} differs; rerun python scripts/build_fixture_tokenizer.py")


def test_readme_tables_are_current():
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    assert corpus_script.readme_tables() in readme, (
        "fixtures/README.md tables are stale; paste python scripts/make_fixture_corpus.py --readme-tables")


# --- the tokenizer ---------------------------------------------------------------------------------
@pytest.mark.parametrize("token", tokenizer_script.SPECIAL_TOKENS)
def test_special_tokens_are_single_ids(tokenizer, token):
    token_id = tokenizer.token_to_id(token)
    assert token_id is not None
    assert tokenizer.encode(token, add_special_tokens=False).ids == [token_id]
    assert tokenizer.encode(f"x{token}y", add_special_tokens=False).ids.count(token_id) == 1
    assert tokenizer.decode([token_id], skip_special_tokens=False) == token


def test_tokenizer_shape(tokenizer):
    spec = json.loads((FIXTURES / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["post_processor"] is None and spec["normalizer"] is None
    assert spec["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                     "use_regex": True}
    assert tokenizer.get_vocab_size() == tokenizer_script.VOCAB_SIZE
    assert 2000 <= tokenizer.get_vocab_size() <= 4000
    assert (FIXTURES / "tokenizer" / "tokenizer.json").stat().st_size < 1_000_000
    ids = tokenizer.encode("Hello world", add_special_tokens=True).ids
    assert tokenizer.token_to_id("<s>") not in ids, "no post-processor: encode must not add BOS"


def test_tokenizer_config(tokenizer):
    config = json.loads((FIXTURES / "tokenizer" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == ("<s>", "<|im_end|>", "<|endoftext|>")
    assert config["chat_template"] == tokenizer_script.CHAT_TEMPLATE
    for token_id, entry in config["added_tokens_decoder"].items():
        assert tokenizer.token_to_id(entry["content"]) == int(token_id)


ROUND_TRIP = [
    "Hello, world!", "", " leading space", "trailing spaces   ", "\n\nnewlines\r\n\ttab",
    "Grüße aus Köln — „Anführungszeichen“", "L'été à Paris, ça coûte 12,50 €", "¿Qué tal? ¡Muy bien!",
    "Привет, мир", "你好，世界！", "こんにちは、カタカナ、漢字", "مَرْحَبًا بِكُمْ", "שלום", "안녕하세요", "नमस्ते",
    "e\u0301te\u0301 Z\u0335\u0321a\u0336lgo", "👩‍👩‍👧‍👦 👍🏽 🇩🇪 1️⃣ ❤️ 🫠", "\u2028\u2029\u00a0\u200b\ufeff",
    "<|im_start|>user\nhi<|im_end|>\n", "<|im_ <|im_end <s> </s> <|endoftext|>", "\x00\x01\x7f",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_round_trip_whole_corpus(tokenizer):
    texts = []
    for name in ("openai.jsonl", "openai.jsonl.gz"):
        texts += [content_text(m["content"]) for r in jsonl_records(FIXTURES / "corpus" / name) for m in r["messages"]]
    texts += [t["value"] for r in jsonl_records(FIXTURES / "corpus" / "sharegpt.jsonl") for t in r["conversations"]]
    texts += [r[k] for r in jsonl_records(FIXTURES / "corpus" / "prompt_completion.jsonl") for k in ("prompt", "completion")]
    texts += [r["text"] for r in jsonl_records(FIXTURES / "corpus" / "text.jsonl")]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    decoded = tokenizer.decode_batch([e.ids for e in encodings], skip_special_tokens=False)
    bad = [t for t, d in zip(texts, decoded) if t != d]
    assert not bad, f"{len(bad)} of {len(texts)} strings do not round-trip, e.g. {bad[0]!r}"


def test_chat_template_marks_assistant_spans():
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):  # {% generation %}...{% endgeneration %} -> \x02...\x03
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

        def _mark(self, caller):
            return "\x02" + caller() + "\x03"

    template = ImmutableSandboxedEnvironment(extensions=[Generation]).from_string(tokenizer_script.CHAT_TEMPLATE)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
                {"role": "assistant", "content": "A1"}, {"role": "user", "content": "\nU2"},
                {"role": "assistant", "content": "A2"}]
    assert template.render(messages=messages) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
        "<|im_start|>assistant\n\x02A1<|im_end|>\x03\n<|im_start|>user\n\nU2<|im_end|>\n"
        "<|im_start|>assistant\n\x02A2<|im_end|>\x03\n")
    assert template.render(messages=messages[:2], add_generation_prompt=True).endswith(
        "U1<|im_end|>\n<|im_start|>assistant\n")


# --- the corpus ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["openai.jsonl", "openai.jsonl.gz"])
def test_openai_records_are_valid(name):
    records = jsonl_records(FIXTURES / "corpus" / name)
    assert len(records) == {"openai.jsonl": 120, "openai.jsonl.gz": 20}[name]
    for record in records:
        assert list(record) == ["messages"]
        check_chat(record["messages"])
    exchanges = {sum(m["role"] == "assistant" for m in r["messages"]) for r in records}
    assert name.endswith(".gz") or exchanges == {1, 2, 3, 4}


def test_gz_records_are_not_in_openai_jsonl():
    plain = {json.dumps(r, sort_keys=True) for r in jsonl_records(FIXTURES / "corpus" / "openai.jsonl")}
    assert not plain & {json.dumps(r, sort_keys=True) for r in jsonl_records(FIXTURES / "corpus" / "openai.jsonl.gz")}


def test_sharegpt_uses_every_alias():
    records = jsonl_records(FIXTURES / "corpus" / "sharegpt.jsonl")
    names = {turn["from"] for r in records for turn in r["conversations"]}
    assert names == {"system", *corpus_script.USER_ALIASES, *corpus_script.ASSISTANT_ALIASES}
    assert all(isinstance(turn["value"], str) for r in records for turn in r["conversations"])


def test_prompt_completion_and_text_shapes():
    pc = jsonl_records(FIXTURES / "corpus" / "prompt_completion.jsonl")
    assert len(pc) == 40 and all(list(r) == ["prompt", "completion"] and r["completion"] for r in pc)
    text = jsonl_records(FIXTURES / "corpus" / "text.jsonl")
    assert len(text) == 40 and all(list(r) == ["text"] for r in text)
    assert max(len(r["text"]) for r in text) >= 2000 and min(len(r["text"]) for r in text) <= 2


def test_broken_lines_are_what_the_table_says():
    lines = (FIXTURES / "corpus" / "broken.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"", "file ends with a newline"
    table = corpus_script.broken_lines()
    assert len(lines) - 1 == len(table) == 21
    kinds = {kind for kind, _, _ in table}
    assert len(kinds) == 11 and sum(kind == "valid" for kind, _, _ in table) == 11

    for line_no, (raw, (kind, _, _)) in enumerate(zip(lines, table), start=1):
        where = f"broken.jsonl:{line_no} ({kind})"
        if kind == "blank_line":
            assert raw == b"", where
            continue
        if kind == "invalid_utf8":
            with pytest.raises(UnicodeDecodeError):
                raw.decode("utf-8")
            continue
        if kind == "malformed_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(raw)
            continue
        record = json.loads(raw)
        if kind == "not_an_object":
            assert isinstance(record, list), where
        elif kind == "missing_keys":
            assert not {"messages", "conversations", "prompt", "text"} & set(record), where
        elif kind == "empty_messages":
            assert record == {"messages": []}, where
        elif kind == "unknown_role":
            assert {m["role"] for m in record["messages"]} - ROLES == {"wizard"}, where
        elif kind == "non_string_content":
            assert any(isinstance(m["content"], int) for m in record["messages"]), where
        elif kind == "no_assistant_turn":
            assert record["messages"] and all(m["role"] != "assistant" for m in record["messages"]), where
        elif kind == "empty_assistant_content":
            assert [m["content"] for m in record["messages"] if m["role"] == "assistant"] == [""], where
        else:
            assert kind == "valid", where
            check_chat(record["messages"])


# --- the bench corpus and the real assets ----------------------------------------------------------
def test_bench_corpus_is_deterministic_and_valid(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    bench_script.write_bench(a, 300, seed=7)
    bench_script.write_bench(b, 300, seed=7)
    assert a.read_bytes() == b.read_bytes()
    records = jsonl_records(a)
    assert len(records) == 300
    for record in records:
        check_chat(record["messages"])
        assert 1 <= sum(m["role"] == "assistant" for m in record["messages"]) <= 6


@pytest.mark.real
def test_real_assets_match_pins():
    assets = assets_script.all_assets()
    stale = assets_script.find_stale(assets_script.DEFAULT_DEST, assets)
    if len(stale) == len(assets):
        pytest.skip("real assets not fetched; run python scripts/fetch_real_assets.py")
    assert not stale, f"{len(stale)} stale asset(s), e.g. {stale[0][0].dest}: {stale[0][1]}"
    from tokenizers import Tokenizer

    qwen3 = Tokenizer.from_file(str(assets_script.DEFAULT_DEST / "qwen3" / "tokenizer.json"))
    assert qwen3.encode("<|im_end|>", add_special_tokens=False).ids == [qwen3.token_to_id("<|im_end|>")]
    llama = Tokenizer.from_file(str(assets_script.DEFAULT_DEST / "llama3_2" / "tokenizer.json"))
    assert llama.encode("hi", add_special_tokens=True).ids[0] == llama.token_to_id("<|begin_of_text|>")
