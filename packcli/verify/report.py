"""Verification results: which check ran, over how much, and the first offending examples."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Violation:
    """One broken invariant, located as precisely as the check can."""

    message: str
    shard: str | None = None
    row: int | None = None
    example_id: int | None = None
    source: str | None = None
    line: int | None = None
    field: str | None = None  # the manifest field or column it disproves (messages name it too; --json has it)

    def where(self) -> str:
        parts = []
        if self.shard is not None:
            parts.append(f"{self.shard}" + (f" row {self.row}" if self.row is not None else ""))
        if self.example_id is not None:
            parts.append(f"example {self.example_id}")
        if self.source is not None:
            parts.append(f"{self.source}:{self.line}")
        return ", ".join(parts)


@dataclass
class CheckResult:
    """One named check. ``count`` is every violation found; ``violations`` keeps the first few."""

    name: str
    checked: int = 0
    count: int = 0
    violations: list[Violation] = field(default_factory=list)
    skipped: str | None = None
    limit: int = 20
    note: str | None = None  # what the check did not cover, in words (not a violation)

    @property
    def ok(self) -> bool:
        return self.count == 0 and self.skipped is None

    def fail(self, violation: Violation) -> None:
        self.count += 1
        if len(self.violations) < self.limit:
            self.violations.append(violation)


@dataclass
class VerifyReport:
    directory: str
    checks: list[CheckResult] = field(default_factory=list)
    manifest_sha256: str | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check(self, name: str, limit: int = 20) -> CheckResult:
        result = CheckResult(name, limit=limit)
        self.checks.append(result)
        return result

    def to_dict(self) -> dict:
        return {"directory": self.directory, "ok": self.ok, "manifest_sha256": self.manifest_sha256,
                "checks": [dict(asdict(c), ok=c.ok) for c in self.checks]}


def write_seam_status(report: VerifyReport, directory: str, path: str) -> int:
    """Write the seam table with a ``verify`` column: "ok", or the first violation naming the example.

    Returns the number of examples with a violation. Violations without an example (a corrupted shard,
    a bad count) are not per-example and appear only in the report.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from packcli.artifact.shards import read_parquet
    from packcli.contract import SEAM_TABLE_NAME
    from packcli.owned import SEAM_OUT_KEY, write_replacing

    first: dict[int, str] = {}
    for check in report.checks:
        for v in check.violations:
            if v.example_id is not None:
                first.setdefault(v.example_id, f"{check.name}: {v.message}")
    table = read_parquet(f"{directory}/{SEAM_TABLE_NAME}")
    status = [first.get(eid, "ok") for eid in table["example_id"].to_pylist()]
    table = table.append_column("verify", pa.array(status, pa.string()))

    def write(partial: Path) -> None:
        if Path(path).name.lower().endswith(".csv"):
            import pyarrow.csv as pacsv

            pacsv.write_csv(table, str(partial))  # its header (example_id ... verify) is its mark
        else:  # named inside the file, so a later --seam-out may replace it and no other file (`packcli.owned`)
            pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), SEAM_OUT_KEY: b"verify"}),
                           str(partial))

    write_replacing(Path(path), write)
    return sum(s != "ok" for s in status)
