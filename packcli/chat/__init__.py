"""Chat templates and rendering: records -> text plus the character spans that carry loss.

    templates.py  where a template comes from (`load_template`, `resolve_template`), its generation markers
    training.py   TRL's training templates: the one TRL maps a template to, and trl:NAME
    render.py     the sandboxed renderer (`Renderer`) and the loss policies per record kind
    guards.py     what a render must still hold: each message's content, tool calls and results in its turn
"""

from packcli.chat.render import DEFAULT_TEMPLATE_DATE, Rendered, Renderer, RenderError, effective_policy
from packcli.chat.templates import ChatTemplate, load_template, require_markers, resolve_template
from packcli.choices import LossPolicy

__all__ = ["DEFAULT_TEMPLATE_DATE", "ChatTemplate", "LossPolicy", "RenderError", "Rendered", "Renderer",
           "effective_policy", "load_template", "require_markers", "resolve_template"]
