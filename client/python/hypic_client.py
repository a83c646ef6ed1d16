"""hypic_client: a standard-library-only Python client for hypicd.

It speaks the wire protocol of protocol/README.md (version 1) over TCP or a unix socket:
64-byte little-endian frame headers with a CRC-32 header checksum, CRC-32 body checksums
(zlib.crc32; the stdlib has no xxh3, and the server answers each request with the checksum
kind the request used), typed message bodies, chunked (MORE) reply streams, and pipelining:
many requests in flight on one connection, matched by request_id.

    from hypic_client import Client, PartKind, ComposePart
    with Client.connect("127.0.0.1:7411", token="...") as c:
        tiers = c.has([key1, key2])
        reply = c.compose([ComposePart.raw(prefix), ComposePart.segment(doc1)], top_k=5)
        # pipelined:
        pending = [c.submit_get(k) for k in keys]
        entries = [p.result() for p in pending]
        # the composed state (docs/state-format.md), as numpy arrays when numpy is importable:
        reply = c.compose(parts, mode=ComposeMode.FULL, return_state=True, state_dtype=DType.BF16)
        for t in reply.state_arrays():
            print(t.layer, t.kind.name, t.shape, t.array.dtype if hasattr(t.array, "dtype") else "")

Keys are 16-byte `bytes` (lo u64 LE then hi u64 LE, as on the wire) or 32-hex-digit strings
in the canonical print order (high half first), as hypicctl prints them.

A Client is not thread-safe: use one per thread, or guard it with a lock.
"""

from __future__ import annotations

import dataclasses
import enum
import ipaddress
import json
import socket
import struct
import zlib
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

__all__ = [
    "Client", "HypicError", "ProtocolError", "Opcode", "Status", "Tier", "ComposeMode",
    "PartKind", "PartOutcome", "EvictBy", "ComposePart", "HelloReply", "PrefillResult",
    "PrefillReply", "Timings", "PartResult", "ComposeReply", "ListEntry", "ListReply",
    "VerifyReply", "StreamTensor", "encode_frame", "FrameDecoder", "key_bytes", "key_hex",
    "decode_tensor_stream", "encode_tensor_stream", "TensorKind", "DType", "Pending",
    "DEFAULT_SEAM", "FLAG_REPLY", "FLAG_MORE", "ZERO_KEY", "StateArray", "LogitsMode",
    "STATE_CONTRACT_VERSION",
]

# ---------------------------------------------------------------------------------------------
# Wire constants (protocol/README.md sections 1-6)

MAGIC = b"\x89HYP"
HEADER_SIZE = 64
MIN_VERSION = 1
MAX_VERSION = 1
MAX_EXT_LEN = 4096
FLAG_REPLY = 0x01
FLAG_MORE = 0x02
KNOWN_FLAGS = FLAG_REPLY | FLAG_MORE
CHECKSUM_CRC32 = 1
CHECKSUM_XXH3_64 = 2
MAX_STATUS_CODE = 18
DEFAULT_SEAM = 0xFFFFFFFF
FEATURE_XXH3 = 1 << 0
FEATURE_CHUNKED = 1 << 1
FEATURE_STATE_INLINE = 1 << 2
FEATURE_STATE_FIRST = 1 << 3  # COMPOSE takes StateLayout.STATE_FIRST
# The state contract this client understands (docs/state-format.md); HELLO announces the
# server's, and a COMPOSE asking for the state is refused locally when they differ.
STATE_CONTRACT_VERSION = 1

# magic, version, opcode, flags, checksum_kind, request_id, key, body_len, body_checksum,
# ext_len, status, deadline_ms, reserved; the header CRC follows as a separate u32.
_HEADER = struct.Struct("<4sBBBBQ16sQQHHII")
assert _HEADER.size == 60


class Opcode(enum.IntEnum):
    HELLO = 1
    PING = 2
    HAS = 3
    GET = 4
    PUT = 5
    DEL = 6
    PREFILL = 7
    COMPOSE = 8
    STATS = 16
    EVICT = 17
    PIN = 18
    UNPIN = 19
    FLUSH = 20
    CONFIG = 21
    SHUTDOWN = 22
    LIST = 23
    VERIFY = 24
    GOAWAY = 63


class Status(enum.IntEnum):
    OK = 0
    NOT_FOUND = 1
    BAD_REQUEST = 2
    BAD_CHECKSUM = 3
    TOO_LARGE = 4
    UNAUTHORIZED = 5
    BUSY = 6
    DEADLINE_EXCEEDED = 7
    VERSION_MISMATCH = 8
    COMPUTE_FAILED = 9
    SHUTTING_DOWN = 10
    INTERNAL = 11
    IO_ERROR = 12
    NO_SPACE = 13
    DEVICE_ERROR = 14
    CANCELLED = 15
    UNSUPPORTED = 16
    CORRUPTION = 17
    QUOTA_EXCEEDED = 18


class Tier(enum.IntEnum):
    NONE = 0
    HBM = 1
    HOST = 2
    SSD = 3


class ComposeMode(enum.IntEnum):
    FULL = 0
    NAIVE = 1
    HYPIC = 2
    ORACLE = 3
    PREFIX = 4


class PartKind(enum.IntEnum):
    SEGMENT_TOKENS = 0
    SEGMENT_KEY = 1
    RAW = 2


class PartOutcome(enum.IntEnum):
    HIT = 0
    MISS = 1
    LIVE = 2


class EvictBy(enum.IntEnum):
    KEY = 0
    NAMESPACE = 1
    TIER = 2
    BYTES = 3
    ALL = 4


class TensorKind(enum.IntEnum):
    TRANSITION = 0
    STATE = 1
    CONV_TAIL = 2
    KEY = 3
    VALUE = 4


class DType(enum.IntEnum):
    F32 = 0
    F16 = 1
    BF16 = 2
    I32 = 3
    I64 = 4
    U8 = 5


class LogitsMode(enum.IntEnum):
    TOP_K = 0  # the top_k (token, logit) pairs only
    FULL = 1   # also the whole last-token row, f32


class StateLayout(enum.IntEnum):
    HEAD_FIRST = 0   # the reply head, then the state (which leaves after the compose)
    STATE_FIRST = 1  # the state, each layer as the compose has it, then the head (needs CHUNKED)


_DTYPE_SIZE = {DType.F32: 4, DType.F16: 2, DType.BF16: 2, DType.I32: 4, DType.I64: 8, DType.U8: 1}


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid frame or message; the connection is unusable."""


class HypicError(Exception):
    """The server answered a request with a non-OK status."""

    def __init__(self, status: int, message: str):
        self.status = status
        try:
            self.status_name = Status(status).name
        except ValueError:
            self.status_name = str(status)
        self.message = message
        super().__init__(f"{self.status_name}: {message}")


# ---------------------------------------------------------------------------------------------
# Keys

KeyLike = Union[bytes, bytearray, str]


def key_bytes(key: KeyLike) -> bytes:
    """The 16-byte wire form of a key given as wire bytes or as 32 hex digits (hi first)."""
    if isinstance(key, (bytes, bytearray)):
        if len(key) != 16:
            raise ValueError(f"a key is 16 bytes, got {len(key)}")
        return bytes(key)
    if len(key) != 32:
        raise ValueError(f"a hex key is 32 digits, got {len(key)}")
    hi = int(key[:16], 16)
    lo = int(key[16:], 16)
    return struct.pack("<QQ", lo, hi)


def key_hex(key: bytes) -> str:
    lo, hi = struct.unpack("<QQ", key)
    return f"{hi:016x}{lo:016x}"


ZERO_KEY = bytes(16)

# ---------------------------------------------------------------------------------------------
# Frames


def crc32(data: bytes, crc: int = 0) -> int:
    return zlib.crc32(data, crc) & 0xFFFFFFFF


def encode_frame(opcode: int, request_id: int, body: bytes = b"", ext: bytes = b"",
                 key: bytes = ZERO_KEY, flags: int = 0, status: int = 0, deadline_ms: int = 0,
                 version: int = MAX_VERSION) -> bytes:
    """One frame with a CRC-32 body checksum (the only kind this client sends)."""
    head = _frame_head(opcode, request_id, body, ext, key, flags, status, deadline_ms, version)
    return head + body


def _frame_head(opcode: int, request_id: int, body: bytes, ext: bytes, key: bytes, flags: int,
                status: int, deadline_ms: int, version: int) -> bytes:
    """Header and ext of a frame: the caller sends the body after it without concatenating."""
    if len(ext) > MAX_EXT_LEN:
        raise ValueError(f"ext of {len(ext)} bytes exceeds {MAX_EXT_LEN}")
    checksum = crc32(body, crc32(ext))
    head = _HEADER.pack(MAGIC, version, int(opcode), flags, CHECKSUM_CRC32, request_id, key,
                        len(body), checksum, len(ext), status, deadline_ms, 0)
    return head + struct.pack("<I", crc32(head)) + ext


@dataclasses.dataclass
class Frame:
    version: int
    opcode: int
    flags: int
    checksum_kind: int
    request_id: int
    key: bytes
    status: int
    deadline_ms: int
    ext: bytes
    body: bytes


class FrameDecoder:
    """Incremental decoder of server-to-client frames with the README's checks, in order.

    feed() bytes as they arrive; next_frame() returns a Frame, or None until one is complete.
    Lengths are checked against max_body / MAX_EXT_LEN from the header alone, before buffering.
    """

    # read_frame_from() receives at most this much per call, so each piece is checksummed
    # right after it arrives, while it is still in cache.
    _CHUNK = 256 << 10

    def __init__(self, max_body: int = 1 << 30):
        self.max_body = max_body
        self._buf = bytearray()
        # (frame size, CRC-32 of its ext + body) for the frame read_frame_from() just read.
        self._frame_crc: Optional[Tuple[int, int]] = None

    def feed(self, data: bytes) -> None:
        self._buf += data

    def read_frame_from(self, sock: socket.socket) -> None:
        """Reads the rest of the frame at the front (whose header is in) from `sock` straight
        into one buffer of the frame's size, so a large body is neither staged in recv()'s
        per-call allocations nor copied while the buffer grows.
        REQUIRES: the buffer holds less than needed() bytes, all of them this frame's."""
        frame = bytearray(self.needed())
        have = len(self._buf)
        frame[:have] = self._buf
        view = memoryview(frame)
        crc = crc32(view[HEADER_SIZE:have])
        while have < len(frame):
            n = sock.recv_into(view[have:have + self._CHUNK])
            if n == 0:
                raise ConnectionError("the server closed the connection")
            crc = crc32(view[have:have + n], crc)
            have += n
        view.release()
        self._buf = frame
        self._frame_crc = (len(frame), crc)

    def buffered(self) -> int:
        return len(self._buf)

    def needed(self) -> int:
        """Bytes the frame at the front needs in total (HEADER_SIZE until its header is in)."""
        if len(self._buf) < HEADER_SIZE:
            return HEADER_SIZE
        _, _, _, _, _, _, _, body_len, _, ext_len, _, _, _ = _HEADER.unpack_from(self._buf)
        return HEADER_SIZE + ext_len + body_len

    def next_frame(self) -> Optional[Frame]:
        buf = self._buf
        n = min(len(buf), 4)
        if bytes(buf[:n]) != MAGIC[:n]:
            raise ProtocolError("bad magic: the peer is not a hypic server")
        if len(buf) < HEADER_SIZE:
            return None
        (_, version, opcode, flags, kind, request_id, key, body_len, checksum, ext_len, status,
         deadline_ms, reserved) = _HEADER.unpack_from(buf)
        (header_crc,) = struct.unpack_from("<I", buf, 60)
        if header_crc != crc32(bytes(buf[:60])):
            raise ProtocolError("bad header checksum")
        if reserved != 0 or flags & ~KNOWN_FLAGS:
            raise ProtocolError("reserved bits set")
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ProtocolError(f"unsupported frame version {version}")
        if kind not in (CHECKSUM_CRC32, CHECKSUM_XXH3_64):
            raise ProtocolError(f"unknown checksum kind {kind}")
        if not flags & FLAG_REPLY:
            raise ProtocolError("a request frame where a reply was expected")
        if status > MAX_STATUS_CODE:
            raise ProtocolError(f"status {status} out of range")
        try:
            Opcode(opcode)
        except ValueError:
            raise ProtocolError(f"unknown opcode {opcode}") from None
        if ext_len > MAX_EXT_LEN or body_len > self.max_body:
            raise ProtocolError(f"frame too large: ext {ext_len}, body {body_len}")
        total = HEADER_SIZE + ext_len + body_len
        if len(buf) < total:
            return None
        view = memoryview(buf)
        ext = bytes(view[HEADER_SIZE:HEADER_SIZE + ext_len])
        body = bytes(view[HEADER_SIZE + ext_len:total])
        view.release()
        del buf[:total]
        known, self._frame_crc = self._frame_crc, None
        if kind != CHECKSUM_CRC32:
            raise ProtocolError("the server used xxh3-64, which this client did not request")
        # read_frame_from() checksummed this frame as it arrived; otherwise do it now.
        crc = known[1] if known is not None and known[0] == total else crc32(body, crc32(ext))
        if crc != checksum:
            raise ProtocolError("bad body checksum")
        return Frame(version, opcode, flags, kind, request_id, key, status, deadline_ms, ext, body)


# ---------------------------------------------------------------------------------------------
# Body encoding (README 5.1)


class _Writer:
    def __init__(self) -> None:
        self.parts: List[bytes] = []

    def u8(self, v: int) -> None:
        self.parts.append(struct.pack("<B", v))

    def u16(self, v: int) -> None:
        self.parts.append(struct.pack("<H", v))

    def u32(self, v: int) -> None:
        self.parts.append(struct.pack("<I", v))

    def u64(self, v: int) -> None:
        self.parts.append(struct.pack("<Q", v))

    def key(self, k: KeyLike) -> None:
        self.parts.append(key_bytes(k))

    def string(self, s: Union[str, bytes]) -> None:
        b = s.encode() if isinstance(s, str) else s
        self.u32(len(b))
        self.parts.append(b)

    def tokens(self, toks: Sequence[int]) -> None:
        self.u32(len(toks))
        self.parts.append(struct.pack(f"<{len(toks)}I", *toks))

    def raw(self, b: bytes) -> None:
        self.parts.append(b)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ProtocolError(f"truncated {self.what} body")
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def u8(self) -> int:
        return self._take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self._take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self._take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self._take(8))[0]

    def i64(self) -> int:
        return struct.unpack("<q", self._take(8))[0]

    def f32(self) -> float:
        return struct.unpack("<f", self._take(4))[0]

    def boolean(self) -> bool:
        b = self.u8()
        if b > 1:
            raise ProtocolError(f"boolean byte {b} in {self.what}")
        return b == 1

    def enum(self, cls):
        v = self.u8()
        try:
            return cls(v)
        except ValueError:
            raise ProtocolError(f"unknown {cls.__name__} {v} in {self.what}") from None

    def key(self) -> bytes:
        return bytes(self._take(16))

    def string(self) -> str:
        return bytes(self._take(self.u32())).decode("utf-8", "replace")

    def count(self, min_elem: int) -> int:
        n = self.u32()
        if n * min_elem > len(self.data) - self.pos:
            raise ProtocolError(f"count {n} does not fit in the {self.what} body")
        return n

    def rest(self) -> bytes:
        return bytes(self._take(len(self.data) - self.pos))

    def finish(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError(f"{len(self.data) - self.pos} trailing bytes in {self.what}")


# ---------------------------------------------------------------------------------------------
# Typed messages


@dataclasses.dataclass
class HelloReply:
    version: int
    features: int
    server_version: str
    model_fingerprint: bytes
    model_name: str
    seam_w: int
    format_version: int
    max_frame_body: int
    max_message_bytes: int
    max_inflight_requests: int
    max_inflight_bytes: int
    max_keys: int
    max_parts: int
    admin: bool
    state_contract: int = STATE_CONTRACT_VERSION


@dataclasses.dataclass
class Timings:
    probe_us: int = 0
    prefill_us: int = 0
    transfer_us: int = 0
    compose_us: int = 0
    total_us: int = 0


@dataclasses.dataclass
class PrefillResult:
    key: bytes
    was_cached: bool
    tier: Tier
    n_tokens: int
    bytes: int


@dataclasses.dataclass
class PrefillReply:
    results: List[PrefillResult]
    timings: Timings


@dataclasses.dataclass
class ComposePart:
    kind: PartKind
    tokens: Sequence[int] = ()
    key: bytes = ZERO_KEY

    @staticmethod
    def segment(tokens: Sequence[int]) -> "ComposePart":
        """A cacheable segment given by its tokens."""
        return ComposePart(PartKind.SEGMENT_TOKENS, tokens=tokens)

    @staticmethod
    def by_key(key: KeyLike) -> "ComposePart":
        """A cached segment named by its key."""
        return ComposePart(PartKind.SEGMENT_KEY, key=key_bytes(key))

    @staticmethod
    def raw(tokens: Sequence[int]) -> "ComposePart":
        """Live tokens that are never cached (a prefix, the question, a suffix)."""
        return ComposePart(PartKind.RAW, tokens=tokens)


@dataclasses.dataclass
class PartResult:
    outcome: PartOutcome
    tier: Tier
    n_tokens: int
    key: bytes


@dataclasses.dataclass
class StreamTensor:
    layer: int
    kind: TensorKind
    dtype: DType
    shape: Tuple[int, ...]
    data: bytes


@dataclasses.dataclass
class StateArray:
    """One tensor of the composed state (docs/state-format.md): `array` is a numpy array of
    `shape` when numpy is importable (float32, float16; bf16 as its uint16 bit patterns, see
    bf16_to_f32), else a memoryview cast to `shape`: format 'f' for f32, 'H' (the uint16 bit
    patterns) for f16 and bf16, since memoryview has no half-float format (struct's 'e' decodes
    f16 values one by one). Little-endian hosts (the wire is little-endian)."""
    layer: int
    kind: TensorKind
    dtype: DType
    shape: Tuple[int, ...]
    array: object


def bf16_to_f32(array):
    """Widens bf16 bit patterns (a numpy uint16 array) to float32 exactly."""
    import numpy as np  # only called with numpy arrays
    return (np.asarray(array, dtype=np.uint32) << 16).view(np.float32)


_MEMORYVIEW_FORMAT = {DType.F32: "f", DType.F16: "H", DType.BF16: "H"}


@dataclasses.dataclass
class ComposeReply:
    parts: List[PartResult]
    timings: Timings
    n_tokens: int
    top: List[Tuple[int, float]]
    state: Optional[bytes]  # a tensor stream (decode_tensor_stream) when requested
    logits: Optional[memoryview] = None  # the full last-token row (f32) with LogitsMode.FULL

    def state_tensors(self) -> List[StreamTensor]:
        return decode_tensor_stream(self.state) if self.state is not None else []

    def state_arrays(self) -> List[StateArray]:
        """The state's tensors as arrays with their contract shapes (no copy of the data)."""
        try:
            import numpy as np
        except ImportError:
            np = None
        out = []
        for t in self.state_tensors():
            if t.dtype not in _MEMORYVIEW_FORMAT:
                raise ProtocolError(f"state tensor of dtype {t.dtype.name} is not in the contract")
            if np is not None:
                np_dtype = {DType.F32: np.float32, DType.F16: np.float16,
                            DType.BF16: np.uint16}[t.dtype]
                arr = np.frombuffer(t.data, dtype=np.dtype(np_dtype).newbyteorder("<"))
                arr = arr.reshape(t.shape)
            else:
                mv = memoryview(t.data)
                arr = mv.cast("B").cast(_MEMORYVIEW_FORMAT[t.dtype], list(t.shape)) \
                    if all(d > 0 for d in t.shape) else mv
            out.append(StateArray(t.layer, t.kind, t.dtype, t.shape, arr))
        return out


@dataclasses.dataclass
class ListEntry:
    key: bytes
    tier: Tier
    namespace: str
    n_tokens: int
    bytes: int
    hits: int
    last_access_ms: int
    pins: int
    ttl_s: int


@dataclasses.dataclass
class ListReply:
    next_cursor: int
    entries: List[ListEntry]


@dataclasses.dataclass
class VerifyReply:
    checked: int
    bad: int
    bad_keys: List[bytes]


def _timings(r: _Reader) -> Timings:
    return Timings(r.u64(), r.u64(), r.u64(), r.u64(), r.u64())


def encode_tensor_stream(tensors: Iterable[StreamTensor]) -> bytes:
    tensors = list(tensors)
    w = _Writer()
    w.u32(len(tensors))
    for t in tensors:
        n = 1
        for d in t.shape:
            n *= d
        if n * _DTYPE_SIZE[DType(t.dtype)] != len(t.data):
            raise ValueError(f"tensor layer {t.layer}: {len(t.data)} bytes for shape {t.shape}")
        w.u32(t.layer)
        w.u8(int(t.kind))
        w.u8(int(t.dtype))
        w.u8(len(t.shape))
        w.u8(0)
        w.raw(struct.pack(f"<{len(t.shape)}q", *t.shape))
        w.u64(len(t.data))
        w.raw(bytes(t.data))
    return w.bytes()


def decode_tensor_stream(data: bytes) -> List[StreamTensor]:
    r = _Reader(data, "tensor stream")
    out = _read_tensor_stream(r)
    r.finish()
    return out


def _read_tensor_stream(r: _Reader) -> List[StreamTensor]:
    """The tensor stream at r's position; what follows it stays in r."""
    out = []
    for _ in range(r.count(16)):
        layer = r.u32()
        kind = r.enum(TensorKind)
        dtype = r.enum(DType)
        rank = r.u8()
        if rank > 6 or r.u8() != 0:
            raise ProtocolError("tensor stream: bad rank or reserved byte")
        shape = tuple(r.i64() for _ in range(rank))
        n = 1
        for d in shape:
            if d < 0:
                raise ProtocolError("tensor stream: negative dim")
            n *= d
        nbytes = r.u64()
        if nbytes != n * _DTYPE_SIZE[dtype]:
            raise ProtocolError("tensor stream: size does not match shape")
        out.append(StreamTensor(layer, kind, dtype, shape, bytes(r._take(nbytes))))
    return out


# ---------------------------------------------------------------------------------------------
# Requests: each op is (opcode, key, ext, body) out and a decoder of the reply frame in.


def _empty(frame: Frame) -> None:
    return None


def _json(frame: Frame) -> dict:
    try:
        return json.loads(frame.body.decode("utf-8"))
    except ValueError as e:
        raise ProtocolError(f"the JSON reply does not parse: {e}") from None


def _decode_hello(frame: Frame) -> HelloReply:
    r = _Reader(frame.body, "HELLO reply")
    m = HelloReply(r.u16(), r.u64(), r.string(), r.key(), r.string(), r.u32(), r.u32(), r.u64(),
                   r.u64(), r.u32(), r.u64(), r.u32(), r.u32(), r.boolean(), r.u32())
    r.finish()
    return m


def _decode_has(frame: Frame) -> List[Tier]:
    r = _Reader(frame.body, "HAS reply")
    tiers = [r.enum(Tier) for _ in range(r.count(1))]
    r.finish()
    return tiers


def _decode_get(frame: Frame) -> Tuple[Tier, bytes]:
    r = _Reader(frame.ext, "GET info")
    tier = r.enum(Tier)
    r.finish()
    return tier, frame.body


def _decode_prefill(frame: Frame) -> PrefillReply:
    r = _Reader(frame.body, "PREFILL reply")
    results = [PrefillResult(r.key(), r.boolean(), r.enum(Tier), r.u32(), r.u64())
               for _ in range(r.count(30))]
    m = PrefillReply(results, _timings(r))
    r.finish()
    return m


def _decode_compose(frame: Frame) -> ComposeReply:
    r = _Reader(frame.body, "COMPOSE reply")
    parts = [PartResult(r.enum(PartOutcome), r.enum(Tier), r.u32(), r.key())
             for _ in range(r.count(22))]
    timings = _timings(r)
    n_tokens = r.u32()
    top = [(r.u32(), r.f32()) for _ in range(r.count(8))]
    n_logits = r.count(4)
    logits = memoryview(bytes(r._take(4 * n_logits))).cast("f") if n_logits else None
    state = r.rest() if r.boolean() else None
    r.finish()
    return ComposeReply(parts, timings, n_tokens, top, state, logits)


def _decode_compose_state_first(frame: Frame) -> ComposeReply:
    """A StateLayout.STATE_FIRST reply: the tensor stream, then the head (has_state = 1)."""
    r = _Reader(frame.body, "COMPOSE reply")
    _read_tensor_stream(r)
    stream = bytes(r.data[:r.pos])
    m = _decode_compose(dataclasses.replace(frame, body=r.rest()))
    if m.state != b"":
        raise ProtocolError("the head of a state-first COMPOSE reply must end at has_state = 1")
    m.state = stream
    return m


def _decode_evict(frame: Frame) -> Tuple[int, int]:
    r = _Reader(frame.body, "EVICT reply")
    m = (r.u64(), r.u64())
    r.finish()
    return m


def _decode_list(frame: Frame) -> ListReply:
    r = _Reader(frame.body, "LIST reply")
    cursor = r.u64()
    entries = [ListEntry(r.key(), r.enum(Tier), r.string(), r.u32(), r.u64(), r.u64(), r.u64(),
                         r.u32(), r.u32()) for _ in range(r.count(57))]
    r.finish()
    return ListReply(cursor, entries)


def _decode_verify(frame: Frame) -> VerifyReply:
    r = _Reader(frame.body, "VERIFY reply")
    checked, bad = r.u64(), r.u64()
    keys = [r.key() for _ in range(r.count(16))]
    r.finish()
    return VerifyReply(checked, bad, keys)


def _hello_body(token: str, admin_token: str, client_name: str, features: int) -> bytes:
    w = _Writer()
    w.u16(MIN_VERSION)
    w.u16(MAX_VERSION)
    w.u64(features)
    w.string(client_name)
    w.string(token)
    w.string(admin_token)
    return w.bytes()


def _has_body(keys: Sequence[KeyLike]) -> bytes:
    w = _Writer()
    w.u32(len(keys))
    for k in keys:
        w.key(k)
    return w.bytes()


def _put_ext(ttl_s: int, pin: bool) -> bytes:
    if ttl_s == 0 and not pin:
        return b""
    w = _Writer()
    w.u32(ttl_s)
    w.u8(1 if pin else 0)
    return w.bytes()


def _prefill_body(segments: Sequence[Sequence[int]], namespace: str, seam_w: int) -> bytes:
    w = _Writer()
    w.string(namespace)
    w.u32(seam_w)
    w.u32(len(segments))
    for s in segments:
        w.tokens(s)
    return w.bytes()


def _compose_body(parts: Sequence[ComposePart], namespace: str, mode: ComposeMode, seam_w: int,
                  top_k: int, return_state: bool) -> bytes:
    w = _Writer()
    w.string(namespace)
    w.u8(int(mode))
    w.u32(seam_w)
    w.u32(top_k)
    w.u8(1 if return_state else 0)
    w.u32(len(parts))
    for p in parts:
        w.u8(int(p.kind))
        if p.kind == PartKind.SEGMENT_KEY:
            w.key(p.key)
        else:
            w.tokens(p.tokens)
    return w.bytes()


def _compose_ext(state_dtype: DType, logits: LogitsMode,
                 state_layout: StateLayout = StateLayout.HEAD_FIRST) -> bytes:
    # The layout byte only when it is not the default (the encoding older daemons know).
    if StateLayout(state_layout) != StateLayout.HEAD_FIRST:
        return bytes([int(state_dtype), int(logits), int(state_layout)])
    if DType(state_dtype) == DType.F32 and LogitsMode(logits) == LogitsMode.TOP_K:
        return b""
    return bytes([int(state_dtype), int(logits)])


def _evict_body(by: EvictBy, key: KeyLike, namespace: str, tier: Tier, nbytes: int) -> bytes:
    w = _Writer()
    w.u8(int(by))
    w.key(key)
    w.string(namespace)
    w.u8(int(tier))
    w.u64(nbytes)
    return w.bytes()


def _list_body(cursor: int, limit: int, namespace: str, tier: Tier) -> bytes:
    w = _Writer()
    w.u64(cursor)
    w.u32(limit)
    w.string(namespace)
    w.u8(int(tier))
    return w.bytes()


# ---------------------------------------------------------------------------------------------
# The client


# Frames (and bodies) above this are received into (sent from) one buffer without staging.
_DIRECT_READ = 1 << 20


class Pending:
    """A request in flight. result() reads replies (buffering others) until this one arrives."""

    def __init__(self, client: "Client", request_id: int, decode) -> None:
        self._client = client
        self.request_id = request_id
        self._decode = decode

    def result(self):
        return self._decode(self._client._wait(self.request_id))


class Client:
    def __init__(self, sock: socket.socket, timeout: Optional[float] = 30.0) -> None:
        self._sock = sock
        self._sock.settimeout(timeout)
        self._decoder = FrameDecoder()
        self._next_id = 1
        self._done: Dict[int, Frame] = {}       # completed replies not yet collected
        self._partial: Dict[int, List[Frame]] = {}  # chunked replies being assembled
        self._outstanding: set = set()
        self._goaway: Optional[HypicError] = None
        self.hello_reply: Optional[HelloReply] = None

    # -- connecting --

    @classmethod
    def connect(cls, address: str, token: str = "", admin_token: str = "",
                client_name: str = "hypic_client.py", timeout: Optional[float] = 30.0,
                hello: bool = True) -> "Client":
        """Connects to "host:port", "[v6]:port", or "unix:/path" (or a path containing "/").
        Sends HELLO unless hello=False."""
        if address.startswith("unix:") or ("/" in address and ":" not in address):
            path = address[5:] if address.startswith("unix:") else address
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(path)
        else:
            host, _, port = address.rpartition(":")
            host = host.strip("[]") or "127.0.0.1"
            sock = socket.create_connection((host, int(port)), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ipaddress.ip_address(sock.getpeername()[0]).is_loopback and \
                    hasattr(socket, "TCP_CONGESTION"):
                # No pacing on a path without congestion (as hypicd does for its replies);
                # best effort: reno is allowed by default.
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
                except OSError:
                    pass
        client = cls(sock, timeout)
        if hello:
            try:
                client.hello(token, admin_token, client_name)
            except BaseException:
                client.close()
                raise
        return client

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            self._outstanding.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the pipelined core --

    def send(self, opcode: int, body: bytes = b"", ext: bytes = b"", key: bytes = ZERO_KEY,
             deadline_ms: int = 0) -> int:
        """Sends one request without waiting and returns its request_id."""
        if self._goaway is not None:
            raise self._goaway
        rid = self._next_id
        self._next_id += 1
        version = self.hello_reply.version if self.hello_reply else MAX_VERSION
        head = _frame_head(opcode, rid, body, ext, key, 0, 0, deadline_ms, version)
        if len(body) > _DIRECT_READ:
            self._sock.sendall(head)  # no concatenated copy of a large body
            self._sock.sendall(body)
        else:
            self._sock.sendall(head + body)
        self._outstanding.add(rid)
        return rid

    def _read_one(self) -> None:
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                break
            if self._decoder.needed() - self._decoder.buffered() > _DIRECT_READ:
                self._decoder.read_frame_from(self._sock)
                continue
            data = self._sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            self._decoder.feed(data)
        if frame.opcode == Opcode.GOAWAY:
            self._goaway = HypicError(frame.status, frame.body.decode("utf-8", "replace"))
            raise self._goaway
        rid = frame.request_id
        if rid not in self._outstanding:
            raise ProtocolError(f"a reply to request {rid}, which is not in flight")
        if frame.flags & FLAG_MORE and frame.status == 0:
            self._partial.setdefault(rid, []).append(frame)
            return
        chunks = self._partial.pop(rid, [])
        if chunks and frame.status == 0:
            first = chunks[0]
            first.body = b"".join([c.body for c in chunks] + [frame.body])
            frame = first
        self._outstanding.discard(rid)
        self._done[rid] = frame

    def _wait(self, rid: int) -> Frame:
        while rid not in self._done:
            if self._goaway is not None:
                raise self._goaway
            self._read_one()
        frame = self._done.pop(rid)
        if frame.status != 0:
            raise HypicError(frame.status, frame.body.decode("utf-8", "replace"))
        return frame

    def submit(self, opcode: int, decode, body: bytes = b"", ext: bytes = b"",
               key: bytes = ZERO_KEY, deadline_ms: int = 0) -> Pending:
        return Pending(self, self.send(opcode, body, ext, key, deadline_ms), decode)

    # -- operations (each has a submit_* pipelined form and a blocking form) --

    def hello(self, token: str = "", admin_token: str = "",
              client_name: str = "hypic_client.py") -> HelloReply:
        rid = self.send(Opcode.HELLO, _hello_body(token, admin_token, client_name,
                                                  FEATURE_CHUNKED | FEATURE_STATE_INLINE))
        self.hello_reply = _decode_hello(self._wait(rid))
        return self.hello_reply

    def submit_ping(self, payload: bytes = b"") -> Pending:
        return self.submit(Opcode.PING, lambda f: f.body, payload)

    def ping(self, payload: bytes = b"") -> bytes:
        return self.submit_ping(payload).result()

    def submit_has(self, keys: Sequence[KeyLike]) -> Pending:
        return self.submit(Opcode.HAS, _decode_has, _has_body(keys))

    def has(self, keys: Sequence[KeyLike]) -> List[Tier]:
        return self.submit_has(keys).result()

    def submit_get(self, key: KeyLike) -> Pending:
        return self.submit(Opcode.GET, _decode_get, key=key_bytes(key))

    def get(self, key: KeyLike) -> Tuple[Tier, bytes]:
        """(tier it was served from, the entry's serialized bytes); NOT_FOUND raises."""
        return self.submit_get(key).result()

    def submit_put(self, key: KeyLike, entry: bytes, ttl_s: int = 0, pin: bool = False) -> Pending:
        return self.submit(Opcode.PUT, _empty, bytes(entry), _put_ext(ttl_s, pin), key_bytes(key))

    def put(self, key: KeyLike, entry: bytes, ttl_s: int = 0, pin: bool = False) -> None:
        self.submit_put(key, entry, ttl_s, pin).result()

    def submit_delete(self, key: KeyLike) -> Pending:
        return self.submit(Opcode.DEL, _empty, key=key_bytes(key))

    def delete(self, key: KeyLike) -> None:
        self.submit_delete(key).result()

    def submit_prefill(self, segments: Sequence[Sequence[int]], namespace: str = "",
                       seam_w: int = DEFAULT_SEAM, deadline_ms: int = 0) -> Pending:
        return self.submit(Opcode.PREFILL, _decode_prefill,
                           _prefill_body(segments, namespace, seam_w), deadline_ms=deadline_ms)

    def prefill(self, segments: Sequence[Sequence[int]], namespace: str = "",
                seam_w: int = DEFAULT_SEAM, deadline_ms: int = 0) -> PrefillReply:
        return self.submit_prefill(segments, namespace, seam_w, deadline_ms).result()

    def submit_compose(self, parts: Sequence[ComposePart], namespace: str = "",
                       mode: ComposeMode = ComposeMode.HYPIC, seam_w: int = DEFAULT_SEAM,
                       top_k: int = 0, return_state: bool = False,
                       deadline_ms: int = 0, state_dtype: DType = DType.F32,
                       logits: LogitsMode = LogitsMode.TOP_K,
                       state_layout: StateLayout = StateLayout.HEAD_FIRST) -> Pending:
        """state_dtype (F32, BF16, F16) is the encoding of the returned state; logits=FULL adds
        the whole last-token row; state_layout=STATE_FIRST has the daemon send each layer as
        soon as the compose has it, before the head (the reply decodes to the same
        ComposeReply). Asking for the state from a server whose state contract this client does
        not know raises HypicError(VERSION_MISMATCH), and STATE_FIRST from a server that does
        not announce it HypicError(UNSUPPORTED), before anything is sent."""
        if return_state and self.hello_reply is not None and \
                self.hello_reply.state_contract != STATE_CONTRACT_VERSION:
            raise HypicError(Status.VERSION_MISMATCH,
                             f"the server's state contract is version "
                             f"{self.hello_reply.state_contract}; this client knows "
                             f"{STATE_CONTRACT_VERSION}")
        state_first = StateLayout(state_layout) == StateLayout.STATE_FIRST
        if state_first and self.hello_reply is not None and \
                not self.hello_reply.features & FEATURE_STATE_FIRST:
            raise HypicError(Status.UNSUPPORTED, "the server does not announce STATE_FIRST")
        body = _compose_body(parts, namespace, mode, seam_w, top_k, return_state)
        return self.submit(Opcode.COMPOSE,
                           _decode_compose_state_first if state_first else _decode_compose, body,
                           _compose_ext(state_dtype, logits, state_layout),
                           deadline_ms=deadline_ms)

    def compose(self, parts: Sequence[ComposePart], namespace: str = "",
                mode: ComposeMode = ComposeMode.HYPIC, seam_w: int = DEFAULT_SEAM,
                top_k: int = 0, return_state: bool = False, deadline_ms: int = 0,
                state_dtype: DType = DType.F32, logits: LogitsMode = LogitsMode.TOP_K,
                state_layout: StateLayout = StateLayout.HEAD_FIRST) -> ComposeReply:
        return self.submit_compose(parts, namespace, mode, seam_w, top_k, return_state,
                                   deadline_ms, state_dtype, logits, state_layout).result()

    # -- admin --

    def stats(self) -> dict:
        return self.submit(Opcode.STATS, _json).result()

    def config(self) -> dict:
        return self.submit(Opcode.CONFIG, _json).result()

    def evict(self, by: EvictBy = EvictBy.KEY, key: KeyLike = ZERO_KEY, namespace: str = "",
              tier: Tier = Tier.NONE, nbytes: int = 0) -> Tuple[int, int]:
        """(entries, bytes) evicted."""
        body = _evict_body(by, key, namespace, tier, nbytes)
        return self.submit(Opcode.EVICT, _decode_evict, body).result()

    def pin(self, key: KeyLike) -> None:
        self.submit(Opcode.PIN, _empty, key=key_bytes(key)).result()

    def unpin(self, key: KeyLike) -> None:
        self.submit(Opcode.UNPIN, _empty, key=key_bytes(key)).result()

    def flush(self) -> None:
        self.submit(Opcode.FLUSH, _empty).result()

    def shutdown(self) -> None:
        """Returns once the daemon acknowledged it or started draining (the drain may close
        the connection with GOAWAY SHUTTING_DOWN before the reply is written)."""
        try:
            self.submit(Opcode.SHUTDOWN, _empty).result()
        except HypicError as e:
            if e.status != Status.SHUTTING_DOWN:
                raise

    def list(self, cursor: int = 0, limit: int = 100, namespace: str = "",
             tier: Tier = Tier.NONE) -> ListReply:
        body = _list_body(cursor, limit, namespace, tier)
        return self.submit(Opcode.LIST, _decode_list, body).result()

    def verify(self, key: Optional[KeyLike] = None) -> VerifyReply:
        k = ZERO_KEY if key is None else key_bytes(key)
        return self.submit(Opcode.VERIFY, _decode_verify, key=k).result()
