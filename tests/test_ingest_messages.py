"""`packcli.ingest.messages`: OpenAI and ShareGPT turns as the template sees them (content keeps its shape, every
field and record kwarg reaches it, ShareGPT aliases), and bad tool data rejected naming the field."""

from __future__ import annotations

import json

import pytest
from conftest import parse_line

from packcli.choices import Format
from packcli.ingest import Kind, Record, Rejection


def test_openai_messages_keep_the_shape_of_their_content():
    """Content goes to the template as the record has it: a list of parts stays a list (transformers does the same)."""
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    rec = parse_line({"messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "c"}]})
    assert isinstance(rec, Record) and rec.kind is Kind.chat and rec.format is Format.messages
    assert rec.messages == ({"role": "user", "content": parts}, {"role": "assistant", "content": "c"})


def test_every_message_field_and_record_kwarg_reaches_the_template():
    """Tool calls, tool results, names and reasoning are kept; nulls dropped; reasoning under all its names."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    obj = {"tools": tools, "documents": [{"title": "t", "text": "d"}], "chat_template_kwargs": {"enable_thinking": False},
           "id": "not-a-template-variable",
           "messages": [{"role": "user", "content": "q", "name": "ann"},
                        {"role": "assistant", "content": None, "reasoning_content": "think",
                         "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                        {"role": "tool", "tool_call_id": "1", "name": "f", "content": "r"},
                        {"role": "assistant", "thinking": "t2", "content": "a"}]}
    rec = parse_line(obj)
    assert rec.template_kwargs == {"tools": tools, "documents": obj["documents"], "enable_thinking": False}
    user, call, result, answer = rec.messages
    assert user == {"role": "user", "content": "q", "name": "ann"}
    assert "content" not in call and call["tool_calls"] == obj["messages"][1]["tool_calls"]
    assert call["reasoning_content"] == call["thinking"] == "think"
    assert result == obj["messages"][2]
    assert answer["reasoning_content"] == answer["thinking"] == "t2"


def test_tools_given_as_a_json_string_are_parsed():
    tools = [{"name": "f", "parameters": {}}]
    rec = parse_line({"tools": json.dumps(tools), "messages": [{"role": "user", "content": "q"}]})
    assert rec.template_kwargs["tools"] == tools


@pytest.mark.parametrize("alias,role", [("human", "user"), ("gpt", "assistant"), ("chatgpt", "assistant"),
                                        ("bing", "assistant"), ("bard", "assistant"), ("system", "system")])
def test_sharegpt_role_aliases(alias, role):
    rec = parse_line({"conversations": [{"from": alias, "value": "x"}]})
    assert rec.messages[0]["role"] == role and rec.format is Format.sharegpt


def test_sharegpt_top_level_system_tools_function_calls_and_weights():
    """LLaMA-Factory's ``system``/``tools``/``function_call``/``observation`` and axolotl's ``weight``."""
    call = {"name": "f", "arguments": {"x": 1}}
    rec = parse_line({"system": "be brief", "tools": '[{"name": "f"}]', "conversations": [
        {"from": "human", "value": "q"}, {"from": "function_call", "value": json.dumps(call)},
        {"from": "observation", "value": "r"}, {"from": "gpt", "value": "a", "weight": 0},
        {"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2", "weight": 1}]})
    assert [m["role"] for m in rec.messages] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert rec.messages[0] == {"role": "system", "content": "be brief"}
    assert rec.messages[2]["tool_calls"] == [{"type": "function", "function": call}]
    assert rec.template_kwargs == {"tools": [{"name": "f"}]}
    assert rec.untrained == frozenset({4})  # the system message moved every index by one


USER = {"role": "user", "content": "q"}



def _call(function, **extra):
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": function, **extra}]}


@pytest.mark.parametrize("obj,reason", [
    ({"messages": [USER, _call({"arguments": {}})]}, "messages[1].tool_calls[0].function.name: expected the function's name"),
    ({"messages": [USER, _call({"name": "", "arguments": {}})]}, "messages[1].tool_calls[0].function.name"),
    ({"messages": [USER, _call({"name": "f", "arguments": 3})]},
     "messages[1].tool_calls[0].function.arguments: expected an object or a JSON string of one, got number"),
    ({"messages": [USER, _call({"name": "f", "arguments": "{not json"})]},
     "messages[1].tool_calls[0].function.arguments: not valid JSON"),
    ({"messages": [USER, _call({"name": "f", "arguments": "[1]"})]}, "function.arguments: expected a JSON object"),
    ({"messages": [USER, _call({"name": "f"})]}, "function.arguments: expected an object or a JSON string of one, got null"),
    ({"messages": [USER, {"role": "assistant", "content": "", "tool_calls": {"name": "f"}}]},
     "messages[1].tool_calls: expected a list, got object"),
    ({"messages": [USER, {"role": "tool", "content": "r"}]}, "messages[1]: a tool result with no tool call before it"),
    ({"messages": [USER, _call({"name": "f", "arguments": {}}, id="a"), USER, {"role": "tool", "content": "r"}]},
     "messages[3]: a tool result with no tool call before it"),
    ({"messages": [USER, _call({"name": "f", "arguments": {}}, id="a"), {"role": "tool", "tool_call_id": "b", "content": "r"}]},
     "messages[2].tool_call_id: 'b' matches no call of messages[1]"),
    ({"messages": [{"role": "user", "content": "q", "tool_calls": []}]}, "messages[0].tool_calls: only an assistant"),
    ({"messages": [USER, {"role": "assistant", "content": None}]}, "messages[1].content: expected a string or a list"),
    ({"messages": [USER, {"role": "assistant", "content": "a", "reasoning_content": 5}]},
     "messages[1].reasoning_content: expected a string, got number"),
    ({"messages": [USER, {"role": "assistant", "content": "a", "weight": 0.5}]}, "messages[1].weight: expected 0"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}], "messages": [USER]},
     "tools[0].function.name: expected the function's name"),
    ({"tools": "[oops", "messages": [USER]}, "tools: not valid JSON"),
    ({"tools": {"name": "f"}, "messages": [USER]}, "tools: expected a list of function schemas, got object"),
    ({"documents": ["x"], "messages": [USER]}, "documents: expected a list of objects"),
    ({"chat_template_kwargs": {"messages": []}, "messages": [USER]}, "chat_template_kwargs.messages: reserved"),
    ({"system": "s", "conversations": [{"from": "system", "value": "s2"}, {"from": "human", "value": "q"}]},
     "system: given both as a field and as the first turn"),
    ({"system": 3, "conversations": [{"from": "human", "value": "q"}]}, "system: expected a string, got number"),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": '{"arguments": {}}'}]},
     "conversations[1].value[0].function.name"),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "observation", "value": "r"}]},
     "conversations[1]: a tool result with no tool call before it"),
    ({"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a", "weight": 2}]},
     "conversations[1].weight: expected 0 (do not train on this turn) or 1, got 2"),
])
def test_bad_tool_data_is_a_rejection_naming_the_field(obj, reason):
    """Never a traceback inside the template: each malformed tool field is the record's reject, file:line kept."""
    rej = parse_line(obj)
    assert isinstance(rej, Rejection), rej
    assert reason in rej.reason and rej.line == 7
