"""What both template engines give a template alike: the marks a ``{% generation %}`` block prints
around its text, and Hugging Face's ``tojson`` filter.

Kept apart from `packcli.chat.render` (jinja2's sandbox) and `packcli.chat.engines` (minijinja) so
each engine prints the same marks and JSON without importing the other.
"""

from __future__ import annotations

import json

# Where a generation block opens and closes in the output: two Unicode noncharacters, which are reserved
# for a program's internal use and never stand for text. They are taken out again before anyone sees it.
OPEN, CLOSE = "\ufdd0", "\ufdd1"


def hf_tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):  # noqa: ANN001, ANN201
    """HF's tojson: unlike Jinja's built-in it does not HTML-escape, which templates rely on."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
