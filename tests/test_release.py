"""The release's facts agree: one version in the Python package, the dbt package, the CLI
and the CHANGELOG's newest release; and every revision the docs name exists."""

from __future__ import annotations

import contextlib
import datetime
import io
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RELEASE = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})$", re.M)
FENCE = re.compile(r"^\s*(```|~~~)")
#: A short revision in prose: 7 to 10 hex digits with at least one letter and one digit.
REVISION = re.compile(r"(?<![\w/.'-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,10}(?![\w/'-])")


def cli_version() -> str:
    from changefeed.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    return out.getvalue().strip()


def test_one_version_everywhere() -> None:
    import changefeed

    found = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert found, "pyproject.toml has no version line"
    pyproject = found.group(1)
    dbt = yaml.safe_load((REPO / "dbt_project.yml").read_text())["version"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    releases = RELEASE.findall(changelog)
    assert releases, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' section"
    newest, date = releases[0]
    assert changelog.index("## [Unreleased]") < changelog.index(f"## [{newest}]")
    assert (pyproject, dbt, changefeed.__version__, newest) == (newest,) * 4
    assert cli_version() == f"changefeed {newest}"
    assert datetime.date.fromisoformat(date) <= datetime.date.today()


def prose_revisions(path: Path) -> list[str]:
    """The short revisions named outside the page's code blocks."""
    found, inside = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            found += REVISION.findall(line)
    return found


def test_the_docs_name_only_revisions_that_exist() -> None:
    pages = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {(p.relative_to(REPO).as_posix(), r) for p in pages for r in prose_revisions(p)}
    assert named, "the revision pattern found nothing: the docs name measured commits"
    git = ["git", "-C", str(REPO)]
    shallow = subprocess.run([*git, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)  # fmt: skip
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        pytest.skip("not a complete git clone: the revisions cannot be looked up")

    def exists(rev: str) -> bool:
        lookup = [*git, "cat-file", "-e", f"{rev}^{{commit}}"]
        return subprocess.run(lookup, capture_output=True).returncode == 0

    missing = sorted((page, rev) for page, rev in named if not exists(rev))
    assert not missing, f"revisions named in the docs that this repository lacks: {missing}"


def test_the_revision_pattern() -> None:
    assert REVISION.findall("measured at commit ac9d683, fixed in a68abc8.") == [
        "ac9d683",
        "a68abc8",
    ]
    # numbers, words and longer hex strings (ULIDs, hashes in text) are not revisions
    assert REVISION.findall("1469922850259 deadbeef c0ffee1? 01563e3ab5d3d676 x'ffff00001111'") == [
        "c0ffee1"
    ]


def test_the_wheel_holds_every_module_and_names_what_each_node_needs(tmp_path: Path) -> None:
    """`make wheel`'s build (docs/deploying.md, "Shipping the package"): one pure-Python
    wheel with every module of the package and of its dbt plugin and nothing else, the
    `changefeed` command, and the extras the docs tell each node to install."""
    import sys
    import zipfile

    version = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert version
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([str(uv), "build", "--quiet", "--wheel", "--out-dir", str(tmp_path),
                    str(REPO)], check=True, capture_output=True, timeout=300)  # fmt: skip
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name == f"changefeed-{version.group(1)}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    source = REPO / "python"
    # the package, and the dbt plugin that dbt finds as a top-level dbt_* module
    packages = ("changefeed", "dbt_changefeed")
    modules = {str(p.relative_to(source)) for top in packages for p in (source / top).rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == modules
    assert "dbt_changefeed/__init__.py" in modules
    assert "changefeed/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "shop_demo"))]
    info = f"changefeed-{version.group(1)}.dist-info"
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    extras = set(re.findall(r"^Provides-Extra: (\S+)$", metadata, re.M))
    assert {"spark", "connect", "postgres", "sqlserver"} <= extras
    assert re.search(r"^Requires-Dist: pyarrow", metadata, re.M)
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "changefeed = changefeed.cli:main" in entry_points
