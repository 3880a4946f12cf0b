"""safetensors in numpy, from the format's description (an 8-byte
little-endian header length, a JSON header, the raw little-endian data): the
tests' reader and writer of the files bmc and its trainer exchange."""

from __future__ import annotations

import json
import struct

import numpy as np

DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def write_safetensors(path: str, tensors: dict[str, np.ndarray],
                      metadata: dict[str, str] | None = None) -> None:
    header: dict[str, object] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    blobs = []
    names = {np.dtype(v): k for k, v in DTYPES.items()}
    for name, array in tensors.items():
        # A view where the array already is contiguous little-endian: the
        # tests write weights of hundreds of MB (VGG's classifier).
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        header[name] = {
            "dtype": names[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + data.nbytes],
        }
        offset += data.nbytes
        blobs.append(memoryview(data.reshape(-1)).cast("B"))
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        raw = memoryview(f.read())  # slices of it are views, not copies
    (length,) = struct.unpack("<Q", raw[:8])
    assert length % 8 == 0, "the data should start 8-aligned"
    header = json.loads(bytes(raw[8 : 8 + length]))
    data = raw[8 + length :]
    header.pop("__metadata__", None)
    out = {}
    covered = 0
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, end = entry["data_offsets"]
        assert begin == covered, f"{name}: a hole or an overlap at {begin}"
        covered = end
        dtype = np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
    assert covered == len(data), "bytes at the end belong to no tensor"
    return out


# --------------------------------------------------------------------------
# The reference, in float64
# --------------------------------------------------------------------------
