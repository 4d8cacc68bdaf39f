"""`packcli.cli.output`: what the commands draw. Tables leave out columns rather than cut a number; ``show``'s
tokens keep their boundaries with 8 or 16 colours; a pack's seam table is printed once."""

from __future__ import annotations

from packcli.view import show_artifact


def test_a_fitted_table_leaves_out_columns_rather_than_cut_numbers():
    from rich.console import Console

    from packcli.cli.output import Col, fitted_table

    rows = [["1,234,567,890", "0.999912", "123,456,789,012"], ["7", "0.5", "9"]]
    table = fitted_table("t", [Col("tokens", keep=9), Col("density", keep=5), Col("bytes", keep=1)], rows, width=34)
    console = Console(width=34, record=True)
    console.print(table)
    text = console.export_text()
    assert "1,234,567,890" in text and "0.999912" in text and "…" not in text
    assert "123,456,789,012" not in text and "too narrow for: bytes" in text


def test_the_terminal_keeps_token_boundaries_with_8_or_16_colours(packed):
    """Adjacent tokens render differently in the terminal's own colour system; the 256-colour greys, squeezed
    into 16 colours, are one colour (the failure this guards against)."""
    from rich.color import ColorSystem
    from rich.style import Style

    from packcli.cli.output import SHADES, token_shades

    def ansi(style, system):  # a fresh Style: rich keeps the codes of the first colour system it rendered with
        parsed = Style.parse(style)
        fresh = Style(color=parsed.color, bgcolor=parsed.bgcolor, bold=parsed.bold, underline=parsed.underline)
        return fresh.render("x", color_system=system)

    for name, system in (("standard", ColorSystem.STANDARD), ("256", ColorSystem.EIGHT_BIT),
                         ("truecolor", ColorSystem.TRUECOLOR), (None, ColorSystem.STANDARD)):
        shades = token_shades(name)
        for supervised in (False, True):
            assert ansi(shades[supervised][0], system) != ansi(shades[supervised][1], system), (name, supervised)
        assert {ansi(s, system) for s in shades[False]}.isdisjoint(ansi(s, system) for s in shades[True])
    greys = SHADES["256"][False]
    assert ansi(greys[0], ColorSystem.STANDARD) == ansi(greys[1], ColorSystem.STANDARD)


def test_the_terminal_shows_a_packs_seam_table_once(packed, monkeypatch):
    from rich.console import Console

    from packcli.cli import console
    from packcli.cli.output import render_shown

    monkeypatch.setattr(console, "out", Console(color_system="standard", force_terminal=True, record=True, width=100))
    render_shown(show_artifact(packed, pack=0))
    styled = console.out.export_text(styles=True, clear=False)
    text = console.out.export_text()
    assert "seam-table row" not in text and text.count("pack 0 (shard-00000.parquet row 0") == 1
    assert "\x1b[4m" in styled or "\x1b[4;" in styled  # every other token underlined: the boundaries show
