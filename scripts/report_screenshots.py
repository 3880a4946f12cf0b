#!/usr/bin/env python3
"""Writes the HTML report and a PNG screenshot of it for a few zoo plans,
so that a person can look at them:

    scripts/report_screenshots.py [OUT]      (default build/report-screenshots)

Run after scripts/setup (it needs build/bin/bmc and chromium). The plans
are the ones tests/report/test_report_browser.py opens.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from headless_chromium import HeadlessChromium  # noqa: E402

BMC = os.path.join(ROOT, "build", "bin", "bmc")
MODELS = os.path.join(ROOT, "models", "onnx")

# name -> `bmc plan` arguments after the model. The two (GPT-3 175B
# on 1024 GPUs, a Wide-ResNet), and small ones that show expert
# parallelism, side inputs (T5) and a pinned 3-D mesh.
PLANS = {
    "gpt3-175b-1024": ["gpt3-175b", "--gpus", "1024", "--global-batch", "1536"],
    "wresnet-alpa-2b-32": ["wresnet-alpa-2b", "--gpus", "32"],
    "gpt3-tiny-3d": ["gpt3-tiny", "--gpus", "8", "--fix", "dp=2,tp=2,pp=2"],
    "moe-1.3b-64": ["moe-1.3b", "--gpus", "64"],
    "t5-large-16": ["t5-large", "--gpus", "16", "--fix", "pp=4,tp=2"],
}


def make_report(name, out_dir, extra=()):
    """Plans `name` into OUT/NAME.json and OUT/NAME.html; returns both paths."""
    model, *args = PLANS[name]
    plan = os.path.join(out_dir, name + ".json")
    html = os.path.join(out_dir, name + ".html")
    subprocess.run([BMC, "plan", os.path.join(MODELS, model + ".onnx"), *args,
                    "-o", plan, "--html", html, *extra],
                   check=True, stdout=subprocess.DEVNULL)
    return plan, html


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "build", "report-screenshots")
    os.makedirs(out_dir, exist_ok=True)
    with HeadlessChromium() as browser:
        for name in PLANS:
            _, html = make_report(name, out_dir)
            page = browser.open("file://" + os.path.abspath(html))
            png = os.path.join(out_dir, name + ".png")
            page.screenshot(png)
            problems = page.console_errors + page.failed
            print(f"{png}" + (f"  PROBLEMS: {problems}" if problems else ""))


if __name__ == "__main__":
    main()
