"""What an audit reports: a result per attempt and the counts per layer, as JSON, as JUnit XML (a
testsuite per layer, a testcase per attempt) and as the table `codecoder audit` prints while it
runs.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from codecoder.foundation.display import visible
from codecoder.interfaces.escapes.corpus import Attempt, DockerEntry, Layer
from codecoder.interfaces.escapes.outcomes import Status

__all__ = ["AttemptResult", "AuditReport"]


@dataclass(frozen=True, slots=True)
class AttemptResult:
    attempt: Attempt
    status: Status
    how: str  # the defence observed, what escaped, or why it did not run
    duration: float

    def to_json(self) -> dict[str, Any]:
        attempt = self.attempt
        entry = attempt.entry
        defence = (
            entry.under_runtime(attempt.runtime).defence
            if isinstance(entry, DockerEntry)
            else attempt.defence
        )
        found = {
            "id": attempt.id,
            "layer": attempt.layer,
            "description": attempt.description,
            "defence": defence,
            "status": self.status.value,
            "how": self.how,
            "duration_ms": round(self.duration * 1000, 1),
        }
        if attempt.runtime is not None:
            found["runtime"] = attempt.runtime
        return found


@dataclass(frozen=True, slots=True)
class AuditReport:
    project: Path
    layers: tuple[Layer, ...]
    results: tuple[AttemptResult, ...]
    duration: float

    @property
    def ok(self) -> bool:
        """No attempt escaped and every one could be run (not-applicable ones are explained)."""
        return not any(r.status in (Status.ESCAPED, Status.NOT_RUN) for r in self.results)

    def counts(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for layer in self.layers:
            row = {status.value: 0 for status in Status}
            for result in self.results:
                if result.attempt.layer == layer:
                    row[result.status.value] += 1
            row["total"] = sum(row.values())
            counts[layer] = row
        return counts

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "project": str(self.project),
            "duration_s": round(self.duration, 2),
            "layers": self.counts(),
            "attempts": [result.to_json() for result in self.results],
        }

    def to_junit(self) -> str:
        """JUnit XML: a testsuite per layer, a testcase per attempt; an escape is a failure, an
        attempt that could not run an error, a not-applicable one skipped."""
        counts = self.counts()
        root = ElementTree.Element(
            "testsuites",
            name="codecoder audit",
            tests=str(len(self.results)),
            failures=str(sum(c[Status.ESCAPED.value] for c in counts.values())),
            errors=str(sum(c[Status.NOT_RUN.value] for c in counts.values())),
            skipped=str(sum(c[Status.NOT_APPLICABLE.value] for c in counts.values())),
            time=f"{self.duration:.3f}",
        )
        for layer in self.layers:
            results = [r for r in self.results if r.attempt.layer == layer]
            suite = ElementTree.SubElement(
                root,
                "testsuite",
                name=layer,
                tests=str(len(results)),
                failures=str(counts[layer][Status.ESCAPED.value]),
                errors=str(counts[layer][Status.NOT_RUN.value]),
                skipped=str(counts[layer][Status.NOT_APPLICABLE.value]),
                time=f"{sum(r.duration for r in results):.3f}",
            )
            for result in results:
                case = ElementTree.SubElement(
                    suite,
                    "testcase",
                    classname=f"codecoder.audit.{layer}",
                    name=result.attempt.id,
                    time=f"{result.duration:.3f}",
                )
                how = _xml_text(result.how)
                if result.status is Status.ESCAPED:
                    failure = ElementTree.SubElement(case, "failure", type="escaped", message=how)
                    failure.text = _xml_text(f"{result.attempt.description}\n{how}")
                elif result.status is Status.NOT_RUN:
                    ElementTree.SubElement(case, "error", type="not-run", message=how)
                elif result.status is Status.NOT_APPLICABLE:
                    ElementTree.SubElement(case, "skipped", message=how)
                else:
                    ElementTree.SubElement(case, "system-out").text = how
        ElementTree.indent(root)
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(
            root, encoding="unicode"
        )

    def summary(self) -> list[str]:
        """A line per layer with its counts, then the verdict and the time it took."""
        lines = []
        for layer, row in self.counts().items():
            parts = [f"{row[s.value]} {s.value}" for s in Status if row[s.value]]
            lines.append(f"{layer}: {row['total']} attempts, " + ", ".join(parts or ["none"]))
        verdict = "every attempt was blocked" if self.ok else "FAILED"
        lines.append(f"{len(self.results)} attempts in {self.duration:.1f}s: {verdict}")
        return lines


def _xml_text(text: str) -> str:
    # XML 1.0 cannot carry most control characters at all, escaped or not.
    return "\n".join(visible(line) for line in text.split("\n"))


_HOW_WIDTH: Final = 110


def table_header() -> str:
    return f"{'RESULT':<8} {'LAYER':<16} {'ATTEMPT':<44} HOW"


def table_row(result: AttemptResult) -> str:
    how = visible(result.how)
    if len(how) > _HOW_WIDTH:
        how = how[: _HOW_WIDTH - 1] + "…"
    return f"{result.status.label:<8} {result.attempt.layer:<16} {result.attempt.id:<44} {how}"
