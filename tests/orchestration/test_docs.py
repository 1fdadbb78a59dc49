"""The README and the docs site agree with the tree: the README's relative links reach a file (and a
heading, where they name one), and docs/layout.md lists the layers in test_layers' FLOORS order.
The site's own links and anchors are checked by `mkdocs build --strict` in scripts/test.sh."""
import re

from markdown.extensions.toc import slugify
from test_layers import FLOORS

from conftest import REPO

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def broken_links(page):
    """The relative links of ``page`` whose file, or whose heading (``#anchor``), is not there."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...: not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and anchor not in {slugify(h, "-") for h in re.findall(r"^#+ (.+)$", linked.read_text(), re.M)}:
            broken.append(target)
    return broken


def test_the_readmes_links_reach_their_files_and_headings():
    readme = REPO / "README.md"
    assert len(LINK.findall(readme.read_text())) >= 10  # the links were read: every docs page is linked
    assert broken_links(readme) == []


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "page.md").write_text("# A page\n\n## Real heading\n")
    readme = tmp_path / "README.md"
    readme.write_text("[ok](page.md) [ok](page.md#real-heading) [ok](https://example.com/x)\n"
                      "[gone](gone.md) [no heading](page.md#nowhere)\n```\n[in code](also-gone.md)\n```\n")
    assert broken_links(readme) == ["gone.md", "page.md#nowhere"]


def layers_listed(page):
    """docs/layout.md's "Layers, top to bottom": each list line's packages (the code spans before
    its colon), as a list of sets."""
    section = page.read_text().split("## Layers, top to bottom", 1)[1].split("\n## ", 1)[0]
    return [{name.removesuffix("/").removesuffix(".py") for name in re.findall(r"`([^`]+)`", line.split(":", 1)[0])}
            for line in section.splitlines() if line.startswith("- ")]


def test_the_docs_layer_list_is_the_tests_floors():
    assert layers_listed(REPO / "docs" / "layout.md") == FLOORS


def test_the_layer_list_reader_sees_a_swap(tmp_path):
    page = tmp_path / "layout.md"
    page.write_text("## Layers, top to bottom\n\nintro\n\n- `stages/`: x\n- `airflow_glue/`, `cli.py`: y, `z`\n"
                    "\n## Next\n\n- `store/`: not a layer line\n")
    assert layers_listed(page) == [{"stages"}, {"airflow_glue", "cli"}]
    assert layers_listed(page) != FLOORS[:2]
