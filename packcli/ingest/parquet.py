"""Parquet sources: one record per row, numbered from 0, read by record batch.

Spans are row ranges. Parquet can only be decoded from the start of a row group, so a span reads
the row groups it overlaps and keeps its rows: consecutive small row groups are merged into one span
of up to ``per_unit`` rows, and a row group larger than that is cut into at most
`MAX_SPANS_PER_GROUP` spans, so each row group is decoded at most that many times over (decoding is
cheap beside tokenizing the same rows, but not free) while a file written as one large row group
(pandas' and pyarrow's default up to a million rows) still spreads over workers and resumes in pieces.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.parquet as pq

from packcli.ingest.columnar import BATCH_ROWS, span_rows
from packcli.ingest.spans import Source, SourceKind, Span, read_errors

MAX_SPANS_PER_GROUP = 8


class ParquetReader:
    """`packcli.ingest.spans.Reader` for Parquet files."""

    kind = SourceKind.parquet

    def schema(self, source: Source):  # noqa: ANN201 - pyarrow.Schema
        with read_errors(source.path):
            return pq.read_schema(source.path)

    def split(self, source: Source, per_unit: int) -> list[Span]:
        with read_errors(source.path):
            meta = pq.ParquetFile(source.path).metadata
        ranges: list[tuple[int, int]] = []
        row = 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            if n > per_unit:
                pieces = min(-(-n // per_unit), MAX_SPANS_PER_GROUP)
                cuts = [row + n * k // pieces for k in range(pieces + 1)]
                ranges += list(zip(cuts[:-1], cuts[1:]))
            elif ranges and row + n - ranges[-1][0] <= per_unit:  # merge into the span before
                ranges[-1] = (ranges[-1][0], row + n)
            else:
                ranges.append((row, row + n))
            row += n
        return [Span(SourceKind.parquet, source.path, a, a, b) for a, b in ranges if b > a]

    def read(self, span: Span) -> Iterator[tuple[int, dict]]:
        with read_errors(span.path):
            handle = pq.ParquetFile(span.path)
            meta = handle.metadata
            groups, row, first_row = [], 0, None
            for g in range(meta.num_row_groups):
                n = meta.row_group(g).num_rows
                if row < span.end and row + n > span.start:
                    groups.append(g)
                    first_row = row if first_row is None else first_row
                row += n
            if groups:
                yield from span_rows(handle.iter_batches(batch_size=BATCH_ROWS, row_groups=groups), first_row,
                                     span.start, span.end, span.first)


READER = ParquetReader()
