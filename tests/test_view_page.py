"""`packcli.view_page`: ``show --html``'s page names what it shows, draws a legend and never splits a token."""

from __future__ import annotations

import re

from packcli.view import show_artifact


def test_the_html_page_names_what_it_shows_draws_a_legend_and_never_splits_a_token(packed):
    import html

    from packcli.view_page import render_html

    shown = show_artifact(packed, pack=0)
    page = render_html(shown)
    assert f"<title>packcli show: pack 0 of {packed}</title>" in page
    assert "class='legend'" in page and "carries loss" in page and "no loss" in page
    assert "break-all" not in page and ".t{display:inline-block;white-space:pre" in page  # a token is one box
    assert page.count("<table") == 1  # the pack's seams, once; no row table repeated per example
    boxes = re.findall(r"<span class='t [us][01]' title='token (\d+)'>((?:[^<]|<span class='nl'>↵</span>)*)</span>(\n*)",
                       page.split("</div>", 1)[1])
    tokens = [t for e in shown.examples for t in e.tokens]
    assert [int(i) for i, _, _ in boxes] == [t.id for t in tokens]
    for (_, inner, after), token in zip(boxes, tokens):
        drawn = html.unescape(re.sub(r"<span class='nl'>↵</span>", "\n", inner))
        assert drawn == (token.text or "·") and len(after) == token.text.count("\n")  # breaks after the box only
    one = show_artifact(packed, example_id=shown.examples[1].row["example_id"])
    page = render_html(one)
    row = one.examples[0].row
    assert f"<title>packcli show: example {row['example_id']} ({row['source']}:{row['line']}) of {packed}</title>" \
        in page
    assert page.count("<table") == 2 and page.count("class='me'") == 1  # its row, and its pack's seams marked
