"""The demo report's chart and page (examples/shop, report.html), without running the demo:
every lag point names the feed it belongs to, and the summary wraps instead of being cut."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from shop_demo._chart import Series, line_chart, report_html

SVG = "{http://www.w3.org/2000/svg}"


def test_each_marker_names_its_series_and_point() -> None:
    lag = Series("written -> Spark, max", "#d62728", [(5.0, 1.5), (10.0, 0.5)], markers=True,
                 labels=["shop.orders batch 3", "shop.payments batch 2"])  # fmt: skip
    svg = ET.fromstring(line_chart("Lag", [lag], "seconds", "seconds"))
    titles = [c.findtext(f"{SVG}title") for c in svg.iter(f"{SVG}circle")]
    assert titles == [
        "written -> Spark, max, shop.orders batch 3: 1.5 at 5",
        "written -> Spark, max, shop.payments batch 2: 0.5 at 10",
    ]
    (line,) = svg.iter(f"{SVG}polyline")
    assert line.findtext(f"{SVG}title") == "written -> Spark, max"


def test_markers_without_labels_still_say_their_series() -> None:
    svg = ET.fromstring(line_chart("T", [Series("landed", "#000", [(1.0, 2.0)])], "x", "y"))
    assert [c.findtext(f"{SVG}title") for c in svg.iter(f"{SVG}circle")] == ["landed: 2 at 1"]


def test_the_summary_wraps_rather_than_being_cut() -> None:
    long_line = "shop.orders: " + "x" * 300
    page = report_html("run 1", [long_line], [])
    (style,) = re.findall(r"pre\{[^}]*\}", page)
    assert "white-space:pre-wrap" in style and "overflow-x" not in style
    assert long_line in page


def test_a_long_legend_wraps_inside_the_chart() -> None:
    """The report's latency legend (three long names) used to run past the right edge,
    clipping the third entry: entries that do not fit start a row of their own, and the
    chart grows by that row."""
    from shop_demo._chart import CHAR_WIDTH, HEIGHT, RIGHT, WIDTH

    names = [
        "committed -> landed in Spark, median of the batch",
        "committed -> landed in Spark, max of the batch",
        "committed -> dbt models, max",
    ]
    series = [Series(n, "#000", [(1.0, 2.0), (2.0, 1.0)]) for n in names]
    svg = ET.fromstring(line_chart("Latency", series, "seconds", "seconds"))
    legend = [t for t in svg.iter(f"{SVG}text") if t.text in names]
    assert [t.text for t in legend] == names
    for text in legend:
        assert float(text.get("x", 0)) + CHAR_WIDTH * len(text.text or "") <= WIDTH - RIGHT
    rows = sorted({float(t.get("y", 0)) for t in legend})
    assert len(rows) == 2
    assert svg.get("height") == str(HEIGHT + int(rows[1] - rows[0]))
    # One short series keeps the chart's size.
    short = ET.fromstring(line_chart("T", series[2:], "x", "y"))
    assert short.get("height") == str(HEIGHT)


def test_the_demo_modules_doctests_pass() -> None:
    import doctest
    import importlib
    import pkgutil

    import shop_demo

    attempted, failures = 0, []
    for info in pkgutil.iter_modules(shop_demo.__path__, "shop_demo."):
        if info.name.endswith("__main__"):
            continue
        result = doctest.testmod(importlib.import_module(info.name), report=False)
        attempted += result.attempted
        if result.failed:
            failures.append(f"{info.name}: {result.failed} of {result.attempted} failed")
    assert not failures, "\n".join(failures)
    assert attempted >= 5
