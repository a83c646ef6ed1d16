"""Unit tests of client/python/hypic_client.py, and end-to-end tests against the real hypicd.

The end-to-end classes start $HYPICD (set by ctest when the hypicd target exists) on an
ephemeral port in a temporary data directory and are skipped when it is not set.
Operations that this daemon build answers with UNSUPPORTED (e.g. storage or the model runtime
not wired yet) are skipped with that reason, not passed.
"""

import dataclasses
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "client", "python"))
import hypic_client as hc  # noqa: E402

HYPICD = os.environ.get("HYPICD", "")
try:  # the client's optional numpy path (python_client_numpy_test runs Debian's python3-numpy)
    import numpy as NUMPY
except ImportError:
    NUMPY = None
if os.environ.get("HYPIC_EXPECT_NUMPY") and NUMPY is None:
    raise SystemExit("HYPIC_EXPECT_NUMPY is set but numpy is not importable")
# The tiny built-in model, generated on the first start and shared by the daemons of this run.
MODEL_CACHE = os.environ.get("HYPIC_TEST_MODEL_CACHE", "")


def reply_frame(opcode, rid, body=b"", ext=b"", flags=hc.FLAG_REPLY, status=0):
    return hc.encode_frame(opcode, rid, body, ext, flags=flags, status=status)


class FrameTest(unittest.TestCase):
    def test_crc32_is_zlib_crc32(self):
        self.assertEqual(hc.crc32(b"123456789"), 0xCBF43926)

    def test_header_layout(self):
        f = hc.encode_frame(hc.Opcode.GET, 0x1122334455667788, b"body", b"ex",
                            key=bytes(range(16)), deadline_ms=250)
        self.assertEqual(len(f), 64 + 2 + 4)
        self.assertEqual(f[:4], b"\x89HYP")
        self.assertEqual(f[4:8], bytes([1, 4, 0, 1]))
        self.assertEqual(struct.unpack_from("<Q", f, 8)[0], 0x1122334455667788)
        self.assertEqual(f[16:32], bytes(range(16)))
        self.assertEqual(struct.unpack_from("<QQHHIII", f, 32),
                         (4, zlib.crc32(b"exbody"), 2, 0, 250, 0, zlib.crc32(f[:60])))

    def test_decoder_every_prefix_then_frame(self):
        f = reply_frame(hc.Opcode.PING, 9, b"payload", b"e")
        for n in range(len(f)):
            d = hc.FrameDecoder()
            d.feed(f[:n])
            self.assertIsNone(d.next_frame(), n)
        d = hc.FrameDecoder()
        d.feed(f + reply_frame(hc.Opcode.PING, 10, b"x"))
        a, b = d.next_frame(), d.next_frame()
        self.assertEqual((a.request_id, a.body, a.ext), (9, b"payload", b"e"))
        self.assertEqual((b.request_id, b.body), (10, b"x"))
        self.assertIsNone(d.next_frame())

    def test_decoder_rejects_bad_input(self):
        good = reply_frame(hc.Opcode.PING, 1, b"abc")
        cases = {
            "http": b"HTTP/1.1 200 OK\r\n",
            "tls": b"\x16\x03\x01",
            "header bit": good[:20] + bytes([good[20] ^ 1]) + good[21:],
            "body bit": good[:-1] + bytes([good[-1] ^ 1]),
            "request": hc.encode_frame(hc.Opcode.PING, 1, b"abc"),
        }
        for name, data in cases.items():
            d = hc.FrameDecoder()
            d.feed(data)
            with self.assertRaises(hc.ProtocolError, msg=name):
                d.next_frame()

    def test_large_frame_is_checked_as_it_is_read(self):
        # read_frame_from() checksums the pieces as they arrive (recv_into in 256 KiB steps):
        # a good frame decodes, a flipped byte deep in a large body is caught.
        body = os.urandom(600 << 10)
        good = reply_frame(hc.Opcode.GET, 9, body, b"ext")
        bad = bytearray(good)
        bad[len(bad) - 300000] ^= 0x40
        for frame, ok in ((good, True), (bytes(bad), False)):
            a, b = socket.socketpair()
            with a, b:
                b.sendall(frame[:100])  # the header and a little of the body come first
                d = hc.FrameDecoder()
                d.feed(a.recv(100))
                sender = threading.Thread(target=b.sendall, args=(frame[100:],))
                sender.start()
                d.read_frame_from(a)
                sender.join()
                if ok:
                    f = d.next_frame()
                    self.assertEqual((f.request_id, f.ext, f.body), (9, b"ext", body))
                else:
                    with self.assertRaises(hc.ProtocolError):
                        d.next_frame()

    def test_oversized_length_rejected_from_header(self):
        head = struct.pack("<4sBBBBQ16sQQHHII", b"\x89HYP", 1, 2, hc.FLAG_REPLY, 1, 1, bytes(16),
                           1 << 40, 0, 0, 0, 0, 0)
        d = hc.FrameDecoder(max_body=1 << 20)
        d.feed(head + struct.pack("<I", hc.crc32(head)))
        with self.assertRaises(hc.ProtocolError):
            d.next_frame()

    def test_keys(self):
        k = bytes(range(16))
        self.assertEqual(hc.key_hex(k), "0f0e0d0c0b0a09080706050403020100")
        self.assertEqual(hc.key_bytes(hc.key_hex(k)), k)
        with self.assertRaises(ValueError):
            hc.key_bytes(b"short")

    def test_tensor_stream_round_trip(self):
        t = [hc.StreamTensor(2, hc.TensorKind.STATE, hc.DType.F32, (2, 2),
                             struct.pack("<4f", 1, 2, 3, 4)),
             hc.StreamTensor(5, hc.TensorKind.VALUE, hc.DType.BF16, (0, 4), b"")]
        data = hc.encode_tensor_stream(t)
        self.assertEqual(hc.decode_tensor_stream(data), t)
        for n in range(len(data)):
            with self.assertRaises(hc.ProtocolError):
                hc.decode_tensor_stream(data[:n])
        with self.assertRaises(ValueError):
            hc.encode_tensor_stream([hc.StreamTensor(0, hc.TensorKind.STATE, hc.DType.F32, (3,),
                                                     b"1234")])


class _FakePeer:
    """A socketpair whose far end the test scripts by hand."""

    def __init__(self, test):
        a, self.far = socket.socketpair()
        self.client = hc.Client(a, timeout=5)
        test.addCleanup(self.far.close)
        test.addCleanup(self.client.close)

    def read_request(self):
        d = bytearray()
        while len(d) < 64:
            d += self.far.recv(64 - len(d))
        body_len, _, ext_len = struct.unpack_from("<QQH", d, 32)
        rest = 64 + ext_len + body_len - len(d)
        while rest > 0:
            chunk = self.far.recv(rest)
            d += chunk
            rest -= len(chunk)
        rid = struct.unpack_from("<Q", d, 8)[0]
        self.last_ext = bytes(d[64:64 + ext_len])
        return d[5], rid, bytes(d[64 + ext_len:])


def _hello_reply():
    return hc.HelloReply(1, 0, "fake", bytes(16), "m", 8, 1, 1 << 20, 1 << 30, 64, 1 << 28, 100,
                         100, False, hc.STATE_CONTRACT_VERSION)


class ClientLogicTest(unittest.TestCase):
    def test_pipelined_replies_out_of_order(self):
        p = _FakePeer(self)
        pending = [p.client.submit_ping(bytes([i]) * (i + 1)) for i in range(10)]
        reqs = [p.read_request() for _ in range(10)]
        for op, rid, body in reversed(reqs):
            self.assertEqual(op, hc.Opcode.PING)
            p.far.sendall(reply_frame(hc.Opcode.PING, rid, body))
        for i, pend in enumerate(pending):
            self.assertEqual(pend.result(), bytes([i]) * (i + 1))

    def test_chunked_reply_and_errors(self):
        p = _FakePeer(self)
        get = p.client.submit_get(bytes(16))
        missing = p.client.submit_delete(bytes(16))
        (_, rid_get, _), (_, rid_del, _) = p.read_request(), p.read_request()
        p.far.sendall(reply_frame(hc.Opcode.DEL, rid_del, b"no such key", status=1))
        p.far.sendall(reply_frame(hc.Opcode.GET, rid_get, b"abc", b"\x03",
                                  flags=hc.FLAG_REPLY | hc.FLAG_MORE))
        p.far.sendall(reply_frame(hc.Opcode.GET, rid_get, b"def"))
        self.assertEqual(get.result(), (hc.Tier.SSD, b"abcdef"))
        with self.assertRaises(hc.HypicError) as e:
            missing.result()
        self.assertEqual((e.exception.status, e.exception.message), (1, "no such key"))

    def test_goaway_fails_outstanding(self):
        p = _FakePeer(self)
        pend = p.client.submit_ping(b"x")
        p.read_request()
        p.far.sendall(reply_frame(hc.Opcode.GOAWAY, 0, b"bye", status=hc.Status.SHUTTING_DOWN))
        with self.assertRaises(hc.HypicError) as e:
            pend.result()
        self.assertEqual(e.exception.status, hc.Status.SHUTTING_DOWN)
        with self.assertRaises(hc.HypicError):
            p.client.ping()

    def test_compose_reply_decoding(self):
        p = _FakePeer(self)
        pend = p.client.submit_compose([hc.ComposePart.raw([1, 2])], top_k=2, return_state=True)
        _, rid, body = p.read_request()
        # namespace "", mode HYPIC, default seam, top_k 2, return_state, one raw part
        self.assertEqual(body, struct.pack("<IBIIBIBI2I", 0, 2, hc.DEFAULT_SEAM, 2, 1, 1, 2, 2,
                                           1, 2))
        state = hc.encode_tensor_stream([hc.StreamTensor(0, hc.TensorKind.STATE, hc.DType.F32,
                                                         (1,), struct.pack("<f", 0.5))])
        reply = (struct.pack("<I", 1) + bytes([2, 0]) + struct.pack("<I", 2) + bytes(16) +
                 struct.pack("<5Q", 1, 2, 3, 4, 10) + struct.pack("<I", 2) +
                 struct.pack("<I", 2) + struct.pack("<IfIf", 7, 2.5, 3, -1.0) +
                 struct.pack("<I3f", 3, 0.25, 2.5, -1.0) + b"\x01" + state)
        p.far.sendall(reply_frame(hc.Opcode.COMPOSE, rid, reply))
        r = pend.result()
        self.assertEqual(r.parts[0].outcome, hc.PartOutcome.LIVE)
        self.assertEqual(r.timings.total_us, 10)
        self.assertEqual(r.n_tokens, 2)
        self.assertEqual(r.top, [(7, 2.5), (3, -1.0)])
        self.assertEqual(list(r.logits), [0.25, 2.5, -1.0])
        self.assertEqual(r.state_tensors()[0].data, struct.pack("<f", 0.5))
        arrays = r.state_arrays()
        self.assertEqual((arrays[0].layer, arrays[0].kind, arrays[0].shape), (0, hc.TensorKind.STATE, (1,)))
        self.assertEqual(float(arrays[0].array[0]), 0.5)

    def test_compose_options_ext_and_state_contract(self):
        p = _FakePeer(self)
        pend = p.client.submit_compose([hc.ComposePart.raw([1])], return_state=True,
                                       state_dtype=hc.DType.BF16, logits=hc.LogitsMode.FULL)
        self.assertIsNotNone(pend)
        p.read_request()
        self.assertEqual(p.last_ext, bytes([hc.DType.BF16, hc.LogitsMode.FULL]))
        # Defaults send no ext (the encoding older servers know).
        self.assertEqual(hc._compose_ext(hc.DType.F32, hc.LogitsMode.TOP_K), b"")
        # A server announcing another state contract: asking for the state is refused locally.
        p.client.hello_reply = dataclasses.replace(_hello_reply(), state_contract=2)
        with self.assertRaises(hc.HypicError) as e:
            p.client.submit_compose([hc.ComposePart.raw([1])], return_state=True)
        self.assertEqual(e.exception.status, hc.Status.VERSION_MISMATCH)
        p.client.submit_compose([hc.ComposePart.raw([1])])  # no state: any contract is fine

    def test_state_first_ext_decoding_and_feature(self):
        p = _FakePeer(self)
        # A server that announces no features: STATE_FIRST is refused before anything is sent.
        p.client.hello_reply = _hello_reply()
        with self.assertRaises(hc.HypicError) as e:
            p.client.submit_compose([hc.ComposePart.raw([1])], return_state=True,
                                    state_layout=hc.StateLayout.STATE_FIRST)
        self.assertEqual(e.exception.status, hc.Status.UNSUPPORTED)
        p.client.hello_reply = dataclasses.replace(_hello_reply(),
                                                   features=hc.FEATURE_STATE_FIRST)
        pend = p.client.submit_compose([hc.ComposePart.raw([1, 2])], top_k=1, return_state=True,
                                       state_layout=hc.StateLayout.STATE_FIRST)
        _, rid, _ = p.read_request()
        self.assertEqual(p.last_ext, bytes([hc.DType.F32, hc.LogitsMode.TOP_K,
                                            hc.StateLayout.STATE_FIRST]))
        state = hc.encode_tensor_stream([
            hc.StreamTensor(0, hc.TensorKind.STATE, hc.DType.F32, (2,), struct.pack("<2f", 1, 2)),
            hc.StreamTensor(1, hc.TensorKind.KEY, hc.DType.F32, (1,), struct.pack("<f", 3))])
        head = (struct.pack("<I", 1) + bytes([2, 0]) + struct.pack("<I", 2) + bytes(16) +
                struct.pack("<5Q", 1, 2, 3, 4, 10) + struct.pack("<I", 2) +
                struct.pack("<I", 1) + struct.pack("<If", 7, 2.5) + struct.pack("<I", 0) + b"\x01")
        # The stream, then the head, in chunks that do not follow the tensors.
        body = state + head
        cuts = [0, 5, 41, len(state) + 3, len(body)]
        for a, b in zip(cuts, cuts[1:]):
            last = b == len(body)
            p.far.sendall(reply_frame(hc.Opcode.COMPOSE, rid, body[a:b],
                                      flags=hc.FLAG_REPLY | (0 if last else hc.FLAG_MORE)))
        r = pend.result()
        self.assertEqual((r.n_tokens, r.top, r.timings.total_us), (2, [(7, 2.5)], 10))
        self.assertEqual(r.state, state)
        self.assertEqual([(t.layer, t.data) for t in r.state_tensors()],
                         [(0, struct.pack("<2f", 1, 2)), (1, struct.pack("<f", 3))])
        # A head that does not end at has_state = 1 is a protocol error.
        pend = p.client.submit_compose([hc.ComposePart.raw([1])], return_state=True,
                                       state_layout=hc.StateLayout.STATE_FIRST)
        _, rid, _ = p.read_request()
        p.far.sendall(reply_frame(hc.Opcode.COMPOSE, rid, state + head + b"\x00"))
        with self.assertRaises(hc.ProtocolError):
            pend.result()


# A [[tenant]] without a token that may also PUT and DEL (tests/e2e/daemon.h, kLocalWriterTenant).
LOCAL_WRITER_TENANT = '[[tenant]]\nname = "local"\nops = ["read", "compute", "write"]\n'


class Daemon:
    def __init__(self, *args, config=None):
        self.dir = tempfile.mkdtemp(prefix="hypic-pytest-")
        ready = os.path.join(self.dir, "ready")
        if config is not None:
            path = os.path.join(self.dir, "hypicd.toml")
            with open(path, "w") as f:
                f.write(config)
            args = ("--config", path) + args
        self.log = open(os.path.join(self.dir, "hypicd.log"), "wb")
        self.proc = subprocess.Popen(
            [HYPICD, "--data-dir", self.dir, "--listen", "127.0.0.1:0", "--ready-file", ready,
             "--metrics", "off", "--ram-capacity", "256MiB", "--ssd-capacity", "256MiB",
             "--model", "builtin:tiny", "--model-cache-dir", MODEL_CACHE or self.dir, *args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("hypicd did not start:\n" + self.output())
            time.sleep(0.01)
        time.sleep(0.01)  # the ready file is written once; let the write finish
        with open(ready) as f:
            info = dict(line.split("=", 1) for line in f.read().split() if "=" in line)
        self.tcp = info["tcp"]
        self.unix = "unix:" + info["unix"] if "unix" in info else None

    def output(self):
        self.log.flush()
        with open(os.path.join(self.dir, "hypicd.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def skip_if_unsupported(test, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except hc.HypicError as e:
        if e.status == hc.Status.UNSUPPORTED:
            test.skipTest(f"this hypicd build does not serve it: {e.message}")
        raise


@unittest.skipUnless(HYPICD, "HYPICD (path to the hypicd binary) is not set")
class DaemonTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(config=LOCAL_WRITER_TENANT)  # PUT and DEL need `write`

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def connect(self, **kw):
        # The unix socket, as the daemon's own user: the admin grant without an admin token.
        return hc.Client.connect(self.daemon.unix or self.daemon.tcp, **kw)

    def test_hello_and_ping_over_tcp_and_unix(self):
        addrs = [self.daemon.tcp] + ([self.daemon.unix] if self.daemon.unix else [])
        for addr in addrs:
            with hc.Client.connect(addr) as c:
                self.assertEqual(c.hello_reply.version, 1)
                self.assertTrue(c.hello_reply.server_version)
                # No admin token configured: admin over the unix socket (own uid), never TCP.
                self.assertEqual(c.hello_reply.admin, addr.startswith("unix:"))
                self.assertEqual(c.ping(b"hello hypic"), b"hello hypic")
                self.assertEqual(c.ping(), b"")

    @unittest.skipUnless(hasattr(socket, "TCP_CONGESTION"), "no TCP_CONGESTION on this platform")
    def test_loopback_tcp_uses_reno(self):
        # The client's end carries PUT bodies; a pacing default (bbr) would cap one flow.
        with hc.Client.connect(self.daemon.tcp) as c:
            name = c._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
            self.assertEqual(name.rstrip(b"\0"), b"reno")

    def test_pipelining(self):
        with self.connect() as c:
            payloads = [os.urandom(i % 100) for i in range(200)]
            pending = [c.submit_ping(b) for b in payloads]
            for i in reversed(range(200)):  # collected in the reverse order of sending
                self.assertEqual(pending[i].result(), payloads[i])
            bodies = [c.submit_ping(bytes([i]) * 3) for i in range(50)]
            self.assertEqual([b.result() for b in bodies], [bytes([i]) * 3 for i in range(50)])

    def test_large_ping_uses_the_body_checksum(self):
        with self.connect() as c:
            body = os.urandom(3 << 20)
            self.assertEqual(c.ping(body), body)

    def test_stats_and_config_are_json(self):
        with self.connect() as c:
            stats = c.stats()
            self.assertIsInstance(stats, dict)
            config = c.config()
            self.assertIsInstance(config, dict)
            self.assertIn("listen", config)

    def test_kv_operations(self):
        with self.connect() as c:
            keys = [os.urandom(16) for _ in range(64)]
            tiers = skip_if_unsupported(self, c.has, keys)
            self.assertEqual(tiers, [hc.Tier.NONE] * 64)
            for op in (c.get, c.delete):
                with self.assertRaises(hc.HypicError) as e:
                    skip_if_unsupported(self, op, keys[0])
                self.assertEqual(e.exception.status, hc.Status.NOT_FOUND)

    def test_prefill_then_compose_hits(self):
        with self.connect() as c:
            segs = [[(7 * i + j) % 1000 for j in range(40)] for i in range(3)]
            rep = skip_if_unsupported(self, c.prefill, segs, namespace="pytest")
            self.assertEqual(len(rep.results), 3)
            keys = [r.key for r in rep.results]
            self.assertNotIn(hc.Tier.NONE, c.has(keys))
            parts = [hc.ComposePart.raw([1, 2, 3])] + [hc.ComposePart.segment(s) for s in segs]
            out = c.compose(parts, namespace="pytest", top_k=4)
            self.assertEqual([p.outcome for p in out.parts[1:]], [hc.PartOutcome.HIT] * 3)
            self.assertEqual(len(out.top), 4)
            tier, entry = c.get(keys[0])
            self.assertNotEqual(tier, hc.Tier.NONE)
            c.delete(keys[0])
            self.assertEqual(c.has(keys[:1]), [hc.Tier.NONE])
            c.put(keys[0], entry)
            self.assertEqual(c.get(keys[0])[1], entry)

    def test_state_first_reply_is_the_head_first_one(self):
        """StateLayout.STATE_FIRST: the same state bytes, top and logits, in both dtypes."""
        with self.connect() as c:
            self.assertTrue(c.hello_reply.features & hc.FEATURE_STATE_FIRST)
            parts = [hc.ComposePart.raw([(3 * i) % 500 + 1 for i in range(40)])]
            for dtype in (hc.DType.F32, hc.DType.BF16):
                want = skip_if_unsupported(self, c.compose, parts, mode=hc.ComposeMode.FULL,
                                           top_k=3, return_state=True, state_dtype=dtype,
                                           logits=hc.LogitsMode.FULL)
                got = c.compose(parts, mode=hc.ComposeMode.FULL, top_k=3, return_state=True,
                                state_dtype=dtype, logits=hc.LogitsMode.FULL,
                                state_layout=hc.StateLayout.STATE_FIRST)
                self.assertEqual(got.state, want.state)
                self.assertEqual(got.top, want.top)
                self.assertEqual(bytes(got.logits), bytes(want.logits))
                self.assertEqual(got.n_tokens, want.n_tokens)

    def test_state_arrays_follow_the_contract(self):
        """docs/state-format.md: shapes, kinds and dtypes; bf16 is the f32 state rounded once."""
        with self.connect() as c:
            self.assertEqual(c.hello_reply.state_contract, hc.STATE_CONTRACT_VERSION)
            self.assertTrue(c.hello_reply.features & hc.FEATURE_CHUNKED)
            parts = [hc.ComposePart.raw([(5 * i) % 500 + 1 for i in range(30)])]
            full = skip_if_unsupported(self, c.compose, parts, mode=hc.ComposeMode.FULL,
                                       top_k=3, return_state=True, logits=hc.LogitsMode.FULL)
            half = c.compose(parts, mode=hc.ComposeMode.FULL, top_k=3, return_state=True,
                             state_dtype=hc.DType.BF16)
            self.assertIsNone(half.logits)
            row = list(full.logits)
            self.assertEqual(full.top[0][0], max(range(len(row)), key=row.__getitem__))
            a, b = full.state_arrays(), half.state_arrays()
            self.assertEqual(len(a), len(b))
            self.assertGreater(len(a), 0)
            fs, hs = full.state_tensors(), half.state_tensors()
            for i, (x, y) in enumerate(zip(a, b)):
                self.assertEqual((x.layer, x.kind, x.shape), (y.layer, y.kind, y.shape))
                self.assertEqual((x.dtype, y.dtype), (hc.DType.F32, hc.DType.BF16))
                if x.kind in (hc.TensorKind.KEY, hc.TensorKind.VALUE):
                    self.assertEqual(x.shape[0], full.n_tokens)
                    self.assertEqual(len(x.shape), 3)
                elif x.kind == hc.TensorKind.STATE:
                    self.assertEqual(len(x.shape), 3)  # [HV, dk, dv]
                else:
                    self.assertEqual(x.kind, hc.TensorKind.CONV_TAIL)
                    self.assertEqual(len(x.shape), 2)  # [K-1, conv_channels]
                fx = struct.unpack(f"<{len(fs[i].data) // 4}I", fs[i].data)
                hy = struct.unpack(f"<{len(fx)}H", hs[i].data)
                rne = [((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in fx]
                self.assertEqual(list(hy), rne)
                if NUMPY is not None:  # numpy arrays of the contract's shape, the same values
                    self.assertIsInstance(x.array, NUMPY.ndarray)
                    self.assertEqual(x.array.shape, tuple(x.shape))
                    self.assertEqual(x.array.dtype, NUMPY.float32)
                    self.assertEqual(x.array.tobytes(), fs[i].data)
                    self.assertEqual(y.array.shape, tuple(y.shape))
                    self.assertEqual(y.array.dtype, NUMPY.uint16)  # bf16 bit patterns
                    self.assertEqual(y.array.ravel().tolist(), rne)
                    widened = hc.bf16_to_f32(y.array)
                    self.assertEqual(widened.dtype, NUMPY.float32)
                    self.assertEqual(widened.tobytes(),
                                     struct.pack(f"<{len(rne)}I", *[h << 16 for h in rne]))


@unittest.skipUnless(HYPICD, "HYPICD (path to the hypicd binary) is not set")
class AuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon("--token", "user-secret", "--admin-token", "admin-secret")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_missing_or_wrong_token_is_refused(self):
        for token in ("", "user-secreT", "admin-secret-no"):
            with self.assertRaises(hc.HypicError) as e:
                hc.Client.connect(self.daemon.tcp, token=token)
            self.assertEqual(e.exception.status, hc.Status.UNAUTHORIZED)

    def test_admin_ops_need_the_admin_token(self):
        with hc.Client.connect(self.daemon.tcp, token="user-secret") as c:
            self.assertFalse(c.hello_reply.admin)
            self.assertEqual(c.ping(b"ok"), b"ok")
            for op in (c.stats, c.config, c.flush):
                with self.assertRaises(hc.HypicError) as e:
                    op()
                self.assertEqual(e.exception.status, hc.Status.UNAUTHORIZED)
            self.assertEqual(c.ping(b"still"), b"still")  # the connection survives
        with hc.Client.connect(self.daemon.tcp, token="user-secret",
                               admin_token="admin-secret") as c:
            self.assertTrue(c.hello_reply.admin)
            self.assertIsInstance(c.stats(), dict)

    def test_wrong_admin_token_is_refused(self):
        with self.assertRaises(hc.HypicError) as e:
            hc.Client.connect(self.daemon.tcp, token="user-secret", admin_token="guess")
        self.assertEqual(e.exception.status, hc.Status.UNAUTHORIZED)


@unittest.skipUnless(HYPICD, "HYPICD (path to the hypicd binary) is not set")
class ShutdownTest(unittest.TestCase):
    def test_admin_shutdown_stops_the_daemon(self):
        d = Daemon()
        try:
            with hc.Client.connect(d.unix) as c:  # admin: the daemon's own uid
                c.shutdown()
            self.assertEqual(d.proc.wait(20), 0)
        finally:
            d.stop()


if __name__ == "__main__":
    unittest.main()
