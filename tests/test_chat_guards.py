"""Pack's guards judge each message where it was rendered (packcli.chat.guards), on every training template.

The ground truth never comes from the guard: each record is rendered a second time with every tool-call
name, argument value and tool result replaced by a marker that occurs nowhere else, so a marker missing
from the text is a field the template dropped. The guard must reject exactly those records, on the
realistic version too, where the same words also stand in the tools schema, the user's question and
the final answer (where a search of the whole text finds them).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path

import pytest
from conftest import ASSETS

from packcli.chat import ChatTemplate, Renderer, RenderError
from packcli.choices import LossPolicy
from packcli.ingest import parse_record


def training_templates() -> dict[str, str]:
    """TRL's training templates in the test assets, and the ones the installed TRL ships (lfm2, deepseek, ...)."""
    found = {p.stem: p.read_text(encoding="utf-8") for p in sorted((ASSETS / "templates").glob("*_training.jinja"))}
    try:
        shipped = resources.files("trl") / "chat_templates"
    except ModuleNotFoundError:
        return found
    for entry in sorted(shipped.iterdir(), key=lambda e: e.name):
        if entry.name.endswith("_training.jinja"):
            found.setdefault(entry.name.removesuffix(".jinja"), entry.read_text(encoding="utf-8"))
    return found


TEMPLATES = training_templates()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string"}, "unit": {"type": "string"}}}}}]


def tool_record(content: str = "") -> dict:
    """A call whose function name is in the tools schema and the question, whose result the answer repeats."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                         "arguments": {"city": "Paris", "unit": "celsius"}}}
    return {"tools": TOOLS, "messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Please use get_weather: is it celsius 22 and sunny in Paris?"},
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "22 and sunny"},
        {"role": "assistant", "content": "get_weather says: 22 and sunny, celsius, in Paris."}]}


def marked(record: dict) -> dict:
    """The same record with every content, tool-call name, argument value and tool result a word found
    nowhere else."""
    out = copy.deepcopy(record)
    for i, message in enumerate(out["messages"]):
        if message["content"]:
            message["content"] = f"zqcontent{i}"
        for j, call in enumerate(message.get("tool_calls") or ()):
            call["function"]["name"] = f"zqname{i}x{j}"
            call["function"]["arguments"] = {key: f"zqarg{i}x{j}{key}" for key in call["function"]["arguments"]}
    return out


def markers(record: dict) -> dict[str, str]:
    """marker -> the field it stands for ("content", "tool result" or "tool_calls")."""
    found = {}
    for message in record["messages"]:
        if message["content"]:
            found[message["content"]] = "tool result" if message["role"] == "tool" else "content"
        for call in message.get("tool_calls") or ():
            found[call["function"]["name"]] = "tool_calls"
            found.update((value, "tool_calls") for value in call["function"]["arguments"].values())
    return found


def render(text: str, record: dict, allow: frozenset[str] = frozenset()):
    renderer = Renderer(ChatTemplate(text, "t"), LossPolicy.all, bos_token="<s>", eos_token="</s>", allow_dropped=allow)
    return renderer.render(parse_record(json.dumps(record).encode(), file_index=0, line=1))


def plain_text(text: str, record: dict) -> str | None:
    """The template's text of ``record`` straight from the sandbox, guards aside (None: the template raises)."""
    renderer = Renderer(ChatTemplate(text, "t"), LossPolicy.all, bos_token="<s>", eos_token="</s>")
    try:
        return renderer._run(parse_record(json.dumps(record).encode(), file_index=0, line=1).messages,
                             {"tools": record.get("tools")})[0]
    except RenderError:
        return None


@pytest.mark.parametrize("content", ["", "Let me check."], ids=["empty-content", "with-content"])
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_a_dropped_tool_call_or_result_is_caught_where_the_words_also_stand_elsewhere(name, content):
    record = tool_record(content)
    truth = plain_text(TEMPLATES[name], marked(record))
    if truth is None:
        pytest.skip(f"{name} cannot render tool records at all (the template raises: every such record is a reject)")
    lost = {field for marker, field in markers(marked(record)).items() if marker not in truth}
    for version in (record, marked(record)):
        if not lost:
            assert render(TEMPLATES[name], version).dropped == frozenset()
            continue
        with pytest.raises(RenderError) as caught:
            render(TEMPLATES[name], version)
        reason = str(caught.value)
        if lost == {"tool_calls"}:
            assert "tool_calls[0]" in reason and "--allow-dropped-fields tool_calls" in reason, reason
            assert render(TEMPLATES[name], version, frozenset({"tool_calls"})).dropped == {"tool_calls"}
        elif "content" in lost:
            assert "content lost in rendering" in reason, reason
        else:
            assert "message 3 (tool): the tool result is lost" in reason, reason


PARTS = [{"type": "text", "text": "Zqparts one."}, {"type": "text", "text": "Zqparts two."}]


@pytest.mark.parametrize("content", [PARTS, []], ids=["parts", "empty-list"])
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_content_parts_are_never_trained_on_as_a_printed_list(name, content):
    """Parts joined as the template joins them, never the list printed (JSON, Python's repr, or ``[]``)."""
    record = {"messages": [{"role": "user", "content": "Say it."}, {"role": "assistant", "content": content},
                           {"role": "user", "content": content or "Again?"}, {"role": "assistant", "content": "Done."}]}
    text = plain_text(TEMPLATES[name], record)
    if text is None:
        pytest.skip(f"{name} cannot render this content shape at all (a reject)")
    empty = plain_text(TEMPLATES[name], {"messages": [dict(m, content=m["content"] if m["content"] != content else "")
                                                      for m in record["messages"]]})
    printed = "'type': 'text'" in text or '"type": "text"' in text or '"type":"text"' in text or (
        content == [] and "[]" in text and "[]" not in (empty or ""))
    lost = not all(piece in text for m in record["messages"] for piece in
                   ([m["content"]] if isinstance(m["content"], str) else [part["text"] for part in m["content"]]))
    if printed or lost:
        with pytest.raises(RenderError, match="printed the list of content parts as text|content lost"):
            render(TEMPLATES[name], record)
    else:
        assert render(TEMPLATES[name], record).text == text


def test_the_red_team_cases(tmp_path):
    """lfm2 prints the tools schema but never the calls; llama3 and phi3 print neither, the name in the question;
    phi3 drops the tool message the answer repeats; lfm2 prints parts as JSON; llama3 prints an empty list as
    ``[]``: each is a reject naming the message and the field."""
    cases = [("lfm2_training", tool_record(), "message 2 (assistant): tool_calls[0] (get_weather) lost in rendering"),
             ("lfm2_training", dict(tool_record(), messages=tool_record()["messages"][1:]),
              "message 1 (assistant): tool_calls[0] (get_weather) lost in rendering"),
             ("llama3_training", tool_record(), "message 2 (assistant): tool_calls[0] (get_weather) lost in rendering"),
             ("phi3_training", tool_record(), "message 3 (tool): the tool result is lost in rendering (the template "
                                              "does not print it in its turn; its text is found only inside message 4's)"),
             ("phi3_training", dict(tool_record(), messages=tool_record()["messages"][:3]),
              "message 2 (assistant): tool_calls[0] (get_weather) lost in rendering"),
             ("lfm2_training", {"messages": [{"role": "user", "content": "Hi"},
                                             {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}]},
              'message 1 (assistant): the template printed the list of content parts as text ({"type": "text"'),
             ("llama3_training", {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": []},
                                               {"role": "user", "content": "Hm?"},
                                               {"role": "assistant", "content": "Hello."}]},
              "message 1 (assistant): the template printed the list of content parts as text ([])")]
    for name, record, reason in cases:
        with pytest.raises(RenderError) as caught:
            render(TEMPLATES[name], record)
        assert str(caught.value).startswith(reason), (name, str(caught.value))


def test_a_tool_result_the_answer_repeats_is_not_taken_for_its_own_turn():
    """A template that drops tool messages, where the final answer repeats the result (phi3 with tools)."""
    template = ("{% for m in messages %}{% if m.role != 'tool' %}<{{ m.role }}>{{ m.content }}"
                "{% for c in m.tool_calls or [] %}[{{ c.function.name }}({{ c.function.arguments | tojson }})]"
                "{% endfor %}</{{ m.role }}>{% endif %}{% endfor %}")
    with pytest.raises(RenderError, match=r"message 3 \(tool\): the tool result is lost in rendering \(the template "
                                          r"does not print it in its turn; its text is found only inside message 4's\)"):
        render(template, tool_record())


def test_a_system_prompt_folded_into_the_first_user_turn_is_kept(tmp_path):
    """Gemma and Llama 2 print the system prompt inside the first user turn: kept, not lost."""
    name = "gemma3_training" if "gemma3_training" in TEMPLATES else None
    if name is None:
        pytest.skip("TRL's gemma3_training template is not installed")
    record = {"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello."}]}
    out = render(TEMPLATES[name], record)
    assert out.text.index("Be terse.") < out.text.index("Hi")


def test_repeated_short_replies_are_each_found_in_their_round():
    """Thousands of turns of the same short replies: each is placed in its own round, in one pass."""
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    messages = [{"role": "user" if k % 2 == 0 else "assistant", "content": "ok" if k % 3 else f"turn {k}"}
                for k in range(4000)]
    assert render(template, {"messages": messages}).text.count("<assistant>ok</assistant>") > 100
    dropping = template.replace("{{ m.content }}", "{% if loop.index0 != 2997 %}{{ m.content }}{% endif %}")
    with pytest.raises(RenderError, match=r"message 2997 \(assistant\): content lost"):
        render(dropping, {"messages": messages})


@pytest.mark.parametrize("arguments", ['{"city": "Paris", "unit": "celsius"}', {"city": "Paris", "unit": "celsius"}],
                         ids=["json-string", "object"])
def test_arguments_are_pieces_whatever_their_spelling(arguments):
    """Arguments given as an object or as a JSON string: each key and value must be in the call's turn, as JSON,
    Python, or key=value; a template that prints the name but drops an argument is caught."""
    record = tool_record()
    record["messages"][2]["tool_calls"][0]["function"]["arguments"] = arguments
    prints = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% for c in m.tool_calls or [] %}"
              "{{ c.function.name }}{ARGS}{% endfor %}</{{ m.role }}>{% endfor %}")
    for args, kept in (("({{ c.function.arguments }})", True),
                       ("(city={{ (c.function.arguments | string).split('celsius')[0] }})", False)):
        template = prints.replace("{ARGS}", args)
        if kept:
            assert render(template, record).dropped == frozenset()
        else:
            with pytest.raises(RenderError, match=r"tool_calls\[0\] \(get_weather\) arguments.unit lost"):
                render(template, record)


def test_allow_dropped_fields_packs_counts_and_verifies(tmp_path, tokenizer_dir):
    """lfm2_training never prints tool calls: without the flag every tool record is a reject naming the call;
    with --allow-dropped-fields tool_calls they are packed, counted in the manifest and the summary, and verify
    re-renders them and recounts."""
    import sys

    from conftest import write_jsonl
    from typer.testing import CliRunner

    from packcli.cli import app
    from packcli.verify import verify_artifact

    sys.path.insert(0, str(Path(__file__).parent))
    from chat_data import tool_conversations

    template = tmp_path / "lfm2_training.jinja"
    template.write_text(TEMPLATES["lfm2_training"], encoding="utf-8")
    plain = [{"messages": [{"role": "user", "content": f"Question {k}?"}, {"role": "assistant", "content": f"A{k}."}]}
             for k in range(30)]
    tools = tool_conversations(20, reasoning=False)
    for message in (m for r in tools for m in r["messages"] if m.get("content") is None):
        message["content"] = ""  # lfm2 prints content | tojson: a missing one fails the template
    data = write_jsonl(tmp_path / "tools.jsonl", tools + plain)
    base = ["pack", str(data), "-t", str(tokenizer_dir), "--template", str(template), "-c", "2048", "--json"]
    strict = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "strict")])
    assert strict.exit_code == 0, strict.output
    assert json.loads(strict.stdout)["counts"]["rejected"] == 20
    reasons = (tmp_path / "strict" / "rejects.jsonl").read_text(encoding="utf-8")
    assert reasons.count("tool_calls[0]") == 20 and "--allow-dropped-fields tool_calls" in reasons
    allowed = CliRunner().invoke(app, [*base, "-o", str(tmp_path / "allowed"), "--allow-dropped-fields", "tool_calls"])
    assert allowed.exit_code == 0, allowed.output
    counts = json.loads(allowed.stdout)["counts"]
    assert counts["rejected"] == 0 and counts["dropped_fields"] == {"tool_calls": 20}
    manifest = json.loads((tmp_path / "allowed" / "manifest.json").read_text())
    assert manifest["config"]["allow_dropped_fields"] == ["tool_calls"]
    assert "allow_dropped_fields" not in json.loads((tmp_path / "strict" / "manifest.json").read_text())["config"]
    assert verify_artifact(tmp_path / "allowed").ok
    shown = CliRunner().invoke(app, [*base[:-1], "-o", str(tmp_path / "shown"), "--allow-dropped-fields",
                                     "tool_calls"])
    assert "tool_calls dropped by the template" in shown.output and "20 records" in shown.output
