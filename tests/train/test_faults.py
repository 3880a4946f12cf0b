"""Issue 27: jobs killed, stopped and terminated at random points, saves
included, and relaunched at once, reach their last step with the losses and
weights of the uninterrupted run, bit for bit, or refuse in one clear line;
never a hang, a crash or a silent difference (faults.py has the trial, the
rules, and why bit for bit holds).

CI runs a few trials per fault kind on 1, 2 (dp2) and 4 (dp2 x tp2) ranks,
each from a fixed seed (the seed draws the moment and the rank; the moment
a signal lands in a save still depends on timing, which is the point).
`scripts/test --full` (BMC_TEST_FULL=1) adds a soak of 50 trials of random
jobs (dp, tp, pp, dp x tp, dp x pp), kinds, triggers, and 1 to 3 faults in
a row. A failure prints the trial's timeline and the command that replays
it:  .venv/bin/python tests/train/faults.py --seed S --job J --kind K
--trigger T.
"""

from __future__ import annotations

import os

import pytest

import faults

pytestmark = pytest.mark.skipif(faults.MPIRUN is None, reason="needs mpirun")

# (job, kind, trigger, seed): every kind on one and two ranks (a stalled
# rank at a step, in a save and in MPI's start), the stalled rank and the
# two kills on four.
CI = [
    ("1rank", "kill-mpirun", "save", 1),
    ("1rank", "kill-mpirun", "delay", 2),
    ("1rank", "kill-rank", "step", 3),
    ("1rank", "kill-rank", "save", 4),
    ("1rank", "term-mpirun", "save", 5),
    ("1rank", "term-rank", "step", 6),
    ("dp2", "kill-mpirun", "save", 7),
    ("dp2", "kill-mpirun", "delay", 8),
    ("dp2", "kill-rank", "save", 9),
    ("dp2", "kill-rank", "step", 10),
    ("dp2", "stop-rank", "step", 11),
    ("dp2", "stop-rank", "save", 12),
    ("dp2", "stop-rank", "start", 23),  # in MPI's start, before the first step
    ("dp2", "term-mpirun", "save", 13),
    ("dp2", "term-rank", "delay", 14),
    ("dp2tp2", "kill-mpirun", "save", 15),
    ("dp2tp2", "kill-rank", "save", 16),
    ("dp2tp2", "stop-rank", "step", 17),
]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    return faults.References(str(tmp_path_factory.mktemp("fault-references")))


@pytest.fixture(autouse=True)
def no_process_left():
    # Whatever a trial asserted, none of its ranks keeps spinning.
    yield
    faults.cleanup_all()


@pytest.mark.parametrize("job,kind,trigger,seed", CI,
                         ids=[f"{j}-{k}-{t}-seed{s}" for j, k, t, s in CI])
def test_fault_then_relaunch(references, tmp_path, job, kind, trigger, seed):
    plan = faults.Plan.draw(seed, job, kind, trigger)
    result = faults.run_trial(plan, references(job), str(tmp_path))
    print(result.report())
    assert result.ok, result.report()
    assert result.finished, result.report()


@pytest.mark.skipif(not os.environ.get("BMC_TEST_FULL"),
                    reason="the soak runs under scripts/test --full (BMC_TEST_FULL=1)")
def test_soak(tmp_path):
    results = faults.soak(50, 1000, str(tmp_path))
    summary = faults.summarize(results)
    print(summary)
    failed = [r.report() for r in results if not r.ok]
    assert not failed, "\n\n".join([summary, *failed])
