"""gpucourse.viz.first_chart: a new kernel's first chart no longer builds RFC 3987 parsers, and a
check of the "iri" format still gives the answers it gave without the course."""

import subprocess
import sys

from gpucourse.tooling.build import ROOT

IRIS = ["http://example.com/a b", "http://example.com/ä", "not an iri", "urn:isbn:0451450523"]
ASK = f"""
import sys, json
import plotly.graph_objects as go
go.Figure(go.Bar(y=[1, 2]))._repr_mimebundle_()  # plotly's renderers: nbformat, jsonschema
before = 'lark' in sys.modules
import jsonschema
checker = jsonschema.FormatChecker()
print(json.dumps({{"lark_at_first_chart": before,
                  "answers": [checker.conforms(v, "iri") for v in {IRIS!r}],
                  "ref_answers": [checker.conforms(v, "iri-reference") for v in {IRIS!r}]}}))
"""


def _ask(first: str) -> dict:
    import json

    done = subprocess.run([sys.executable, "-c", first + ASK], capture_output=True, text=True, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PLOTLY_RENDERER": "json", "PYTHONPATH": str(ROOT)},
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_first_chart_builds_no_iri_parser_and_iri_checks_answer_as_before():
    plain = _ask("")
    course = _ask("import gpucourse\n")
    assert plain["lark_at_first_chart"] is True  # what the stand-in is for (if this fails, drop it)
    assert course["lark_at_first_chart"] is False
    assert course["answers"] == plain["answers"] and course["ref_answers"] == plain["ref_answers"]
    assert plain["answers"] == [False, True, False, True]


def test_nothing_is_replaced_once_jsonschema_has_the_real_module():
    done = subprocess.run([sys.executable, "-c", "import jsonschema._format, sys\n"
                           "from gpucourse.viz.first_chart import defer_iri_parsers\n"
                           "print(defer_iri_parsers(), type(sys.modules['rfc3987_syntax']).__name__)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "module"]


def test_nbgraders_command_line_starts_without_the_iri_parsers():
    """``python -m nbgrader`` builds them at its start (0.7 s of CPU); the course's entry to the same command
    line (``gpucourse.tooling.nbgradercli``, which the graders and lab tests run) does not, and is nbgrader."""

    def start(module: str) -> tuple[str, str]:
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--version"], capture_output=True,
                              text=True, cwd=ROOT, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip(), done.stderr

    plain_version, plain = start("nbgrader")
    course_version, course = start("gpucourse.tooling.nbgradercli")
    assert "rfc3987_syntax.syntax_helpers" in plain  # what the entry is for (if this fails, drop it)
    assert "rfc3987_syntax.syntax_helpers" not in course and "nbgrader.apps.nbgraderapp" in course
    assert course_version == plain_version != ""
