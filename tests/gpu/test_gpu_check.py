"""scripts/gpu-check's summary (scripts/gpu_check_summary.py) on canned
stage outputs: the JSON's shape, the loss comparison, and how build,
conformance and trainer failures are reported.

The whole check in --cpu-only mode builds the runtime (minutes on two
cores), so it runs here only with BMC_TEST_GPU_CHECK=1 (after
scripts/gpu-pack); README "GPU check" has the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY = os.path.join(ROOT, "scripts", "gpu_check_summary.py")

CPU = [6.2457, 6.2525, 6.2480, 6.2245, 6.1825]


def write(path, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def losses_log(losses: list[float]) -> str:
    return "".join(json.dumps({"step": i + 1, "loss": x, "rank": 0}) + "\n"
                   for i, x in enumerate(losses))


def gtest_report(passed: list[str], failed: list[str], skipped: list[str]) -> str:
    tests = ([{"name": n, "status": "RUN", "result": "COMPLETED"} for n in passed]
             + [{"name": n, "status": "RUN", "result": "COMPLETED",
                 "failures": [{"failure": "cuda differs", "type": ""}]} for n in failed]
             + [{"name": n, "status": "RUN", "result": "SKIPPED"} for n in skipped])
    return json.dumps({"tests": len(tests), "testsuites": [{"name": "Conformance",
                                                            "testsuite": tests}]})


def canned_gpu_check(check) -> None:
    """A GPU run: CUDA built, one conformance failure, four models: within
    tolerance, beyond it, a kernel the backend lacks, a timeout."""
    rows = [("unpack", 0, 0.4, 30), ("machine", 0, 0.2, 20), ("configure", 0, 9.0, 60),
            ("build", 0, 80.5, 210), ("conformance", 1, 12.0, 60)]
    models = {"close": CPU[:-1] + [CPU[-1] * (1 + 3e-5)],
              "far": CPU[:-1] + [CPU[-1] * (1 + 1e-3)]}
    for name, cuda in models.items():
        write(check / "models" / f"{name}.cpu.jsonl", losses_log(CPU))
        write(check / "models" / f"{name}.cuda.jsonl", losses_log(cuda))
        rows += [(f"model.{name}.cpu", 0, 1.0, 60), (f"model.{name}.cuda", 0, 2.0, 60)]
    write(check / "models" / "nokernel.cpu.jsonl", losses_log(CPU))
    write(check / "model.nokernel.cuda.txt",
          "trainer: error: the program needs bm.conv, which backend cuda has no kernel for\n")
    rows += [("model.nokernel.cpu", 0, 1.0, 60), ("model.nokernel.cuda", 1, 0.5, 60),
             ("model.slow.cpu", 0, 1.0, 60), ("model.slow.cuda", 124, 60.0, 60),
             ("bench", "absent", 0, 0)]
    write(check / "stages.tsv", "".join(f"{n}\t{rc}\t{s}\t{l}\n" for n, rc, s, l in rows))
    write(check / "machine.txt", "cores: 16\ncpu: Intel Xeon\n"
          "gpu: NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\nnvcc: Build cuda_13.0\n")
    write(check / "configure.txt", "-- bmrt: CUDA backend built for sm_90 (CUDA 13.0.88)\n")
    write(check / "build.txt", "[68/68] Linking CXX executable bin/BmrtConformanceTests\n")
    write(check / "conformance.json",
          gtest_report(["Gemm.cuda", "Add.cuda"], ["Softmax.cuda"], ["Conv.cuda"]))


def summarize(check, out, mode="gpu", second="cuda", models="close,far,nokernel,slow"):
    return subprocess.run([sys.executable, SUMMARY, "--check", str(check), "--mode", mode,
                           "--second", second, "--rtol", "1e-4", "--models", models,
                           "-o", str(out)], capture_output=True, text=True, timeout=60)


def test_summary_of_a_gpu_run(tmp_path):
    check = tmp_path / "check"
    canned_gpu_check(check)
    result = summarize(check, tmp_path / "gpu-check.json")
    assert result.returncode == 1, result.stdout + result.stderr   # not all passed
    summary = json.loads((tmp_path / "gpu-check.json").read_text())

    assert summary["mode"] == "gpu" and summary["ok"] is False
    assert summary["machine"]["gpu"].startswith("NVIDIA H100") and summary["machine"]["cores"] == 16
    assert summary["build"]["ok"] and summary["build"]["cuda_backend"]
    conf = summary["conformance"]
    assert (conf["passed"], conf["failed"], conf["skipped"]) == (2, 1, 1)
    assert conf["failing"] == ["Conformance.Softmax.cuda"] and not conf["ok"]
    assert conf["note"] == "1 tests skipped on a GPU machine"
    assert summary["tolerance"]["rtol"] == 1e-4

    models = summary["models"]
    assert models["close"]["status"] == "pass"
    assert models["close"]["cpu"]["losses"] == CPU and len(models["close"]["cuda"]["losses"]) == 5
    assert 2e-5 < models["close"]["max_rel_diff"] < 4e-5
    assert len(models["close"]["rel_diff_per_step"]) == 5
    assert models["far"]["status"] == "fail" and models["far"]["max_rel_diff"] > 1e-4
    assert models["nokernel"]["status"] == "error"
    assert "no kernel for" in models["nokernel"]["cuda"]["error"]
    assert models["slow"]["status"] == "error" and models["slow"]["cuda"]["status"] == "timeout"
    assert summary["models_summary"] == {"pass": 1, "fail": 1, "error": 2}
    assert summary["bench"]["status"] == "absent"
    stages = {s["name"]: s["status"] for s in summary["stages"]}
    assert stages["conformance"] == "failed" and stages["model.slow.cuda"] == "timeout"
    assert "model nokernel: error (trainer: error:" in result.stdout


def test_summary_of_a_failed_build(tmp_path):
    check = tmp_path / "check"
    write(check / "stages.tsv", "configure\t0\t5\t60\nbuild\t1\t40\t210\n"
          "conformance\tskipped\t0\t0\nmodel.gpt3-tiny.cpu\t127\t0\t60\n"
          "model.gpt3-tiny.cuda\t127\t0\t60\n")
    write(check / "build.txt", "FAILED: runtime/CMakeFiles/bmrt.dir/cuda/NormKernels.cu.o\n"
          "NormKernels.cu(12): error: identifier \"foo\" is undefined\n")
    write(check / "model.gpt3-tiny.cuda.txt", "bash: bmrt-trainer: No such file or directory\n")
    result = summarize(check, tmp_path / "s.json", models="gpt3-tiny")
    assert result.returncode == 1
    summary = json.loads((tmp_path / "s.json").read_text())
    assert not summary["build"]["ok"] and not summary["build"]["cuda_backend"]
    assert any("NormKernels.cu(12): error" in line for line in summary["build"]["errors"])
    assert summary["conformance"]["status"] == "skipped"
    assert summary["conformance"]["error"] == "not run"
    assert summary["models"]["gpt3-tiny"]["status"] == "error"


def test_summary_of_prebuilt_binaries(tmp_path):
    # The binaries gpu-pack carried loaded: configure and build were skipped,
    # and the build counts as ok, with the CUDA backend in it.
    check = tmp_path / "check"
    write(check / "stages.tsv", "prebuilt\t0\t1.4\t30\nconfigure\tskipped\t0\t0\n"
          "build\tskipped\t0\t0\nconformance\t0\t1\t60\n"
          "model.gpt3-tiny.cpu\t0\t0.3\t30\nmodel.gpt3-tiny.cuda\t0\t0.7\t30\n")
    write(check / "prebuilt.txt", "BMRT_CUDA:BOOL=ON\nbmrt: CUDA backend built (prebuilt)\n")
    write(check / "conformance.json", gtest_report(["Gemm.cuda"], [], []))
    write(check / "models" / "gpt3-tiny.cpu.jsonl", losses_log(CPU))
    write(check / "models" / "gpt3-tiny.cuda.jsonl", losses_log(CPU))
    result = summarize(check, tmp_path / "s.json", models="gpt3-tiny")
    assert result.returncode == 0, result.stdout + result.stderr
    build = json.loads((tmp_path / "s.json").read_text())["build"]
    assert build["ok"] and build["prebuilt"] and build["cuda_backend"]


def test_cpu_only_demands_identical_losses(tmp_path):
    check = tmp_path / "check"
    write(check / "stages.tsv", "configure\t0\t1\t90\nbuild\t0\t1\t240\nconformance\t0\t1\t90\n"
          "model.a.cpu\t0\t1\t60\nmodel.a.cpu-repeat\t0\t1\t60\n"
          "model.b.cpu\t0\t1\t60\nmodel.b.cpu-repeat\t0\t1\t60\n")
    write(check / "conformance.json", gtest_report(["Gemm.cpu"], [], []))
    for name, again in {"a": CPU, "b": CPU[:-1] + [CPU[-1] + 1e-6]}.items():
        write(check / "models" / f"{name}.cpu.jsonl", losses_log(CPU))
        write(check / "models" / f"{name}.cpu-repeat.jsonl", losses_log(again))
    result = summarize(check, tmp_path / "s.json", mode="cpu-only", second="cpu-repeat",
                       models="a,b")
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["tolerance"]["rtol"] == 0.0
    assert summary["models"]["a"]["status"] == "pass"
    assert summary["models"]["b"]["status"] == "fail"   # 1e-6 is within 1e-4, not exact
    assert result.returncode == 1


@pytest.mark.skipif(os.environ.get("BMC_TEST_GPU_CHECK") != "1",
                    reason="builds the runtime (minutes): set BMC_TEST_GPU_CHECK=1")
def test_gpu_check_cpu_only(tmp_path):
    assert os.path.exists(os.path.join(ROOT, ".gpu", "deps.tar.xz")), "run scripts/gpu-pack"
    result = subprocess.run([os.path.join(ROOT, "scripts", "gpu-check"), "--cpu-only",
                             "--models", "gpt3-tiny", str(tmp_path)],
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(os.listdir(tmp_path)) == ["gpu-check.json", "gpu-check.log"]
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    assert summary["ok"] and summary["mode"] == "cpu-only"
    assert summary["build"]["ok"] and not summary["build"]["cuda_backend"]
    assert summary["conformance"]["passed"] > 0 and summary["conformance"]["failed"] == 0
    model = summary["models"]["gpt3-tiny"]
    assert len(model["cpu"]["losses"]) == 10
    assert model["cpu"]["losses"] == model["cpu-repeat"]["losses"]
    assert model["max_rel_diff"] == 0.0
