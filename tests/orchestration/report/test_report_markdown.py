"""report.md takes strings from hosts (a failed run's cause, the environment a run reported) and
from the trigger form (notes): like report.html, it shows them as text, never as Markdown or HTML
of theirs (no raw HTML, link, image or heading; table rows and list lines stay one line each)."""
import re

import pytest

from mxbench import report
from mxbench.report.tables import markdown_text
from mxbench.run_folder import DagRunFolder
from mxbench.stages import pipeline
from support.stored_runs import CPU_BOX, make_dag_dir, ok_runs, variant

HOSTILE = ("x <script>alert(1)</script> <img src=x onerror=alert(1)> [click](https://evil.example/) "
           "![pixel](https://evil.example/p.png) <https://evil.example/auto> a|b \\| c\n# Heading of theirs\n"
           "[ref]: https://evil.example/ref\r\n- item")
# a pipe that ends a table cell: one not escaped by an odd number of backslashes
UNESCAPED_PIPE = re.compile(r"(?<!\\)(?:\\\\)*\|")


@pytest.fixture
def hostile_report(tmp_path):
    runs = ok_runs() + [(variant(), "local", 3, "failed", None, f"host said: {HOSTILE}")]
    dag_dir = make_dag_dir(tmp_path, "hostile", runs, environment={**CPU_BOX, "host": f"box {HOSTILE}"},
                           params={"preset": "cpu-demo", "repeats": 2, "notes": [HOSTILE]})
    pipeline.join(DagRunFolder(dag_dir))
    report.build_report(DagRunFolder(dag_dir))
    return dag_dir / "report"


def test_host_and_trigger_strings_are_text_in_report_md(hostile_report):
    md = (hostile_report / "report.md").read_text()
    assert md.count("alert(1)") >= 3  # the note, the failed run's cause, the host: all shown
    for made_by_them in ("<script", "<img", "<https:", "](https://evil", "]: https://evil"):
        assert not re.search(r"(?<!\\)(?:\\\\)*" + re.escape(made_by_them), md), made_by_them
    lines = md.splitlines()
    assert not [line for line in lines if "Heading of theirs" in line and line.lstrip().startswith("#")]
    assert not [line for line in lines if line.startswith("- item") or line.startswith("[ref]")]
    for table in re.findall(r"(?:^\|.*\n)+", md, re.M):  # every row has the header's number of cells
        rows = table.splitlines()
        assert {len(UNESCAPED_PIPE.findall(row)) for row in rows} == {len(UNESCAPED_PIPE.findall(rows[0]))}, table
    html = (hostile_report / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html


@pytest.mark.parametrize("text, cell, shown", [
    ("<b>bold</b> & <!-- c --> <?pi?> </i>", False, "\\<b>bold\\</b> & \\<!-- c --> \\<?pi?> \\</i>"),
    ("p < 0.05, 3 > 2, a&b", False, "p < 0.05, 3 > 2, a&b"),  # not HTML: left as it is
    ("&lt;b&gt; &#60;", False, "\\&lt;b\\&gt; \\&#60;"),  # entities: their text, not what they stand for
    # a link, an image, a reference's definition: their ] escaped; brackets alone stay ("[1–3]")
    ("[a](u) ![i](u) [a][r] [r]: u [1–3]", False, "[a\\](u) ![i\\](u) [a\\][r] [r\\]: u [1–3]"),
    ("# h", False, "\\# h"), ("  ## h", False, "\\## h"), ("> q", False, "\\> q"), ("- l", False, "\\- l"),
    ("+ l", False, "\\+ l"), ("1. l", False, "1\\. l"), ("---", False, "\\---"), ("```", False, "\\```"),
    ("-5.0%", True, "-5.0%"),  # a table cell is no block: a leading minus stays
    ("a|b", True, "a\\|b"), ("a\\|b", True, "a\\\\\\|b"), ("end\\", True, "end\\\\"),
    ("one\ntwo\r\nthree\rfour", True, "one two three four"),
    ("cpu2-bs32__local__r1 1.5 *x* _y_", False, "cpu2-bs32__local__r1 1.5 *x* _y_"),  # emphasis is harmless
])
def test_markdown_text_escapes_what_markdown_would_read_as_its_own(text, cell, shown):
    assert markdown_text(text, cell=cell) == shown
