"""The ``packcli show --html`` page: one self-contained file (no script, nothing fetched) to share in a review.

What a reader must see at once: which artifact and which example or pack (the title and heading),
what the shading means (a legend drawn with the page's own token boxes), where one token ends and
the next begins (each token is an unbreakable box: a line wraps between tokens, never inside one, so
one token never reads as two), and the pack's seams (one table, once). A newline inside a token is
drawn ``↵`` in its box and the line breaks after the box; a token that ends inside a UTF-8 character
has no text of its own and is drawn ``·`` (`packcli.view`). docs/stats-and-show.md describes the page as a
browser draws it.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from packcli.owned import HTML_GENERATOR

if TYPE_CHECKING:
    from packcli.view import Example, Shown

CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:72em}
h1 small,h2 small{font-weight:normal;color:#666}
.text{font-family:ui-monospace,monospace;white-space:pre-wrap;line-height:1.9}
.t{display:inline-block;white-space:pre;border-right:1px solid #999;vertical-align:top;line-height:1.5}
.u0{background:#eee}.u1{background:#d6d6d6}.s0{background:#9be39b}.s1{background:#c8f2c8}.nl{color:#888}
.legend{border:1px solid #ccc;padding:.5em 1em;margin:1em 0;line-height:2}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
td.n{text-align:right}tr.me{font-weight:bold;background:#ffffd0}"""
SEAM_COLUMNS = ("offset", "length", "supervised", "example_id", "source:line")


def page_title(shown: Shown) -> str:
    """``pack 3 of packed`` or ``example 42 (chat.jsonl:7) of packed``: what the page shows, and from where."""
    if shown.whole_pack:
        return f"pack {shown.pack.index} of {shown.directory}"
    row = shown.examples[0].row
    return f"example {row['example_id']} ({row['source']}:{row['line']}) of {shown.directory}"


def render_html(shown: Shown) -> str:
    """The whole page."""
    e = html.escape
    whole_pack = shown.whole_pack
    title = page_title(shown)
    head, _, where = title.partition(" of ")
    parts = [f"<!doctype html><html lang='en'><head><meta charset='utf-8'>{HTML_GENERATOR}<title>packcli show: {e(title)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>{e(head)} <small>of {e(where)}</small></h1>",
             f"<p>template {e(shown.template)}; loss {e(shown.loss_policy)}"
             + (f"; {e(shown.pack.shard)} row {shown.pack.row}, {shown.pack.num_tokens:,} tokens" if whole_pack else "")
             + ".</p>", _legend()]
    for example in shown.examples:
        parts.append(_example(example, full_row=not whole_pack))
    if shown.pack is not None:
        parts.append(_seams(shown))
    parts.append("</body></html>\n")
    return "".join(parts)


def _tokens(pieces: list[tuple[str, bool, int]], *, tag: str = "div") -> str:
    """Token boxes: (text, supervised, id) each, shades alternating token by token."""
    out = []
    for k, (text, supervised, token_id) in enumerate(pieces):
        cls = ("s" if supervised else "u") + str(k % 2)
        shown = html.escape(text).replace("\n", "<span class='nl'>↵</span>") or "·"
        out.append(f"<span class='t {cls}' title='token {token_id}'>{shown}</span>" + "\n" * text.count("\n"))
    return f"<{tag} class='text'>" + "".join(out) + f"</{tag}>"


def _legend() -> str:
    no_loss = _tokens([("to", False, 0), ("ken", False, 0)], tag="span")
    loss = _tokens([("to", True, 0), ("ken", True, 0)], tag="span")
    return ("<div class='legend'><b>How to read it.</b> Each box is one token, as the trainer sees it; a line "
            "wraps between tokens, never inside one. Hover a token for its id.<br>"
            f"{no_loss} grey: no loss (two shades, alternating, so neighbours stay apart)<br>"
            f"{loss} green: the token carries loss (its label is its id)<br>"
            "<span class='nl'>↵</span> a newline inside a token (the line breaks after the box); "
            "<b>·</b> a token with no text of its own: it ends inside a UTF-8 character, which the next token "
            "shows whole.</div>")


def _example(example: Example, *, full_row: bool) -> str:
    e = html.escape
    row = example.row
    chunk = f" &middot; {e(example.chunk_label)}" if example.chunk_label else ""
    parts = [f"<h2>example {row['example_id']} <small>{e(row['source'])}:{row['line']} &middot; "
             f"{e(row['status'])}{chunk}</small></h2>"]
    if example.tokens:
        supervised = sum(t.supervised for t in example.tokens)
        at = f" at offset {row['offset']:,} of the pack" if row.get("offset") is not None else ""
        parts.append(f"<p>{len(example.tokens):,} tokens, {supervised:,} carry loss{at}.</p>")
        parts.append(_tokens([(t.text, t.supervised, t.id) for t in example.tokens]))
    else:
        parts.append(f"<p>not in a pack: {e(row['reason'] or row['status'])}</p>")
    if full_row:  # one example: its whole seam-table row; a pack's rows are the seam table below
        parts.append("<table><caption>seam-table row</caption>" + "".join(
            f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in row.items()) + "</table>")
    return "".join(parts)


def _seams(shown: Shown) -> str:
    e = html.escape
    pack = shown.pack
    chosen = set() if shown.whole_pack else {x.row["example_id"] for x in shown.examples}
    rows = []
    for s in pack.seams:
        mark = " class='me'" if s["example_id"] in chosen else ""
        chunk = f" chunk {s['chunk']}" if s["chunk"] else ""
        rows.append(f"<tr{mark}><td class='n'>{s['offset']:,}</td><td class='n'>{s['length']:,}</td>"
                    f"<td class='n'>{s['supervised']:,}</td><td>{s['example_id']}</td>"
                    f"<td>{e(s['source'])}:{s['line']}{chunk}</td></tr>")
    header = "".join(f"<th>{c}</th>" for c in SEAM_COLUMNS)
    return (f"<h2>seams of pack {pack.index} <small>{e(pack.shard)} row {pack.row}, {pack.num_tokens:,} "
            f"tokens</small></h2><table><tr>{header}</tr>{''.join(rows)}</table>")
