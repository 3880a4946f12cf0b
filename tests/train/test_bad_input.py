"""Issue 27 item 5: input that used to pass (a crash, the wrong optimizer,
silently frozen parameters, tokens of the wrong width, a late vocabulary
error, an empty log, two trainers on one checkpoint) now stops the trainer
before it trains, with one line and a non-zero exit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import numpy as np

from conftest import ENV

from test_trainer import error_line, train

TOKENS = np.arange(5000) * 7 % 512  # every id inside gpt3-tiny's 512


def copy_of(compiled, tmp_path, name: str) -> str:
    folder = str(tmp_path / name)
    shutil.copytree(compiled("gpt3-tiny"), folder)
    return folder


def edit_config(folder: str, **fields) -> None:
    path = os.path.join(folder, "trainer.json")
    with open(path) as f:
        config = json.load(f)
    config.update(fields)
    with open(path, "w") as f:
        json.dump(config, f)


def test_threads_are_bounded(compiled):
    # libgomp put 100000 threads' start data on the stack: a segfault.
    line = error_line(train(compiled("gpt3-tiny"), "--steps", "1", "--threads", "100000",
                            check=False))
    assert line == "trainer: error: --threads must be at most 1024, got 100000"


def test_unknown_optimizer_is_refused(compiled, tmp_path):
    folder = copy_of(compiled, tmp_path, "lion")
    edit_config(folder, optimizer="lion")
    line = error_line(train(folder, "--steps", "1", check=False))
    assert "optimizer is 'lion'; this trainer runs adamw, sgd, lamb or lars" in line


def test_micro_batches_must_make_the_batch(compiled, tmp_path):
    folder = copy_of(compiled, tmp_path, "mb")
    edit_config(folder, micro_batches=3)  # 3 x 8 does not divide 8
    line = error_line(train(folder, "--steps", "1", check=False))
    assert "micro_batches 3 of micro_batch 8 do not divide global_batch 8" in line
    edit_config(folder, micro_batches=1, micro_batch=3)
    line = error_line(train(folder, "--steps", "1", check=False))
    assert "micro_batches 1 of micro_batch 3 do not divide global_batch 8" in line


def edit_gradient_slot(folder: str, new: str) -> None:
    """Replaces the kind, type and name of h.1.ln_1.weight's gradient slot
    in the step program with `new`."""
    path = os.path.join(folder, "step.bmp")
    with open(path) as f:
        text = f.read()
    old = 'grad f32[64] "h.1.ln_1.weight"'
    assert text.count(old) == 1
    with open(path, "w") as f:
        f.write(text.replace(old, new))


def test_renamed_gradient_is_refused(compiled, tmp_path):
    folder = copy_of(compiled, tmp_path, "grad")
    edit_gradient_slot(folder, 'grad f32[64] "h.1.ln_1.weight_renamed"')
    line = error_line(train(folder, "--steps", "1", check=False))
    assert "'h.1.ln_1.weight_renamed' names no parameter" in line
    assert "would stay frozen" in line


def test_deleted_gradient_is_refused(compiled, tmp_path):
    # The gradient's slot turned into a plain value: the optimizer would
    # never see it, and the parameter would stay as initialised.
    folder = copy_of(compiled, tmp_path, "nograd")
    edit_gradient_slot(folder, "value f32[64]")
    line = error_line(train(folder, "--steps", "1", check=False))
    assert "'h.1.ln_1.weight' has no gradient and is not marked frozen" in line


def test_tokens_of_the_other_width_are_flagged(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    wide, narrow = tmp_path / "wide.bin", tmp_path / "narrow.bin"
    TOKENS.astype(np.int32).tofile(wide)
    TOKENS.astype(np.uint16).tofile(narrow)
    line = error_line(train(out, "--steps", "1", "--data", str(wide), check=False))
    assert "read as uint16 is 0, as the high halves of int32 ids are" in line
    line = error_line(train(out, "--steps", "1", "--data", str(narrow), "--data-type",
                            "int32", check=False))
    assert "outside the vocabulary of 512, while the file read as uint16 is all" in line
    # The right widths train.
    train(out, "--steps", "1", "--data", str(wide), "--data-type", "int32")
    train(out, "--steps", "1", "--data", str(narrow))


def megatron_index(path, code: int) -> None:
    # megatron/core/datasets/indexed_dataset.py: magic, version 1, dtype code
    # (4 int32, 8 uint16), sequence and document counts.
    header = b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([code])
    path.write_bytes(header + (1).to_bytes(8, "little") + (2).to_bytes(8, "little"))


def test_megatron_index_gives_the_width(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    data = tmp_path / "corpus_text_document.bin"
    TOKENS.astype(np.int32).tofile(data)
    megatron_index(tmp_path / "corpus_text_document.idx", 4)
    result = train(out, "--steps", "1", "--data", str(data))  # int32, from the index
    assert "corpus_text_document.bin" in result.stdout
    line = error_line(train(out, "--steps", "1", "--data", str(data), "--data-type", "uint16",
                            check=False))
    assert "--data-type uint16 disagrees with the Megatron index" in line
    assert "which says int32" in line


def test_vocabulary_is_checked_before_the_first_step(compiled, tmp_path):
    # An id past the vocabulary at token 4000 (step 32 of 8 x 16 tokens) is
    # found by the scan at start: no step runs.
    out = compiled("gpt3-tiny")
    tokens = TOKENS.astype(np.uint16)
    tokens[4000] = 600
    data = tmp_path / "deep.bin"
    tokens.tofile(data)
    log = tmp_path / "run.jsonl"
    result = train(out, "--steps", "40", "--data", str(data), "--log", str(log), check=False)
    assert "token id 600 at position 4000" in error_line(result)
    assert not log.exists() or log.read_text() == ""


def test_log_that_cannot_be_written_fails(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    # /dev/full opens but every write fails with ENOSPC, as a full disk does.
    line = error_line(train(out, "--steps", "2", "--log", "/dev/full", check=False))
    assert line == "trainer: error: cannot write the log '/dev/full': No space left on device"
    missing = str(tmp_path / "no" / "run.jsonl")
    line = error_line(train(out, "--steps", "2", "--log", missing, check=False))
    assert f"cannot write the log '{missing}': No such file or directory" in line


def test_two_trainers_on_one_checkpoint(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = str(tmp_path / "ckpt")
    first = subprocess.Popen([os.path.join(out, "trainer"), "--threads", "1", "--quiet",
                              "--steps", "100000", "--checkpoint", ckpt,
                              "--save-every", "100000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    try:
        lock = os.path.join(ckpt, ".lock")
        # The lock file holds the holder's pid once it has the lock.
        for _ in range(600):
            if os.path.exists(lock) and open(lock).read().strip() == str(first.pid):
                break
            assert first.poll() is None, first.stderr.read()
            time.sleep(0.1)
        else:
            raise AssertionError("the first trainer never took the lock")
        line = error_line(train(out, "--steps", "2", "--checkpoint", ckpt, check=False))
        assert f"the checkpoint '{ckpt}' is in use by another trainer (pid {first.pid}" in line
    finally:
        first.kill()
        first.wait()
    # The kernel dropped the lock with its holder: the folder is free again.
    train(out, "--steps", "2", "--checkpoint", ckpt)


def test_out_of_device_memory_is_one_line(compiled):
    # A device too small for the step (--device-memory caps it, as a smaller
    # GPU would): one line naming the kind that did not fit, what the
    # process held, what was free, and the plan's predicted peak.
    line = error_line(train(compiled("gpt3-tiny"), "--steps", "1",
                            "--device-memory", "0.002", check=False))
    assert re.fullmatch(
        r"trainer: error: out of memory on cpu: cannot allocate \d+ bytes of "
        r"(parameters|gradients|optimizer state|activations|workspace) with \d+ MiB held "
        r"by this process and \d+ MiB free on the device \(limited to 2 MiB\); the plan "
        r"predicted [\d.]+ MiB of \1 and [\d.]+ MiB in all per device at its fullest stage",
        line), line


def test_device_memory_must_be_positive(compiled):
    line = error_line(train(compiled("gpt3-tiny"), "--steps", "1", "--device-memory", "0",
                            check=False))
    assert line == "trainer: error: --device-memory must be above 0 GiB, got '0'"
