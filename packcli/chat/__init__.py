"""Chat templates and rendering: records -> text plus the character spans that carry loss.

    templates.py  where a template comes from (`load_template`, `resolve_template`), its generation markers
    training.py   TRL's training templates: the one TRL maps a template to, and trl:NAME
    render.py     the renderer (`Renderer`): records to text and spans, the loss policies per record kind
    sandbox.py    jinja2's sandbox as transformers sets it up; generation blocks' marks read back as spans
    engines.py    minijinja, used where it is shown to render what the sandbox renders
    marks.py      what both engines print alike: generation marks, HF's tojson
    guards.py     what a render must still hold: each message's content, tool calls and results in its turn
"""

from packcli.chat.render import DEFAULT_TEMPLATE_DATE, Rendered, Renderer, effective_policy
from packcli.chat.sandbox import RenderError
from packcli.chat.templates import ChatTemplate, load_template, require_markers, resolve_template
from packcli.choices import LossPolicy

__all__ = ["DEFAULT_TEMPLATE_DATE", "ChatTemplate", "LossPolicy", "RenderError", "Rendered", "Renderer",
           "effective_policy", "load_template", "require_markers", "resolve_template"]
