"""Times a COMPOSE that returns the state, as a frontend receives it (stdlib only).

    python3 state_stream_bench.py --address 127.0.0.1:7411 --tokens 16384 --segment 1024 \
        --state-dtype bf16 [--mode hypic] [--pid PID_OF_HYPICD] [--warm] [--state-first]

The prompt is a 16-token raw prefix, segments of --segment tokens up to --tokens in all, and a
16-token raw question. With --warm, one COMPOSE runs first so that the segments are cached and the
measured one is a warm compose. The measured COMPOSE is streamed: the client announces CHUNKED,
as hypic_client does; with --state-first it asks for StateLayout.STATE_FIRST (each layer leaves
as the compose has it, the head comes last). Prints JSON:
- the time from sending the request to the first state byte (the first chunk after the head;
  state first, the first chunk) and to the last byte;
- the reply bytes and the chunks;
- the daemon's timings;
- with --pid, the daemon's RSS before and its peak (VmHWM) after, from /proc.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import hypic_client as hc  # noqa: E402


def proc_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--segment", type=int, default=1024)
    ap.add_argument("--mode", default="hypic", choices=["full", "hypic", "oracle", "naive"])
    ap.add_argument("--state-dtype", default="f32", choices=["f32", "bf16", "f16"])
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--state-first", action="store_true")
    a = ap.parse_args()

    prefix = [(3 * i) % (a.vocab - 1) + 1 for i in range(16)]
    question = [(11 * i) % (a.vocab - 1) + 1 for i in range(16)]
    parts = [hc.ComposePart.raw(prefix)]
    left = a.tokens - 32
    j = 0
    while left > 0:
        n = min(a.segment, left)
        parts.append(hc.ComposePart.segment([(7919 * j + 13 * i) % (a.vocab - 1) + 1
                                             for i in range(n)]))
        left -= n
        j += 1
    parts.append(hc.ComposePart.raw(question))
    mode = hc.ComposeMode[a.mode.upper()]
    dtype = {"f32": hc.DType.F32, "bf16": hc.DType.BF16, "f16": hc.DType.F16}[a.state_dtype]

    c = hc.Client.connect(a.address, timeout=600)
    if a.warm:
        c.compose(parts, mode=mode, top_k=1)
    rss_before = proc_kib(a.pid, "VmRSS") if a.pid else 0
    body = hc._compose_body(parts, "", mode, hc.DEFAULT_SEAM, 1, True)
    t0 = time.perf_counter()
    layout = hc.StateLayout.STATE_FIRST if a.state_first else hc.StateLayout.HEAD_FIRST
    rid = c.send(hc.Opcode.COMPOSE, body, hc._compose_ext(dtype, hc.LogitsMode.TOP_K, layout))
    first_state_chunk = 1 if a.state_first else 2
    first_state = None
    chunks = 0
    total = 0
    frames = []
    while True:
        frame = c._decoder.next_frame()
        if frame is None:
            if c._decoder.needed() - c._decoder.buffered() > (1 << 20):
                c._decoder.read_frame_from(c._sock)
            else:
                data = c._sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("closed")
                c._decoder.feed(data)
            continue
        if frame.request_id != rid:
            continue
        if frame.status != 0:
            raise hc.HypicError(frame.status, frame.body.decode())
        chunks += 1
        total += 64 + len(frame.ext) + len(frame.body)
        frames.append(frame.body)
        if chunks == first_state_chunk and first_state is None:
            first_state = time.perf_counter() - t0
        if not frame.flags & hc.FLAG_MORE:
            break
    last = time.perf_counter() - t0
    out = {
        "tokens": a.tokens, "mode": a.mode, "state_dtype": a.state_dtype,
        "state_layout": layout.name.lower(),
        "first_state_byte_s": first_state if first_state is not None else last,
        "last_byte_s": last, "reply_bytes": total, "chunks": chunks,
    }
    head = hc._Reader(frames[-1] if a.state_first else frames[0], "COMPOSE reply")
    head_parts = head.count(22)
    for _ in range(head_parts):
        head._take(22)
    out["daemon_timings_us"] = dict(zip(["probe", "prefill", "transfer", "compose", "total"],
                                        [head.u64() for _ in range(5)]))
    if a.pid:
        out["rss_before_mib"] = rss_before / 1024
        out["peak_rss_mib"] = proc_kib(a.pid, "VmHWM") / 1024
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
