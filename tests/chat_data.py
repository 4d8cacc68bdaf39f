"""Tool-calling and reasoning conversations, written for these tests (seeded, so every run sees the same).

Each record is what a user preparing function-calling SFT data has: OpenAI ``tools`` schemas, assistant
``tool_calls`` (arguments as an object, or as a JSON string), ``tool`` results answering them by id,
``reasoning_content`` on some assistant turns, and a final answer; some continue with a second question.
"""

from __future__ import annotations

import json
import random

CITIES = ["Paris", "Zürich", "東京", "São Paulo", "Київ", "Nairobi", "Reykjavík", "مراكش"]
TOOLS = {
    "get_weather": {"description": "Current weather for a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                     "unit": {"type": "string", "enum": ["C", "F"]}},
                                   "required": ["city"]}},
    "convert_currency": {"description": "Convert an amount between currencies.",
                         "parameters": {"type": "object", "properties": {"amount": {"type": "number"},
                                                                          "from": {"type": "string"},
                                                                          "to": {"type": "string"}},
                                        "required": ["amount", "from", "to"]}},
    "search_flights": {"description": "Flights between two cities on a date.",
                       "parameters": {"type": "object", "properties": {"origin": {"type": "string"},
                                                                        "destination": {"type": "string"},
                                                                        "date": {"type": "string"}}}},
}


def _arguments(rng: random.Random, name: str) -> dict:
    if name == "get_weather":
        return {"city": rng.choice(CITIES), "unit": rng.choice("CF")}
    if name == "convert_currency":
        return {"amount": rng.randint(1, 999), "from": "EUR", "to": rng.choice(["USD", "JPY", "CHF"])}
    return {"origin": rng.choice(CITIES), "destination": rng.choice(CITIES), "date": f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}"}


def tool_conversations(n: int, *, seed: int = 0, string_arguments: bool = True, reasoning: bool = True,
                       system: bool = True) -> list[dict]:
    """``n`` records: tools, one or two rounds of calls with results, a final answer, sometimes a follow-up."""
    rng = random.Random(seed)
    records = []
    for k in range(n):
        names = rng.sample(sorted(TOOLS), rng.randint(1, 3))
        tools = [{"type": "function", "function": {"name": name, **TOOLS[name]}} for name in names]
        messages = []
        if system and rng.random() < 0.5:
            messages.append({"role": "system", "content": "You are a concise travel assistant."})
        messages.append({"role": "user", "content": f"Question {k}: can you help me plan a trip to {rng.choice(CITIES)}?"})
        for round_ in range(rng.randint(1, 2)):
            calls = []
            for j in range(rng.randint(1, 2)):
                name = rng.choice(names)
                args = _arguments(rng, name)
                calls.append({"id": f"call_{k}_{round_}_{j}", "type": "function",
                              "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)
                                           if string_arguments and rng.random() < 0.5 else args}})
            turn = {"role": "assistant", "content": None, "tool_calls": calls}
            if reasoning and rng.random() < 0.7:
                turn["reasoning_content"] = f"I need {', '.join(c['function']['name'] for c in calls)} first."
            messages.append(turn)
            for call in calls:
                result = {"ok": True, "value": rng.randint(0, 40), "note": rng.choice(["sunny ☀️", "rain", "fog"])}
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result, ensure_ascii=False)})
        final = {"role": "assistant", "content": f"Here is what I found: plan {k} looks good."}
        if reasoning and rng.random() < 0.5:
            final["reasoning_content"] = "The results are in; summarise them."
        messages.append(final)
        if rng.random() < 0.3:
            messages += [{"role": "user", "content": "Thanks! And the best season?"},
                         {"role": "assistant", "content": "Late spring, usually."}]
        records.append({"tools": tools, "messages": messages})
    return records
