"""The HTML report in a real browser (headless Chromium, Debian's chromium
package): it loads with no console error and no request beyond its own
file, and every section drew what it should, for the plans that
scripts/report_screenshots.py shows (GPT-3 175B on 1024 GPUs, a
Wide-ResNet, expert parallelism, T5's side inputs, a pinned 3-D mesh),
and for a report with --compare and --log."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from headless_chromium import HeadlessChromium, find_chromium  # noqa: E402
from report_screenshots import BMC, PLANS, make_report  # noqa: E402

SECTIONS = ["summary", "mesh", "timeline", "memory", "communication",
            "sharding", "alternatives"]

# What the page says about itself, read in the browser after it rendered.
PROBE = """JSON.stringify({
  sections: Object.fromEntries(%s.map(id => {
    const s = document.getElementById(id);
    return [id, s ? {svgs: s.querySelectorAll('svg').length,
                     rects: s.querySelectorAll('svg rect').length,
                     rows: s.querySelectorAll('tbody tr').length} : null];
  })),
  timelineRows: document.querySelectorAll('#timeline rect.row').length,
  timelineBars: document.querySelectorAll('#timeline rect.bar').length,
  gpus: document.querySelectorAll('#mesh rect.gpu').length,
  memoryBars: document.querySelectorAll('#memory rect.mem').length,
  copyButtons: document.querySelectorAll('#summary button').length,
  svgWidth: Math.max(...[...document.querySelectorAll('svg')].map(
      s => s.getBoundingClientRect().right)),
  pageWidth: document.documentElement.clientWidth,
})""" % json.dumps(SECTIONS)


@pytest.fixture(scope="module")
def browser():
    assert find_chromium(), "no chromium on PATH: run scripts/setup"
    assert os.path.exists(BMC), f"{BMC} is missing: build the project first"
    with HeadlessChromium() as chromium:
        yield chromium


def open_clean(browser, html):
    """Opens the report; fails on any console error or request beyond it."""
    url = "file://" + os.path.abspath(html)
    page = browser.open(url)
    assert page.console_errors == []
    assert page.failed == []
    assert [r for r in page.requests if r != url] == []
    return page, json.loads(page.evaluate(PROBE))


@pytest.mark.parametrize("name", list(PLANS))
def test_report_renders_every_section(browser, tmp_path, name):
    plan_path, html = make_report(name, str(tmp_path))
    with open(plan_path) as f:
        plan = json.load(f)
    page, seen = open_clean(browser, html)

    for section in SECTIONS:
        assert seen["sections"][section] is not None, section
    for section in ["summary", "mesh", "timeline", "memory", "communication",
                    "alternatives"]:
        assert seen["sections"][section]["svgs"] >= 1, section
        assert seen["sections"][section]["rects"] >= 1, section
    assert seen["sections"]["sharding"]["rows"] == sum(
        len(block["ops"]) for block in plan["blocks"])
    # One timeline row per pipeline rank, one bar per simulated action.
    assert seen["timelineRows"] == plan["config"]["pp"]
    assert seen["timelineBars"] == len(plan["timeline"])
    assert seen["gpus"] == plan["gpus"]
    assert seen["memoryBars"] == 5 * len(plan["stage_memory"])
    assert seen["copyButtons"] >= 1
    # Readable on a laptop: no chart wider than the page.
    assert seen["svgWidth"] <= seen["pageWidth"]

    # The sharding filter hides what does not match.
    page.evaluate("""(() => { const box = document.querySelector(
        '#sharding input'); box.value = 'no such op'; box.dispatchEvent(
        new Event('input')); })()""")
    visible = page.evaluate("""[...document.querySelectorAll(
        '#sharding tbody tr')].filter(r => r.style.display !== 'none').length""")
    assert visible == 0


def test_report_with_compare_and_log(browser, tmp_path):
    plan_path, _ = make_report("gpt3-tiny-3d", str(tmp_path))
    other = tmp_path / "dp.json"
    subprocess.run([BMC, "plan", os.path.join(ROOT, "models", "onnx", "gpt3-tiny.onnx"),
                    "--gpus", "8", "--fix", "dp=8,tp=1,pp=1", "-o", str(other)],
                   check=True, stdout=subprocess.DEVNULL)
    log = tmp_path / "run.jsonl"
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "report", "edit_plan.py"),
                    plan_path, str(log), "log-good"], check=True)
    html = tmp_path / "full.html"
    subprocess.run([BMC, "report", plan_path, "--html", str(html), "--compare",
                    str(other), "--log", str(log)], check=True)
    page, _ = open_clean(browser, html)
    counts = json.loads(page.evaluate("""JSON.stringify({
      compare: document.querySelectorAll('#compare svg rect').length,
      measured: document.querySelectorAll('#measured svg rect.step').length})"""))
    assert counts["compare"] >= 8  # two time splits of four parts
    assert counts["measured"] == 3  # one point per logged step
