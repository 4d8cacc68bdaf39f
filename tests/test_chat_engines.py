"""minijinja as a second template engine: equal to jinja2's sandbox where it runs, jinja2 everywhere else.

Every guard is fed the failure it guards against: the static gate a template it must refuse, the data
hand-off a value minijinja would print otherwise, the probe a template minijinja renders otherwise, the
cross-check a difference during a run, the bounds a template that runs away.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from chat_data import tool_conversations
from conftest import FIXTURES, ROOT, real_asset

from packcli.chat import ChatTemplate, LossPolicy, Renderer, engines
from packcli.chat.engines import MiniJinjaTemplate, choose_engine, data_literal, minijinja_refusal
from packcli.chat.render import CHECK_FIRST, RenderError

minijinja = pytest.importorskip("minijinja")  # packcli.chat.engines imports it only when it renders

MOMENT = datetime(2024, 7, 26)
CHAT = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
GEN = "{% generation %}x{% endgeneration %}"


def minijinja_renderer(text: str, policy: LossPolicy = LossPolicy.all) -> Renderer:
    """A renderer told minijinja directly (no probe), as a worker is once the driver chose it."""
    return Renderer(ChatTemplate(text, "t"), policy, bos_token=None, eos_token=None, engine="minijinja")


def chat_record():  # noqa: ANN201 - packcli.ingest.Record
    """``CHAT`` as pack parses it."""
    from packcli.ingest import parse_record

    return parse_record(json.dumps(CHAT).encode(), file_index=0, line=1)


def variables(record: dict) -> dict:
    return {"messages": record["messages"], "tools": record.get("tools"), "documents": None,
            "add_generation_prompt": False, "bos_token": "<s>", "eos_token": "</s>"}


def jinja2_marked(text: str, data: dict) -> tuple[str, int] | None:
    """jinja2's marked text and block count for ``data`` (None: it raises), through the Renderer's own path."""
    renderer = Renderer(ChatTemplate(text, "t"), LossPolicy.all, bos_token="<s>", eos_token="</s>")
    try:
        return renderer._run_jinja2_marked({**data, "strftime_now": renderer._strftime_now})
    except RenderError:
        return None


def records() -> list[dict]:
    """Tool calls (arguments as objects and as strings), tool results, reasoning, and the fixture's chats."""
    fixture = [json.loads(line) for line in (FIXTURES / "corpus" / "openai.jsonl").read_text().split("\n") if line]
    return (tool_conversations(30, seed=1) + tool_conversations(15, seed=2, string_arguments=False, reasoning=False)
            + [{"messages": r["messages"]} for r in fixture[:40]])


def template_paths() -> list:
    """Every template in the test assets, TRL's shipped ones, and packcli's built-in ChatML."""
    from packcli.chat.training import trl_templates_dir

    assets = real_asset("templates")
    paths = sorted(assets.glob("*.jinja"))
    folder = trl_templates_dir()
    paths += sorted(folder.glob("*.jinja")) if folder else []
    return [*paths, ROOT / "packcli" / "templates" / "chatml.jinja"]


@pytest.mark.real
@pytest.mark.parametrize("path", template_paths(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_where_the_probe_admits_minijinja_it_renders_every_record_as_jinja2(path):
    """On every template: if the gate and the probe let minijinja render it, each record that minijinja
    takes, cut before every message (the prefixes turn starts are read from), gives jinja2's marked text and
    block count exactly; a record jinja2 rejects is one minijinja declines. No sampling here: every render."""
    text = path.read_text(encoding="utf-8")
    choice = choose_engine(text, "minijinja", moment=MOMENT, bos_token="<s>", eos_token="</s>")
    if choice.engine != "minijinja":
        assert choice.reason, "a refusal says why"
        return
    fast = MiniJinjaTemplate(text, MOMENT)
    taken = 0
    for record in records():
        for cut in range(1, len(record["messages"]) + 1):
            data = variables({**record, "messages": record["messages"][:cut]})
            got = fast.render(data)
            if got is not None:
                taken += 1
                assert got == jinja2_marked(text, data), (path.name, cut)
    assert taken, "the probe admitted a template minijinja renders for no record"


@pytest.mark.real
@pytest.mark.parametrize("name", ["qwen3_training", "llama3_training", "smolvlm_training", "idefics3_training"])
@pytest.mark.parametrize("policy", [LossPolicy.assistant, LossPolicy.last_assistant, LossPolicy.all])
def test_renderers_on_both_engines_give_the_same_text_spans_and_rejects(name, policy):
    """The Renderer end to end (turn starts, weights, guards): the same Rendered or the same reject per record,
    and minijinja rendered records of its own with no cross-check difference."""
    text = real_asset("templates", f"{name}.jinja").read_text(encoding="utf-8")
    from packcli.ingest import parse_record

    made = {engine: Renderer(ChatTemplate(text, name), policy, bos_token="<s>", eos_token="</s>", engine=engine)
            for engine in ("jinja2", "minijinja")}
    for i, record in enumerate(records()):
        raw = json.dumps({**record, "messages": [{**m, "weight": 0} if j == 0 and m["role"] == "assistant" else m
                                                 for j, m in enumerate(record["messages"])]}).encode()
        outcome = {}
        for engine, renderer in made.items():
            try:
                outcome[engine] = renderer.render(parse_record(raw, file_index=0, line=i + 1))
            except RenderError as exc:
                outcome[engine] = str(exc)
        assert outcome["jinja2"] == outcome["minijinja"], i
    counts = made["minijinja"].render_counts
    assert counts["minijinja"] > 0 and counts["mismatches"] == 0, counts
    assert made["jinja2"].render_counts["minijinja"] == 0


@pytest.mark.parametrize("text,why", [
    ("{{ ''.__class__ }}" + GEN, "'__class__'"),
    ("{% set ns = namespace(_a=1) %}" + GEN, "'_a'"),
    ("{% set ns = namespace(a=1) %}{% set ns._b = 2 %}" + GEN, "'_b'"),
    ("{{ messages.append(1) }}" + GEN, ".append"),
    ("{% for m in messages %}{{ m.update({'role': 'x'}) }}{% endfor %}" + GEN, ".update"),
    ("{{ '{0}'.format(messages) }}" + GEN, ".format"),
    ("{% if messages[0].content is sequence %}s{% endif %}" + GEN, "is sequence"),
    ("{% if messages[0].get('x') is iterable %}s{% endif %}" + GEN, "is iterable"),
    ("{{ null }}" + GEN, "'null'"),
    ("{{ x|packcli_generation }}" + GEN, "packcli_generation"),
])
def test_the_static_gate_refuses_what_minijinja_would_answer_otherwise(text, why):
    reason = minijinja_refusal(text)
    assert reason is not None and why in reason, reason
    choice = choose_engine(text, "auto", moment=MOMENT, bos_token=None, eos_token=None)
    assert choice.engine == "jinja2" and why in choice.reason


def test_the_gate_lets_plain_templates_through():
    assert minijinja_refusal("{% for m in messages %}{{ m.role }}: {{ m.content | trim }}{% endfor %}" + GEN) is None
    assert minijinja_refusal("{% if x is iterable %}{% endif %}" + GEN) is None  # no .get(): no None it made


@pytest.mark.parametrize("value", [
    (1, 2),  # a tuple: JSON would print it as a list
    {1: "a"},  # a non-string key: JSON would turn it into "1"
    float("nan"),
    1e-5,  # Python prints 1e-05, minijinja 0.00001
    1e16,
    [{"content": None}],  # a None inside: minijinja loops over it as over nothing, jinja2 raises
    "\ud800",  # a lone surrogate: minijinja's strings cannot hold it
    {"when": datetime(2024, 1, 1)},
])
def test_data_minijinja_would_print_otherwise_goes_to_jinja2(value):
    """Declined (None: jinja2 renders the record), by the literal or by minijinja reading it."""
    template = MiniJinjaTemplate("{{ messages }}" + GEN, MOMENT)
    assert template.render({"messages": value}) is None
    assert template.render({"messages": [], "not an identifier": 1}) is None


def test_plain_data_reaches_minijinja_as_a_literal_it_reads_back_equal():
    data = {"messages": [{"role": "user", "content": 'é "q" \\ \n\t😀 </s>', "n": 3, "f": 2.5, "ok": True}],
            "tools": None}
    literal = data_literal(data)
    assert literal is not None
    env = minijinja.Environment(pycompat=True)
    assert env.render_str(literal + "{{ messages|tojson }}|{{ tools is none }}") == (
        json.dumps(data["messages"], ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e") + "|True")


def test_a_template_cannot_touch_the_records_data_under_minijinja():
    """minijinja would let a template call a Python object's public methods: the data is a literal, so there
    is none to call, and the record is untouched even without the gate."""
    record = json.loads(json.dumps(CHAT))
    for evil in ("{{ messages.append(1) }}", "{% for m in messages %}{{ m.update({'role': 'x'}) }}{% endfor %}",
                 "{{ messages.__class__ }}{{ messages[0].items }}", "{{ raise_exception.__globals__ }}"):
        template = MiniJinjaTemplate(evil + GEN, MOMENT)
        out = template.render(variables(record))
        assert out is None or ("class" not in out[0] and "method" not in out[0] and "function" not in out[0]), out
    assert record == CHAT


def test_minijinja_errors_are_worded_by_jinja2():
    """``raise_exception`` or an unknown filter under minijinja: jinja2 renders the record and words the reject."""
    text = "{% if messages[0].role != 'system' %}{{ raise_exception('needs a system turn') }}{% endif %}" + GEN
    renderer = minijinja_renderer(text, LossPolicy.assistant)
    with pytest.raises(RenderError, match="^template raised: needs a system turn$"):
        renderer.render(chat_record())
    assert renderer.render_counts == {"minijinja": 0, "jinja2": 1, "checked": 0, "mismatches": 0}


def test_the_probe_refuses_a_template_minijinja_renders_otherwise():
    """Rust prints 10.0 ** 20 as 100000000000000000000.0, Python as 1e+20: the probe sees it and says so."""
    text = "{{ 10.0 ** 20 }}{% for m in messages %}{{ m.content }}{% endfor %}" + GEN
    choice = choose_engine(text, "minijinja", moment=MOMENT, bos_token=None, eos_token=None)
    assert choice.engine == "jinja2" and "otherwise than jinja2 (the texts differ)" in choice.reason


def test_the_cross_check_hands_the_rest_of_the_run_to_jinja2_on_a_difference():
    """A difference the probe did not see (the Renderer told minijinja directly): the first render is checked,
    jinja2's text is what comes out, and jinja2 renders every later record."""
    text = "{{ 10.0 ** 20 }}{% for m in messages %}{{ m.content }}{% endfor %}" + GEN
    renderer = minijinja_renderer(text)
    record = chat_record()
    assert renderer.render(record).text.startswith("1e+20ab")
    assert renderer.render(record).text.startswith("1e+20ab")
    assert renderer.render_counts == {"minijinja": 1, "jinja2": 1, "checked": 1, "mismatches": 1}
    assert "differ at character 1: jinja2 'e+20ab" in renderer.mismatch


def test_a_check_where_jinja2_raises_and_minijinja_renders_is_jinja2s_reject():
    """minijinja loops over a None it made as over nothing; jinja2 raises: the record is jinja2's reject."""
    text = "{% for x in messages[0].get('missing') %}{{ x }}{% endfor %}" + GEN
    renderer = minijinja_renderer(text, LossPolicy.assistant)
    with pytest.raises(RenderError, match="NoneType"):
        renderer.render(chat_record())
    assert renderer.render_counts["mismatches"] == 1 and "jinja2 raised" in renderer.mismatch


def test_records_after_the_first_are_checked_by_their_texts_hash(monkeypatch):
    """After CHECK_FIRST renders, a render is checked when its text's CRC-32 is 0 mod CHECK_PERIOD: the same
    text is checked on every run wherever it sits."""
    import zlib

    from packcli.chat import render
    from packcli.ingest import parse_record

    monkeypatch.setattr(render, "CHECK_PERIOD", 4)
    renderer = Renderer(ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}" + GEN, "t"),
                        LossPolicy.all, bos_token=None, eos_token=None, engine="minijinja")
    texts = [f"q{i}" for i in range(CHECK_FIRST + 40)]
    for i, text in enumerate(texts):
        chat = {"messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "a"}]}
        renderer.render(parse_record(json.dumps(chat).encode(), file_index=0, line=i + 1))
    later = sum(zlib.crc32(f"{t}a\ufdd0x\ufdd1".encode()) % 4 == 0 for t in texts[CHECK_FIRST:])
    assert 0 < later < 40
    assert renderer.render_counts["checked"] == CHECK_FIRST + later


def test_a_runaway_template_stops_at_the_fuel_bound():

    text = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + GEN
    renderer = minijinja_renderer(text, LossPolicy.assistant)
    with pytest.raises(RenderError, match="bound of 20,000,000 instructions"):
        renderer.render(chat_record())


def test_an_output_past_the_size_bound_is_rejected(monkeypatch):

    monkeypatch.setattr(engines, "MAX_OUTPUT_CHARS", 100)
    text = "{{ 'y' * 200 }}" + GEN
    renderer = minijinja_renderer(text, LossPolicy.assistant)
    with pytest.raises(RenderError, match="longer than 100 characters"):
        renderer.render(chat_record())


def test_without_minijinja_auto_is_jinja2_and_asking_for_it_is_an_error(monkeypatch):
    from packcli.errors import InputError

    monkeypatch.setattr(engines, "minijinja_version", lambda: None)
    choice = choose_engine(GEN, "auto", moment=MOMENT, bos_token=None, eos_token=None)
    assert choice.engine == "jinja2" and "not installed" in choice.reason
    with pytest.raises(InputError, match="minijinja is not installed"):
        choose_engine(GEN, "minijinja", moment=MOMENT, bos_token=None, eos_token=None)
    assert choose_engine(GEN, "jinja2", moment=MOMENT, bos_token=None, eos_token=None).reason == "asked for"


def test_auto_never_takes_an_engine_slower_on_the_probe(monkeypatch):
    """The timing decides under auto: told minijinja takes longer, auto keeps jinja2 and says by how much."""
    times = iter([1.0, 2.0])
    monkeypatch.setattr(engines, "_seconds", lambda work, repeats=3: next(times))
    text = "{% for m in messages %}{{ m.content }}{% endfor %}" + GEN
    choice = choose_engine(text, "auto", moment=MOMENT, bos_token=None, eos_token=None)
    assert choice.engine == "jinja2" and "not faster (2.00x" in choice.reason


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_pack_records_the_render_engine_unhashed_and_the_artifact_is_the_same(tmp_path, monkeypatch, engine):
    """The committed fixture artifact's command, under each engine: the same manifest hash as the committed one."""
    from typer.testing import CliRunner

    from packcli.cli import app

    monkeypatch.chdir(ROOT)  # the manifest pins the inputs as given: relative, as the fixture was made
    inputs = sorted(str(p.relative_to(ROOT)) for p in (FIXTURES / "corpus").glob("*.jsonl"))
    inputs += sorted(str(p.relative_to(ROOT)) for p in (FIXTURES / "corpus").glob("*.jsonl.gz"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["pack", *inputs, "-t", "fixtures/tokenizer", "-o", str(out), "-c", "1024",
                                      "--packs-per-shard", "16", "--overlong", "truncate", "--render-backend", engine,
                                      "--json"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    committed = json.loads((FIXTURES / "packed" / "manifest.json").read_text())
    assert manifest["manifest_sha256"] == committed["manifest_sha256"]
    rendering = manifest["unhashed"]["rendering"]
    assert rendering["asked"] == engine and rendering["engine"] == engine
    records = rendering["records"]
    assert records["mismatches"] == 0 and records[engine] > 0
    assert records["minijinja" if engine == "jinja2" else "jinja2"] == 0
    assert (records["checked"] >= CHECK_FIRST) == (engine == "minijinja")


def test_a_process_without_minijinja_renders_with_jinja2_alike(monkeypatch):
    """A worker (a Ray node) told minijinja but without it renders with jinja2: the same text, counted as jinja2's."""
    monkeypatch.setattr(engines, "minijinja_version", lambda: None)
    text = "{% for m in messages %}{{ m.content }}{% endfor %}" + GEN
    renderer = minijinja_renderer(text)
    assert renderer.render(chat_record()).text == "abx"
    assert renderer.render_counts["jinja2"] == 1 and renderer.render_counts["minijinja"] == 0


def test_a_template_minijinja_cannot_compile_is_jinja2s(monkeypatch):
    """A template jinja2 compiles and minijinja refuses (fed as minijinja's own compile error): jinja2 renders it."""
    def refuse(self, text, moment):
        raise minijinja.TemplateError("syntax error: unexpected token")

    monkeypatch.setattr(MiniJinjaTemplate, "__init__", refuse)
    engines.compile_minijinja.cache_clear()
    text = "{% for m in messages %}{{ m.content }}|{% endfor %}" + GEN
    choice = choose_engine(text, "minijinja", moment=MOMENT, bos_token=None, eos_token=None)
    assert choice.engine == "jinja2" and choice.reason == "minijinja cannot compile this template"
    renderer = minijinja_renderer(text)
    assert renderer.render(chat_record()).text == "a|b|x"
    assert renderer.render_counts["jinja2"] == 1
    engines.compile_minijinja.cache_clear()
