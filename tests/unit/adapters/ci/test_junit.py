from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from cliffwatch.adapters.ci.junit import junit_xml, write_junit
from cliffwatch.domain.ci.checks import Check, CheckStatus, CheckSuite, CiReport

REPORT = CiReport(
    name="cliffwatch run demo",
    suites=(
        CheckSuite(name="demo", classname="cliffwatch.run.demo", duration_s=12.3456, checks=(
            Check(name="score >= 70", status=CheckStatus.FAILED, kind="score_below_threshold",
                  message="score 41 of 70: recovery fell", detail="score 41, pass mark 70"),
            Check(name="component isolation", status=CheckStatus.SKIPPED, kind="not_applicable",
                  message="no traffic classes"),
            Check(name="flag hidden_overload", status=CheckStatus.WARNED, kind="hidden_overload",
                  message="answers were hollow"),
            Check(name="run completed", status=CheckStatus.PASSED, detail="bad \x00 byte\x1b[0m kept out"),
        )),
        CheckSuite(name="demo sweep", classname="cliffwatch.sweep.demo", duration_s=1.0,
                   checks=(Check(name="sweep completed", status=CheckStatus.PASSED),)),
    ),
)  # fmt: skip


def test_the_xml_has_a_testsuite_a_suite_and_a_testcase_a_check_with_their_counts() -> None:
    root = ET.fromstring(junit_xml(REPORT))
    assert root.tag == "testsuites"
    assert {k: root.get(k) for k in ("name", "tests", "failures", "errors", "skipped", "time")} == {
        "name": "cliffwatch run demo", "tests": "5", "failures": "1", "errors": "0", "skipped": "1", "time": "13.346",
    }  # fmt: skip
    run, sweep = root.findall("testsuite")
    assert {k: run.get(k) for k in ("name", "tests", "failures", "errors", "skipped", "time")} == {
        "name": "demo", "tests": "4", "failures": "1", "errors": "0", "skipped": "1", "time": "12.346",
    }  # fmt: skip
    assert [(c.get("classname"), c.get("name")) for c in run.findall("testcase")] == [
        ("cliffwatch.run.demo", "score >= 70"), ("cliffwatch.run.demo", "component isolation"),
        ("cliffwatch.run.demo", "flag hidden_overload"), ("cliffwatch.run.demo", "run completed"),
    ]  # fmt: skip
    assert sweep.get("name") == "demo sweep"
    assert len(sweep.findall("testcase")) == 1


def test_a_failed_check_carries_its_sentence_as_the_message_and_its_verdict_as_the_type() -> None:
    case = ET.fromstring(junit_xml(REPORT)).find("testsuite/testcase[@name='score >= 70']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == "score 41 of 70: recovery fell"
    assert failure.get("type") == "score_below_threshold"
    assert failure.text == "score 41 of 70: recovery fell\nscore 41, pass mark 70"


def test_a_skipped_check_is_skipped_and_a_warning_passes_saying_it_on_system_err() -> None:
    root = ET.fromstring(junit_xml(REPORT))
    skipped = root.find("testsuite/testcase[@name='component isolation']/skipped")
    assert skipped is not None
    assert skipped.get("message") == "no traffic classes"
    warned = root.find("testsuite/testcase[@name='flag hidden_overload']")
    assert warned is not None
    assert warned.find("failure") is None
    assert warned.findtext("system-err") == "warning: hidden_overload: answers were hollow"


def test_characters_xml_cannot_hold_are_left_out_so_the_report_parses() -> None:
    case = ET.fromstring(junit_xml(REPORT)).find("testsuite/testcase[@name='run completed']")
    assert case is not None
    assert case.findtext("system-out") == "bad  byte[0m kept out"


def test_write_junit_writes_the_document_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "junit.xml"
    write_junit(REPORT, path)
    assert path.read_bytes() == junit_xml(REPORT)
    assert [p.name for p in path.parent.iterdir()] == ["junit.xml"]
