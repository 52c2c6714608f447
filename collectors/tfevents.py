"""TensorBoard event files without TensorFlow, tensorboard or protobuf: TFRecord framing plus the few
protobuf fields a scalar needs (Event.step, Summary.Value.tag, simple_value or a scalar float tensor).

Why not the ``tensorboard`` package: it pulls protobuf and a large dependency tree into a diagnosis tool that
only needs scalars, and an incident box often lacks it. This reader needs nothing; the CRCs are checked so a
torn file ends cleanly at its last intact record.

>>> import tempfile, os
>>> d = tempfile.mkdtemp(); p = os.path.join(d, "events.out.tfevents.1.host")
>>> write_scalars(p, [(1, "train/loss", 2.5), (2, "train/loss", float("nan"))])
>>> s = read_tfevents(__import__("pathlib").Path(p), "ev").series["loss"]
>>> s.total, s.values[0], s.nan_onset[0]
(2, 2.5, 2.0)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..engine.safeio import open_regular
from .metrics_series import SeriesSet

MAX_RECORD = 64 << 20
_DT_FLOAT, _DT_DOUBLE, _DT_HALF = 1, 2, 19


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | float | bytes]]:
    """(field number, wire type, value) of one protobuf message; raises ValueError on garbage."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
            yield num, wt, v
        elif wt == 1:
            if i + 8 > len(buf):
                raise ValueError("truncated fixed64")
            yield num, wt, buf[i : i + 8]
            i += 8
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated bytes")
            yield num, wt, buf[i : i + n]
            i += n
        elif wt == 5:
            if i + 4 > len(buf):
                raise ValueError("truncated fixed32")
            yield num, wt, buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"wire type {wt}")


def _tensor_scalar(buf: bytes) -> float | None:
    dtype = 0
    content = b""
    floats: list[float] = []
    for num, wt, v in _fields(buf):
        if num == 1 and wt == 0:
            dtype = int(v)  # type: ignore[arg-type]
        elif num == 4 and wt == 2:
            content = bytes(v)  # type: ignore[arg-type]
        elif num == 5 and wt == 2:  # packed float_val
            b = bytes(v)  # type: ignore[arg-type]
            floats += [x[0] for x in struct.iter_unpack("<f", b[: len(b) // 4 * 4])]
        elif num == 5 and wt == 5:
            floats.append(struct.unpack("<f", v)[0])  # type: ignore[arg-type]
        elif num == 6 and wt == 2:  # packed double_val
            b = bytes(v)  # type: ignore[arg-type]
            floats += [x[0] for x in struct.iter_unpack("<d", b[: len(b) // 8 * 8])]
    if floats:
        return floats[0]
    if dtype == _DT_FLOAT and len(content) == 4:
        return float(struct.unpack("<f", content)[0])
    if dtype == _DT_DOUBLE and len(content) == 8:
        return float(struct.unpack("<d", content)[0])
    if dtype == _DT_HALF and len(content) == 2:
        return float(struct.unpack("<e", content)[0])
    return None


def parse_event(buf: bytes) -> tuple[int, list[tuple[str, float]]]:
    """(step, [(tag, value)]) of one serialized Event."""
    step = 0
    values: list[tuple[str, float]] = []
    for num, wt, v in _fields(buf):
        if num == 2 and wt == 0:
            step = int(v)  # type: ignore[arg-type]
        elif num == 5 and wt == 2:  # summary
            for snum, swt, sv in _fields(bytes(v)):  # type: ignore[arg-type]
                if snum != 1 or swt != 2:
                    continue
                tag, value = "", None
                for vnum, vwt, vv in _fields(bytes(sv)):  # type: ignore[arg-type]
                    if vnum == 1 and vwt == 2:
                        tag = bytes(vv).decode("utf-8", "replace")  # type: ignore[arg-type]
                    elif vnum == 2 and vwt == 5:
                        value = float(struct.unpack("<f", vv)[0])  # type: ignore[arg-type]
                    elif vnum == 8 and vwt == 2 and value is None:
                        value = _tensor_scalar(bytes(vv))  # type: ignore[arg-type]
                if tag and value is not None:
                    values.append((tag, value))
    if step >= 1 << 63:
        step -= 1 << 64
    return step, values


def read_tfevents(path: Path, display: str) -> SeriesSet:
    out = SeriesSet(display)
    out.parsers.add("tfevents")
    n = 0
    try:
        with open_regular(path) as fh:
            while True:
                head = fh.read(12)
                if not head:
                    break
                if len(head) < 12:
                    out.issues.append(f"{display}: truncated after record {n}")
                    break
                (length,) = struct.unpack("<Q", head[:8])
                if masked_crc(head[:8]) != struct.unpack("<I", head[8:12])[0] or length > MAX_RECORD:
                    out.issues.append(f"{display}: bad record header after record {n}; rest not read")
                    break
                data = fh.read(length)
                crc = fh.read(4)
                if len(data) < length or len(crc) < 4:
                    out.issues.append(f"{display}: truncated after record {n}")
                    break
                if masked_crc(data) != struct.unpack("<I", crc)[0]:
                    out.issues.append(f"{display}: record {n + 1} fails its CRC; rest not read")
                    break
                n += 1
                try:
                    step, values = parse_event(data)
                except ValueError:
                    continue
                for tag, value in values:
                    out.add(tag, float(step), value, 0)  # records, not lines: cite the file alone
    except OSError as e:
        out.issues.append(f"{display}: read error: {e}")
    return out


# --- writing (fixtures and tests) ------------------------------------------------------------------------


def _enc_varint(v: int) -> bytes:
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _enc_field(num: int, wt: int, payload: bytes) -> bytes:
    key = _enc_varint((num << 3) | wt)
    if wt == 2:
        return key + _enc_varint(len(payload)) + payload
    return key + payload


def encode_event(step: int, wall_time: float, tag: str, value: float, tensor: bool = False) -> bytes:
    """A scalar Event: TF1-style simple_value, or (tensor=True) the TF2 / torch scalar tensor form."""
    if tensor:
        tproto = (
            _enc_field(1, 0, _enc_varint(_DT_FLOAT))
            + _enc_field(2, 2, b"")
            + _enc_field(5, 2, struct.pack("<f", value))
        )
        val = _enc_field(1, 2, tag.encode()) + _enc_field(8, 2, tproto)
    else:
        val = _enc_field(1, 2, tag.encode()) + _enc_field(2, 5, struct.pack("<f", value))
    summary = _enc_field(1, 2, val)
    return (
        _enc_field(1, 1, struct.pack("<d", wall_time))
        + _enc_field(2, 0, _enc_varint(step))
        + _enc_field(5, 2, summary)
    )


def _record(data: bytes) -> bytes:
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data))


def write_scalars(
    path: str | Path, points: Sequence[tuple[int, str, float]], wall0: float = 1.7e9, tensor: bool = False
) -> None:
    version = _enc_field(1, 1, struct.pack("<d", wall0)) + _enc_field(3, 2, b"brain.Event:2")
    with open(path, "wb") as fh:
        fh.write(_record(version))
        for i, (step, tag, value) in enumerate(points):
            fh.write(_record(encode_event(step, wall0 + i, tag, value, tensor)))
