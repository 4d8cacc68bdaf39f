"""`packcli.cli.output`: the commands' tables leave out columns rather than cut a number."""

from __future__ import annotations


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
