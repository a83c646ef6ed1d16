"""Cross-language conformance between client/python/hypic_client.py and protocol/ (C++).

Driven by tests/client/python_conformance_test.cpp:
  conformance.py write-requests DIR   writes one request frame per message type (CRC-32 body
                                      checksums); the C++ test compares them byte for byte
                                      with protocol/'s encoding of the same messages.
  conformance.py read-replies DIR     decodes the reply frames the C++ test wrote and prints
                                      what it decoded as JSON, which the C++ test compares
                                      with the messages it encoded.
The message contents are defined in the C++ test and mirrored here.
"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "client", "python"))
import hypic_client as hc  # noqa: E402

K1 = bytes(range(16))
K2 = bytes(range(16, 32))


def write_requests(d):
    frames = {
        "hello": hc.encode_frame(hc.Opcode.HELLO, 1, hc._hello_body("tok", "adm", "py", 6)),
        "ping": hc.encode_frame(hc.Opcode.PING, 2, b"ping!"),
        "has": hc.encode_frame(hc.Opcode.HAS, 3, hc._has_body([K1, K2])),
        "get": hc.encode_frame(hc.Opcode.GET, 4, key=K1, deadline_ms=1500),
        "put": hc.encode_frame(hc.Opcode.PUT, 5, b"entry-bytes", hc._put_ext(60, True), K2),
        "prefill": hc.encode_frame(hc.Opcode.PREFILL, 6,
                                   hc._prefill_body([[1, 2, 3], [], [7]], "tenant", 8)),
        "compose": hc.encode_frame(hc.Opcode.COMPOSE, 7, hc._compose_body(
            [hc.ComposePart.raw([9, 8]), hc.ComposePart.segment([1, 2, 3]),
             hc.ComposePart.by_key(K1)], "tenant", hc.ComposeMode.ORACLE, hc.DEFAULT_SEAM, 5,
            True)),
        "compose_options": hc.encode_frame(hc.Opcode.COMPOSE, 11, hc._compose_body(
            [hc.ComposePart.raw([4])], "", hc.ComposeMode.FULL, hc.DEFAULT_SEAM, 1, True),
            hc._compose_ext(hc.DType.BF16, hc.LogitsMode.FULL)),
        "compose_state_first": hc.encode_frame(hc.Opcode.COMPOSE, 12, hc._compose_body(
            [hc.ComposePart.raw([4])], "", hc.ComposeMode.FULL, hc.DEFAULT_SEAM, 1, True),
            hc._compose_ext(hc.DType.BF16, hc.LogitsMode.FULL, hc.StateLayout.STATE_FIRST)),
        "evict": hc.encode_frame(hc.Opcode.EVICT, 8, hc._evict_body(
            hc.EvictBy.BYTES, hc.ZERO_KEY, "", hc.Tier.HOST, 1 << 30)),
        "list": hc.encode_frame(hc.Opcode.LIST, 9, hc._list_body(77, 50, "tenant", hc.Tier.SSD)),
        "verify": hc.encode_frame(hc.Opcode.VERIFY, 10, key=K2),
    }
    for name, frame in frames.items():
        with open(os.path.join(d, "req_" + name), "wb") as f:
            f.write(frame)


def jkey(k):
    return hc.key_hex(k)


def read_replies(d):
    out = {}
    for name in sorted(os.listdir(d)):
        if not name.startswith("rep_"):
            continue
        dec = hc.FrameDecoder()
        with open(os.path.join(d, name), "rb") as f:
            dec.feed(f.read())
        frames = []
        while True:
            fr = dec.next_frame()
            if fr is None:
                break
            frames.append(fr)
        # Reassemble a chunked reply the way Client does.
        first = frames[0]
        first.body = b"".join(f.body for f in frames)
        op = hc.Opcode(first.opcode)
        r = {"request_id": first.request_id, "status": first.status, "chunks": len(frames)}
        if first.status != 0:
            r["message"] = first.body.decode()
        elif op == hc.Opcode.HELLO:
            m = hc._decode_hello(first)
            r.update(version=m.version, features=m.features, server_version=m.server_version,
                     model=jkey(m.model_fingerprint), model_name=m.model_name, seam_w=m.seam_w,
                     max_frame_body=m.max_frame_body, max_inflight=m.max_inflight_requests,
                     admin=m.admin, state_contract=m.state_contract)
        elif op == hc.Opcode.HAS:
            r["tiers"] = [int(t) for t in hc._decode_has(first)]
        elif op == hc.Opcode.GET:
            tier, body = hc._decode_get(first)
            r.update(tier=int(tier), body=body.hex())
        elif op == hc.Opcode.PREFILL:
            m = hc._decode_prefill(first)
            r["results"] = [[jkey(p.key), p.was_cached, int(p.tier), p.n_tokens, p.bytes]
                            for p in m.results]
            r["total_us"] = m.timings.total_us
        elif op == hc.Opcode.COMPOSE:
            # The layout is the request's choice, not in the frame: the file name says it.
            m = (hc._decode_compose_state_first if name.endswith("_state_first")
                 else hc._decode_compose)(first)
            r["parts"] = [[int(p.outcome), int(p.tier), p.n_tokens, jkey(p.key)] for p in m.parts]
            r["n_tokens"] = m.n_tokens
            r["top"] = [[t, v] for t, v in m.top]
            r["logits"] = list(m.logits) if m.logits is not None else []
            r["compose_us"] = m.timings.compose_us
            r["tensors"] = [[t.layer, int(t.kind), int(t.dtype), list(t.shape), t.data.hex()]
                            for t in m.state_tensors()]
        elif op == hc.Opcode.EVICT:
            r["evicted"] = list(hc._decode_evict(first))
        elif op == hc.Opcode.LIST:
            m = hc._decode_list(first)
            r["next_cursor"] = m.next_cursor
            r["entries"] = [[jkey(e.key), int(e.tier), e.namespace, e.n_tokens, e.bytes, e.hits,
                             e.last_access_ms, e.pins, e.ttl_s] for e in m.entries]
        elif op == hc.Opcode.VERIFY:
            m = hc._decode_verify(first)
            r.update(checked=m.checked, bad=m.bad, bad_keys=[jkey(k) for k in m.bad_keys])
        elif op == hc.Opcode.GOAWAY:
            r["message"] = first.body.decode()
        out[name[4:]] = r
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    {"write-requests": write_requests, "read-replies": read_replies}[sys.argv[1]](sys.argv[2])
