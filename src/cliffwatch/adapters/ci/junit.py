"""A CI report as JUnit XML: the schema Jenkins, GitLab and the GitHub test-report actions read.

``<testsuites>`` holds a ``<testsuite>`` a suite (``name tests failures errors skipped time``), each check a
``<testcase classname name time>``: a failed check carries ``<failure message type>`` with its detail as text, a
skipped one ``<skipped message>``, a warning (JUnit has none) passes with ``<system-err>`` saying it, and any
check's detail is its ``<system-out>``. cliffwatch reports no ``<error>``: a run that could not run at all
exits 2 or 3 with no report.
"""

from __future__ import annotations

import os
import secrets
import xml.etree.ElementTree as ET
from pathlib import Path

from cliffwatch.domain.ci.checks import Check, CheckStatus, CheckSuite, CiReport


def junit_xml(report: CiReport) -> bytes:
    """The report as a UTF-8 JUnit XML document, with its declaration."""
    root = ET.Element("testsuites", name=report.name)
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for suite in report.suites:
        element = _suite(suite)
        root.append(element)
        for key in totals:
            totals[key] += int(element.get(key, "0"))
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("skipped", str(totals["skipped"]))
    root.set("time", _seconds(sum(s.duration_s for s in report.suites)))
    ET.indent(root)
    document: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


def write_junit(report: CiReport, path: Path) -> None:
    """Writes ``junit_xml(report)`` to ``path`` atomically: a pipeline never reads half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # what any new file gets, not 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(junit_xml(report))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _suite(suite: CheckSuite) -> ET.Element:
    element = ET.Element(
        "testsuite",
        name=suite.name,
        tests=str(len(suite.checks)),
        failures=str(suite.count(CheckStatus.FAILED)),
        errors="0",
        skipped=str(suite.count(CheckStatus.SKIPPED)),
        time=_seconds(suite.duration_s),
    )
    for check in suite.checks:
        element.append(_case(suite, check))
    return element


def _case(suite: CheckSuite, check: Check) -> ET.Element:
    # A check's time is not measured on its own: the suite's time is the run's.
    case = ET.Element("testcase", classname=suite.classname, name=check.name, time="0")
    if check.status is CheckStatus.FAILED:
        failure = ET.SubElement(case, "failure", message=_clean(check.message), type=check.kind or "failed")
        failure.text = _clean("\n".join(part for part in (check.message, check.detail) if part))
    elif check.status is CheckStatus.SKIPPED:
        ET.SubElement(case, "skipped", message=_clean(check.message))
    if check.detail:
        ET.SubElement(case, "system-out").text = _clean(check.detail)
    if check.status is CheckStatus.WARNED:
        ET.SubElement(case, "system-err").text = _clean(f"warning: {check.kind}: {check.message}")
    return case


def _seconds(value: float) -> str:
    return f"{max(value, 0.0):.3f}"


def _clean(text: str) -> str:
    """The characters XML 1.0 can hold: a target's error text may carry control characters, which no parser
    would read back."""
    return "".join(c for c in text if c in "\t\n\r" or (" " <= c <= "\ud7ff") or ("\ue000" <= c <= "\ufffd")
                   or c >= "\U00010000")  # fmt: skip
