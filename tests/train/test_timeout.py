"""The collective timeout (`--timeout`, issue 27 item 1): a rank stopped
with SIGSTOP in the middle of training must not hang the job. The ranks
waiting for it end the job within the timeout plus the launcher's time to
kill the rest (the issue's bound: 60 s), with one line naming the
collective and a rank, and the last checkpoint stays loadable. Normal runs,
saves and resumes included, never set it off.

Checkpoints are checked through the trainer's flags only (--resume), never
by reading their files: their layout is not this test's business.

The trainer is the build's (build/bin/bmrt-trainer) unless BMRT_TRAINER
names another; the folders are compiled with the build's bmc.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import ENV, run, tool
from test_mesh import _rank_pid as rank_pid  # mpirun's child of a rank

MPIRUN = shutil.which("mpirun")
TIMEOUT = 5
# What the issue allows past the timeout; a job ends within a few seconds.
BOUND = TIMEOUT + 60
# The watchdog's line, from whichever waiting rank fired first.
LINE = re.compile(
    r"^trainer: error: rank \d+: waited [\d.]+ s in "
    r"(all-reduce|reduce-scatter|all-gather|all-to-all|send|recv|"
    r"grouped send/recv|barrier) over [a-z+]+ "
    r"\(group rank \d+ of \d+, call #\d+ of that group\); "
    r".*rank.* never arrived -- .*; ending the job \(--timeout 5\)$", re.M)

GPT = ("gpt3-tiny", "--global-batch", "8", "--init", "random")
PLANS = {"dp2xtp2": (4, "dp=2,tp=2,pp=1"),
         "pp2": (2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b")}


def trainer() -> str:
    return os.environ.get("BMRT_TRAINER") or tool("bmrt-trainer")


def job(ranks: int, folder: str, *flags: str) -> list[str]:
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
            "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
            trainer(), "--dir", folder, "--threads", "1", "--quiet", *flags]


def ended(pid: int, within: float) -> bool:
    """Whether `pid` is gone or dead (a zombie) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.1)
    return False


def last_step(log: str) -> int:
    """The last step `log` records (0 before the first)."""
    try:
        with open(log) as f:
            lines = f.read().splitlines()
    except OSError:
        return 0  # not written yet
    steps = [0]
    for line in lines:
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:
            pass  # a line half written when the job ended
    return max(steps)


def stop_rank_when_training(proc, log: str, launcher: int, rank: int) -> int:
    """SIGSTOPs `rank` once rank 0 has logged three steps; returns its pid."""
    deadline = time.monotonic() + 120
    while last_step(log) < 3:
        assert proc.poll() is None, "the job ended before it trained"
        assert time.monotonic() < deadline, "no step logged in 120 s"
        time.sleep(0.05)
    pid = rank_pid(launcher, rank)
    assert pid, f"rank {rank} is not among mpirun's children"
    os.kill(pid, signal.SIGSTOP)
    return pid


def stop_a_rank(args: list[str], log: str, stopped: int):
    """Runs the job `args`, SIGSTOPs rank `stopped` once it trains, and
    waits for the job to end: its exit status and stderr, the seconds it
    took after the stop, and whether the stopped rank ended too."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    pid = None
    try:
        pid = stop_rank_when_training(proc, log, proc.pid, stopped)
        began = time.monotonic()
        try:
            _, stderr = proc.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job still ran {BOUND} s after rank {stopped} stopped")
        return proc.returncode, stderr, time.monotonic() - began, ended(pid, 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("plan", PLANS)
def test_a_stopped_rank_ends_the_job(compiled, tmp_path, plan):
    ranks, fix = PLANS[plan]
    folder = compiled(*GPT, "--gpus", str(ranks), "--fix", fix)
    log, ckpt = str(tmp_path / "log.jsonl"), str(tmp_path / "ckpt")
    flags = ("--checkpoint", ckpt, "--save-every", "2", "--timeout", str(TIMEOUT))
    # A rank other than 0, which writes the checkpoints: they stay whole.
    stopped = ranks - 1
    status, stderr, took, gone = stop_a_rank(
        job(ranks, folder, "--steps", "100000", "--log", log, *flags), log, stopped)
    print(f"{plan}: the job ended {took:.1f} s after rank {stopped} stopped "
          f"(--timeout {TIMEOUT}):\n{stderr}")
    assert status != 0
    assert took < BOUND
    assert LINE.search(stderr), stderr
    # The launcher ended the stopped rank too (SIGCONT and SIGTERM, or
    # SIGKILL): nothing is left behind.
    assert gone, f"rank {stopped} outlived the job"
    # The last checkpoint loads: a resume trains two steps past the last one
    # rank 0 logged (and the short timeout does not fire on its saves).
    steps = str(last_step(log) + 2)
    run(job(ranks, folder, "--steps", steps, "--resume", *flags))


def test_normal_runs_never_set_it_off(compiled, tmp_path):
    # A short timeout over saves every step and a resume: the waits that
    # are long by design stay under it. --timeout 0 is accepted.
    ranks, fix = PLANS["pp2"]
    folder = compiled(*GPT, "--gpus", str(ranks), "--fix", fix)
    log, ckpt = str(tmp_path / "log.jsonl"), str(tmp_path / "ckpt")
    flags = ("--checkpoint", ckpt, "--save-every", "1", "--log", log)
    run(job(ranks, folder, "--steps", "6", "--timeout", str(TIMEOUT), *flags))
    assert last_step(log) == 6
    run(job(ranks, folder, "--steps", "8", "--resume", "--timeout", str(TIMEOUT), *flags))
    assert last_step(log) == 8
    run(job(ranks, folder, "--steps", "9", "--resume", "--timeout", "0", *flags))
    assert last_step(log) == 9


def test_a_rank_stopped_at_launch_ends_the_job(compiled, tmp_path):
    # Rank 1 stops itself before the trainer starts: rank 0 waits in MPI's
    # start (MPI_Init), before any collective, where only the start-up
    # deadline can end the job.
    ranks, fix = PLANS["pp2"]
    folder = compiled(*GPT, "--gpus", str(ranks), "--fix", fix)
    wrapper = tmp_path / "stop-rank-1"
    wrapper.write_text('#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -STOP $$\n'
                       'exec "$@"\n')
    wrapper.chmod(0o755)
    args = job(ranks, folder, "--steps", "3", "--timeout", str(TIMEOUT))
    args.insert(args.index(trainer()), str(wrapper))
    began = time.monotonic()
    try:
        result = subprocess.run(args, capture_output=True, text=True, env=ENV,
                                timeout=BOUND, start_new_session=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job still ran {BOUND} s after rank 1 stopped at launch")
    assert result.returncode != 0
    assert time.monotonic() - began < BOUND
    assert re.search(r"^trainer: error: rank 0: waited [\d.]+ s in MPI start-up "
                     r"\(MPI_Init_thread\) over world; one of world ranks 1 never "
                     r"arrived -- .*; ending the job \(--timeout 5\)$",
                     result.stderr, re.M), result.stderr
