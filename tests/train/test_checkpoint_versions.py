"""Checkpoints as immutable versions (issue 27): each save a step-N folder
and a `latest` pointer, --keep N versions, leftovers of crashed saves
removed with a line, every file checked against the CRC its manifest
records, and `latest` as the one place that says what a resume loads."""

from __future__ import annotations

import json
import os
import zlib

from conftest import latest, read_log, run, tool
from mesh_programs import megatron_mlp, trainer_folder
from test_mesh import train as train_on_mesh
from test_trainer import error_line, train


def flip_byte(path: str) -> None:
    """One bit of a byte in the middle of the file (its tensor data), as a
    failing disk flips it."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x08]))


def resume(out: str, ckpt, tmp_path, steps: str) -> tuple[list[str], list[int]]:
    """--resume from `ckpt` to --steps `steps`: the run's stderr lines and
    the steps it trained."""
    log = str(tmp_path / "resumed.jsonl")
    result = train(out, "--steps", steps, "--resume", "--checkpoint", str(ckpt),
                   "--log", log)
    return result.stderr.splitlines(), [r["step"] for r in read_log(log)]


def test_keep_two_versions_and_a_pointer(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = tmp_path / "ckpt"
    train(out, "--steps", "6", "--save-every", "2", "--keep", "2",
          "--checkpoint", str(ckpt))
    assert sorted(os.listdir(ckpt)) == [".lock", "latest", "step-00000004", "step-00000006"]
    assert (ckpt / "latest").read_text() == "step-00000006\n"
    version = latest(ckpt)
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["format"] == 2 and manifest["step"] == 6
    # The recorded CRCs are zlib's, of the files as they lie on disk.
    for name, record in manifest["files"].items():
        data = (version / name).read_bytes()
        assert record == {"bytes": len(data), "crc32": zlib.crc32(data)}, name


def test_leftover_of_a_crashed_save_is_removed(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = tmp_path / "ckpt"
    train(out, "--steps", "4", "--stop-at", "2", "--checkpoint", str(ckpt))
    # What a save killed half-way leaves: a temporary version, never named
    # by the pointer.
    leftover = ckpt / ".tmp-step-00000004-999-123"
    (leftover / "shards").mkdir(parents=True)
    (leftover / "shards" / "rank00000.safetensors").write_bytes(b"half")
    assert resume(out, ckpt, tmp_path, "4") == ([
        f"checkpoint '{ckpt}': removed '.tmp-step-00000004-999-123' left by a save "
        "that did not finish"], [3, 4])
    assert sorted(os.listdir(ckpt)) == [".lock", "latest", "step-00000002", "step-00000004"]


def test_flipped_byte_is_refused_by_resume_and_export(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = tmp_path / "ckpt"
    train(out, "--steps", "4", "--stop-at", "2", "--checkpoint", str(ckpt))
    model = latest(ckpt) / "model.safetensors"
    flip_byte(str(model))
    mismatch = f"'{model}': checksum mismatch (the file changed after it was written)"
    line = error_line(train(out, "--steps", "4", "--resume", "--checkpoint", str(ckpt),
                            check=False))
    assert line.startswith("trainer: error:") and mismatch in line
    result = run([tool("bmc"), "export", str(ckpt), "-o", str(tmp_path / "m.onnx")],
                 check=False)
    line = error_line(result)
    assert line.startswith("bmc: error:") and mismatch in line
    assert not (tmp_path / "m.onnx").exists()


def test_flipped_byte_in_a_shard_is_refused(tmp_path):
    folder = trainer_folder(str(tmp_path / "tp2"), megatron_mlp(2, 1), 2)
    ckpt = tmp_path / "ckpt"
    train_on_mesh(folder, 2, "--steps", "4", "--stop-at", "2", "--checkpoint", str(ckpt))
    shard = latest(ckpt) / "shards" / "rank00001.safetensors"
    flip_byte(str(shard))
    result = train_on_mesh(folder, 2, "--steps", "4", "--resume", "--checkpoint",
                           str(ckpt), check=False)
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if l.startswith("trainer: error")]
    assert len(errors) == 1 and f"'{shard}': checksum mismatch" in errors[0], result.stderr


def test_resume_from_an_older_version_named_by_hand(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = tmp_path / "ckpt"
    straight = str(tmp_path / "straight.jsonl")
    train(out, "--steps", "6", "--save-every", "2", "--keep", "3",
          "--checkpoint", str(ckpt), "--log", straight)
    (ckpt / "latest").write_text("step-00000002\n")
    assert resume(out, ckpt, tmp_path, "6") == ([], [3, 4, 5, 6])
    # Steps 3-6 again from step 2's state: the same losses, bit for bit.
    want = {r["step"]: r["loss"] for r in read_log(straight)}
    got = {r["step"]: r["loss"] for r in read_log(str(tmp_path / "resumed.jsonl"))}
    assert all(got[s] == want[s] for s in got)
    assert (ckpt / "latest").read_text() == "step-00000006\n"


def test_pointer_to_a_missing_version_falls_back_with_a_line(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = tmp_path / "ckpt"
    train(out, "--steps", "6", "--save-every", "2", "--stop-at", "4",
          "--checkpoint", str(ckpt))
    (ckpt / "latest").write_text("step-00000005\n")
    assert resume(out, ckpt, tmp_path, "6") == ([
        f"checkpoint '{ckpt}': 'latest' names 'step-00000005', which is missing; "
        "loading 'step-00000004', the newest complete version"], [5, 6])
