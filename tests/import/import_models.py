#!/usr/bin/env python3
"""Imports every model in a folder with `bmc import` (batch bound to 2, the
other dims from the models' bm.dim metadata). Prints one summary line and
exits non-zero if any model fails."""
import glob
import os
import subprocess
import sys

def main():
    models = sorted(glob.glob(os.path.join(sys.argv[1], "*.onnx")))
    failures = []
    imported = 0
    for model in models:
        run = subprocess.run(["bmc", "import", model, "--dim", "batch=2", "-o", os.devnull],
                             capture_output=True, text=True)
        name = os.path.basename(model)
        if run.returncode == 0:
            imported += 1
        else:
            failures.append(f"{name}: rc={run.returncode} {run.stderr.strip()}")
    print(f"imported {imported} of {len(models)} models")
    for failure in failures:
        print("FAILED", failure)
    return 1 if failures or not models else 0


if __name__ == "__main__":
    sys.exit(main())
