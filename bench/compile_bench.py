"""How `bmc compile` time grows with depth.

Builds the tiny GPT of the zoo (hidden 64, 4 heads, vocabulary 512) at 2, 24
and 96 layers with models/zoo.py, compiles each (median of 3 runs, same
machine, one after another) and prints the time, the size of the step
program, and the 96-layer / 2-layer ratios. With one function per block
class the program's length barely grows; the compiler's own work (import,
fold, autodiff, lowering) visits every layer.

    .venv/bin/python bench/compile_bench.py
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "models"))
import zoo  # noqa: E402

BMC = os.path.join(ROOT, "build", "bin", "bmc")
DEPTHS = (2, 24, 96)
RUNS = 3


def model_with(layers: int, folder: str) -> str:
    config = dataclasses.replace(zoo.BY_NAME["gpt3-tiny"], name=f"gpt-tiny-{layers}l",
                                 layers=layers)
    path = os.path.join(folder, f"{config.name}.onnx")
    zoo.save(zoo.build(config), path)
    return path


def compile_time(model: str, out: str) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run([BMC, "compile", model, "-o", out], check=True,
                       capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for layers in DEPTHS:
            model = model_with(layers, folder)
            out = os.path.join(folder, f"out{layers}")
            seconds = compile_time(model, out)
            with open(os.path.join(out, "step.bmp")) as f:
                lines = sum(1 for _ in f)
            rows.append((layers, seconds, lines))
    print(f"{'layers':>6} {'compile s':>10} {'step.bmp lines':>15}")
    for layers, seconds, lines in rows:
        print(f"{layers:>6} {seconds:>10.3f} {lines:>15}")
    (l0, t0, n0), (l1, t1, n1) = rows[0], rows[-1]
    print(f"{l1} vs {l0} layers: compile time x{t1 / t0:.1f}, program length "
          f"x{n1 / n0:.2f} (the layer count grows x{l1 / l0:.0f})")


if __name__ == "__main__":
    main()
