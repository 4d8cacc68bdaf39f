"""Chat messages as a chat template sees them: validated, in the shape the record has them.

A template reads whatever a message carries (``tool_calls``, ``reasoning_content``, ``thinking``,
``name``, content as a string or as a list of parts) and the record's ``tools`` and ``documents``, so
every field is handed over as it is, the way transformers' ``apply_chat_template`` does: keys whose
value is null are dropped, and reasoning given under one of its names (``reasoning_content``,
``thinking``, ``reasoning``) is also given under the other two (``_alias_reasoning``, as transformers
5 does), so a template that reads another name than the data uses still sees it.

What is validated is what a template cannot be trusted to notice: a tool call without a function
name, arguments that are neither an object nor a JSON string of one, a tool result with no call
before it, a part that is not text. Each is a rejection naming the field, never a traceback inside
the template. ShareGPT records (``conversations``) are converted to the same messages, with
LLaMA-Factory's top-level ``system`` and ``tools``, its ``function_call``/``observation`` turns,
and axolotl's per-turn ``weight``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

ROLES = frozenset({"system", "user", "assistant", "tool"})
SHAREGPT_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "assistant": "assistant", "bing": "assistant", "bard": "assistant",
    "system": "system", "tool": "tool", "function": "tool", "observation": "tool",
    "function_call": "assistant",  # LLaMA-Factory: the value is the call, as JSON
}
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # transformers' order: the first is standard
# Record-level fields handed to the template as variables (TRL's dataset columns of the same names).
TEMPLATE_KWARGS = ("tools", "documents")
RESERVED_KWARGS = frozenset({"messages", "tools", "documents", "add_generation_prompt"})
# Message keys packcli itself consumes: never counted as "ignored by the template".
CONSUMED_KEYS = frozenset({"role", "content", "weight"})


class Invalid(Exception):
    """A record failed validation; its message is the rejection reason (it names the field)."""


def chat_messages(obj: dict, key: str) -> tuple[tuple[dict, ...], frozenset[int]]:
    """The messages of an OpenAI-style record (``messages``), and the indices of those with ``weight: 0``.

    Raises:
        Invalid: a turn, its role, content, tool calls or weight is malformed.
    """
    turns = _turn_list(obj, key)
    messages = []
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, dict):
            raise Invalid(f"{where}: expected an object, got {type_name(turn)}")
        role = turn.get("role")
        if not isinstance(role, str):
            raise Invalid(f"{where}.role: expected a string, got {type_name(role)}")
        if role not in ROLES:
            raise Invalid(f"{where}.role: unknown role {role!r}")
        messages.append(_message(turn, where, role))
    return _finish(messages, key)


def sharegpt_messages(obj: dict, key: str) -> tuple[tuple[dict, ...], frozenset[int]]:
    """The messages of a ShareGPT record (``conversations`` of ``{from, value}``), converted to OpenAI's shape.

    A top-level ``system`` string becomes the first message (LLaMA-Factory); a ``function_call`` turn
    becomes an assistant message whose ``tool_calls`` its value holds, as JSON (one call or a list).

    Raises:
        Invalid: as `chat_messages`, and a ``system`` given both as a field and as the first turn.
    """
    turns = _turn_list(obj, key)
    messages = []
    system = obj.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise Invalid(f"system: expected a string, got {type_name(system)}")
        if isinstance(turns[0], dict) and SHAREGPT_ROLES.get(str(turns[0].get("from")).lower()) == "system":
            raise Invalid("system: given both as a field and as the first turn; keep one")
        if system:
            messages.append({"role": "system", "content": system})
    for i, turn in enumerate(turns):
        where = f"{key}[{i}]"
        if not isinstance(turn, dict):
            raise Invalid(f"{where}: expected an object, got {type_name(turn)}")
        source = turn.get("from")
        if not isinstance(source, str):
            raise Invalid(f"{where}.from: expected a string, got {type_name(source)}")
        role = SHAREGPT_ROLES.get(source.lower())
        if role is None:
            raise Invalid(f"{where}.from: unknown role {source!r}")
        fields = {k: v for k, v in turn.items() if k not in ("from", "value")}
        value = turn.get("value")
        if source.lower() == "function_call":
            if not isinstance(value, str):
                raise Invalid(f"{where}.value: expected the call as a JSON string, got {type_name(value)}")
            calls = _json(value, f"{where}.value")
            calls = [{"type": "function", "function": c} for c in (calls if isinstance(calls, list) else [calls])]
            _tool_calls(calls, f"{where}.value")
            fields.update(content="", tool_calls=calls)
        else:
            fields["content"] = value
        messages.append(_message({"role": role, **fields}, where, role, content_key="value"))
    return _finish(messages, key)


def template_kwargs(obj: dict) -> dict:
    """The record's template variables: ``tools``, ``documents``, and the entries of ``chat_template_kwargs``.

    Raises:
        Invalid: a malformed tools list (or JSON string of one), documents list, or kwargs object.
    """
    kwargs: dict = {}
    tools = obj.get("tools")
    if tools is not None:
        kwargs["tools"] = _tools(_json(tools, "tools") if isinstance(tools, str) else tools)
    documents = obj.get("documents")
    if documents is not None:
        if not isinstance(documents, list) or not all(isinstance(d, dict) for d in documents):
            raise Invalid("documents: expected a list of objects")
        kwargs["documents"] = documents
    extra = obj.get("chat_template_kwargs")
    if extra is not None:
        if not isinstance(extra, dict):
            raise Invalid(f"chat_template_kwargs: expected an object, got {type_name(extra)}")
        clash = sorted(RESERVED_KWARGS & extra.keys())
        if clash:
            raise Invalid(f"chat_template_kwargs.{clash[0]}: reserved; give it as a field of the record")
        kwargs.update(extra)
    return kwargs


def content_texts(content: object) -> list[str]:
    """The text of a message's content: the string, or each text part's text."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [part["text"] for part in content]
    return []


def type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _turn_list(obj: dict, key: str) -> list:
    turns = obj.get(key)
    if not isinstance(turns, list):
        raise Invalid(f"{key}: expected a list of turns, got {type_name(turns)}")
    if not turns:
        raise Invalid(f"{key}: empty conversation")
    return turns


def _message(turn: dict, where: str, role: str, *, content_key: str = "content") -> dict:
    """One message as the template will see it: null values dropped, fields checked, reasoning aliased."""
    message = {k: v for k, v in turn.items() if v is not None}
    message["role"] = role
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            raise Invalid(f"{where}.tool_calls: only an assistant message makes tool calls")
        _tool_calls(calls, f"{where}.tool_calls")
    content = message.get("content")
    if content is None:
        if not calls:
            raise Invalid(f"{where}.{content_key}: expected a string or a list of text parts, got null")
    elif not isinstance(content, str):
        _parts(content, f"{where}.{content_key}")
    for field in REASONING_FIELDS:
        if field in message and not isinstance(message[field], str):
            raise Invalid(f"{where}.{field}: expected a string, got {type_name(message[field])}")
    if "tool_call_id" in message and not isinstance(message["tool_call_id"], str):
        raise Invalid(f"{where}.tool_call_id: expected a string, got {type_name(message['tool_call_id'])}")
    weight = message.get("weight", 1)
    if type(weight) not in (int, float) or weight not in (0, 1):
        raise Invalid(f"{where}.weight: expected 0 (do not train on this turn) or 1, got {weight!r}")
    return _alias_reasoning(message)


def _alias_reasoning(message: dict) -> dict:
    reasoning = next((message[k] for k in REASONING_FIELDS if k in message), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def _finish(messages: list[dict], key: str) -> tuple[tuple[dict, ...], frozenset[int]]:
    """Check that every tool result follows a call, and collect the turns not to train on."""
    calls: list[dict] | None = None  # the tool calls still open: the last assistant turn's, until a user turn
    caller = -1
    for i, message in enumerate(messages):
        role = message["role"]
        if role == "assistant":
            calls, caller = (message.get("tool_calls") or None), i
        elif role == "tool":
            if calls is None:
                raise Invalid(f"{key}[{i}]: a tool result with no tool call before it")
            wanted = message.get("tool_call_id")
            ids = [c["id"] for c in calls if isinstance(c.get("id"), str)]
            if wanted is not None and ids and wanted not in ids:
                raise Invalid(f"{key}[{i}].tool_call_id: {wanted!r} matches no call of {key}[{caller}]")
        else:
            calls = None
    untrained = frozenset(i for i, m in enumerate(messages) if m.get("weight", 1) == 0)
    return tuple(messages), untrained


def _tool_calls(calls: object, where: str) -> None:
    if not isinstance(calls, list):
        raise Invalid(f"{where}: expected a list, got {type_name(calls)}")
    for j, call in enumerate(calls):
        if not isinstance(call, dict):
            raise Invalid(f"{where}[{j}]: expected an object, got {type_name(call)}")
        function, path = (call["function"], f"{where}[{j}].function") if "function" in call else (call, f"{where}[{j}]")
        if not isinstance(function, dict):
            raise Invalid(f"{path}: expected an object, got {type_name(function)}")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise Invalid(f"{path}.name: expected the function's name, got {type_name(name)}")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if not isinstance(_json(arguments, f"{path}.arguments"), dict):
                raise Invalid(f"{path}.arguments: expected a JSON object, got a JSON string of something else")
        elif not isinstance(arguments, dict):
            raise Invalid(f"{path}.arguments: expected an object or a JSON string of one, got {type_name(arguments)}")


def _tools(tools: object) -> list:
    if not isinstance(tools, list):
        raise Invalid(f"tools: expected a list of function schemas, got {type_name(tools)}")
    for j, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise Invalid(f"tools[{j}]: expected an object, got {type_name(tool)}")
        function, path = (tool["function"], f"tools[{j}].function") if "function" in tool else (tool, f"tools[{j}]")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise Invalid(f"{path}.name: expected the function's name")
    return tools


def _parts(content: object, where: str) -> None:
    if not isinstance(content, list):
        raise Invalid(f"{where}: expected a string or a list of text parts, got {type_name(content)}")
    for j, part in enumerate(content):
        if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
            kind = part.get("type") if isinstance(part, dict) else None
            detail = f"a {kind!r} part; packcli packs text only" if isinstance(kind, str) and kind != "text" else \
                "expected a text part {'type': 'text', 'text': ...}"
            raise Invalid(f"{where}[{j}]: {detail}")


def _json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Invalid(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None


def walk_strings(value: object, visit: Callable[[str], None]) -> None:
    """Call ``visit`` on every string inside ``value`` (dict keys and values, list items)."""
    if isinstance(value, str):
        visit(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            visit(k)
            walk_strings(v, visit)
    elif isinstance(value, (list, tuple)):
        for item in value:
            walk_strings(item, visit)
