#!/usr/bin/python3
"""End-to-end: the Wireshark dissector examples/wireshark/dask.lua, run by
Debian's tshark on captures of real Dask clusters, must see every message
exactly as `dask-caps inspect --json` does.

For each Dask — Debian's python3-distributed 2022.12.1 under
/usr/bin/python3, and Dask 2026.7.1 from ../shared (skipped with a notice
when that folder is absent) — tests/e2e/daskpcap.py records a scheduler, a
worker, a client and a raw-socket client on loopback with tcpdump. Then:

- tshark with the heuristic (`-o tcp.try_heuristic_first:TRUE`) decodes the
  capture as JSON; per connection and direction, message by message, it is
  compared with inspect: length on the wire, frame table, the first length
  (full or short), ops (batched too), handshake compression, Python and
  pickle protocol, and every object's path, placeholder, sub-header frame,
  serializer, type and each data frame's index, codec and size, collection
  elements included;
- `-T fields -e dask.op` gives the same ops;
- with the heuristic off and the preference dask.port set to the
  scheduler's port, the scheduler's connections decode the same and the
  worker's not at all;
- no Lua error, malformed packet or dissector error appears.

The captures must hold what makes the comparison worth it: lz4 frames,
NumPy objects, a message over many segments, a segment with several
messages, a message whose prelude straddles two segments, and (2026.7.1) a
message with a short first length.

Skips (exit 0, a "SKIP" line) when not root or tcpdump is missing, and when
tshark is missing outside CI (in CI, scripts/install-deps.sh installs it, so
it must be there).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import daskpcap  # noqa: E402

SOURCE = os.environ.get("DASKCAPS_SOURCE_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
LUA = os.path.join(SOURCE, "examples", "wireshark", "dask.lua")


def skip(why):
    print("SKIP: " + why)
    sys.exit(0)


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def dask_caps():
    build = os.environ.get("DASKCAPS_BUILD_DIR") or os.path.join(SOURCE, "build")
    return os.environ.get("DASK_CAPS") or os.path.join(build, "dask-caps")


def as_list(x):
    if x is None:
        return []
    return x if isinstance(x, list) else [x]


def tshark(args, pcap):
    cmd = ["tshark", "-r", pcap, "-X", "lua_script:" + LUA, "-o", "tcp.reassemble_out_of_order:TRUE", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        fail("tshark %s: exit %d\n%s" % (" ".join(args), out.returncode, out.stderr[-3000:]))
    return out.stdout


def packet_endpoints(pcap):
    """frame number -> ("src:port", "dst:port") for every TCP packet."""
    text = tshark(["-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "tcp.srcport",
                   "-e", "ip.dst", "-e", "tcp.dstport", "-Y", "tcp"], pcap)
    out = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 5 and parts[0]:
            out[int(parts[0])] = ("%s:%s" % (parts[1], parts[2]), "%s:%s" % (parts[3], parts[4]))
    return out


def tshark_messages(pcap, endpoints, extra):
    """{(src, dst): [dask tree of each message, in order]} and the packets
    that hold several messages."""
    text = tshark(["-T", "json", "--no-duplicate-keys", "-J", "frame dask", "-Y", "dask", *extra], pcap)
    packets = json.loads(text) if text.strip() else []
    groups = {}
    multi = 0
    for p in packets:
        layers = p["_source"]["layers"]
        number = int(layers["frame"]["frame.number"])
        trees = as_list(layers.get("dask"))
        multi += len(trees) > 1
        groups.setdefault(endpoints[number], []).extend(trees)
    return groups, multi


def inspect_messages(pcap):
    out = subprocess.run([dask_caps(), "inspect", "--json", pcap], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        fail("inspect exit %d: %s" % (out.returncode, out.stderr))
    doc = json.loads(out.stdout)
    return inspect_groups(doc), doc


def inspect_groups(doc):
    conns = {c["id"]: c for c in doc["connections"]}
    groups = {}
    for m in doc["messages"]:
        c = conns[m["connection"]]
        key = (c["client"], c["server"]) if m["direction"].replace("-", "_") == "client_to_server" else (c["server"], c["client"])
        groups.setdefault(key, []).append(m)
    return groups


def codec_text(value):
    if value is None:
        return "null"
    if value is False:
        return "false"
    return str(value)


class Comparison:
    def __init__(self, label):
        self.label = label
        self.fields = 0
        self.problems = []

    def eq(self, where, what, got, want):
        self.fields += 1
        if got != want:
            self.problems.append("%s: %s: tshark %r, inspect %r" % (where, what, got, want))

    def objects(self, where, tobjs, ttrees, iobjs):
        self.eq(where, "object count", len(tobjs), len(iobjs))
        for k, (path, tree, obj) in enumerate(zip(tobjs, ttrees, iobjs)):
            w = "%s object %d" % (where, k)
            self.eq(w, "path", path, obj["path"])
            self.eq(w, "placeholder", tree.get("dask.object.placeholder"), obj["placeholder"])
            self.eq(w, "header frame", int(tree.get("dask.object.header_frame", -1)), obj["header-frame"])
            self.eq(w, "serializer", tree.get("dask.object.serializer"), obj["serializer"])
            self.eq(w, "type", tree.get("dask.object.type"), obj["type"])
            frames = [int(f) for f in as_list(tree.get("dask.object.frame"))]
            ftrees = as_list(tree.get("dask.object.frame_tree"))
            self.eq(w, "data frames", frames, [f["index"] for f in obj["frames"]])
            self.eq(w, "codecs", [t.get("dask.object.codec") for t in ftrees],
                    [codec_text(f["compression"]) for f in obj["frames"]])
            self.eq(w, "frame sizes", [int(t.get("dask.object.frame_length", -1)) for t in ftrees],
                    [f["wire-bytes"] for f in obj["frames"]])
            self.objects(w + " element", as_list(tree.get("dask.object")),
                         as_list(tree.get("dask.object_tree")), obj.get("elements", []))

    def message(self, where, t, m):
        wire = m["wire-bytes"]
        self.eq(where, "message length", int(t["dask.message_length"]), wire)
        if "error" in m:  # inspect says no more of an unreadable message
            self.eq(where, "error", t.get("dask.error") is not None, True)
            return
        self.eq(where, "error", t.get("dask.error"), None)
        self.eq(where, "frame count", int(t["dask.nframes"]), len(m["frames"]))
        self.eq(where, "frame table", [int(x) for x in as_list(t["dask.frame_table"]["dask.frame_length"])],
                m["frames"])
        short = m.get("short-length", False)
        self.eq(where, "short length", "dask.short_length" in t, short)
        length = int(t["dask.length"])
        self.eq(where, "first length", length < wire - 8 if short else length == wire - 8, True)
        self.eq(where, "ops", as_list(t.get("dask.op")),
                [m["op"]] if m["op"] is not None else m.get("batched-ops", []))
        hs = m["handshake"]
        ths = t.get("dask.handshake")
        self.eq(where, "handshake", ths is not None, hs is not None)
        if hs is not None and ths is not None:
            if "compression" in hs:
                self.eq(where, "handshake compression", ths.get("dask.handshake.compression"),
                        codec_text(hs["compression"]))
            if "python" in hs:
                self.eq(where, "handshake python", ths.get("dask.handshake.python"),
                        ".".join(str(x) for x in hs["python"]))
            if "pickle-protocol" in hs:
                self.eq(where, "handshake pickle protocol", ths.get("dask.handshake.pickle_protocol"),
                        str(hs["pickle-protocol"]))
        self.objects(where, as_list(t.get("dask.object")), as_list(t.get("dask.object_tree")), m["objects"])
        self.eq(where, "loose frames", [int(x) for x in as_list(t.get("dask.loose_frame"))],
                m.get("loose-frames", []))


def compare_groups(label, tgroups, igroups, only=None):
    c = Comparison(label)
    keys = set(tgroups) | set(igroups)
    if only is not None:
        keys = {k for k in keys if only(k)}
    messages = 0
    for key in sorted(keys):
        tl, il = tgroups.get(key, []), igroups.get(key, [])
        where = "%s %s->%s" % (label, key[0], key[1])
        c.eq(where, "messages", len(tl), len(il))
        for i, (t, m) in enumerate(zip(tl, il)):
            c.message("%s message %d (inspect index %d)" % (where, i, m["index"]), t, m)
        messages += min(len(tl), len(il))
    return c, messages


class CaptureDiffers(Exception):
    """tshark and inspect disagree on a real capture."""


def check_capture(label, rec, tshark_version):
    pcap = rec.pcap
    sched_port = rec.scheduler[1]
    endpoints = packet_endpoints(pcap)
    igroups, doc = inspect_messages(pcap)
    tgroups, multi = tshark_messages(pcap, endpoints, ["-o", "tcp.try_heuristic_first:TRUE"])

    c, messages = compare_groups(label, tgroups, igroups)
    if c.problems:
        raise CaptureDiffers("%d differences, first ones:\n%s" % (len(c.problems), "\n".join(c.problems[:40])))

    # What the capture must hold for the comparison to mean something.
    imsgs = [m for ms in igroups.values() for m in ms]
    objs = [o for m in imsgs for o in m.get("objects", [])]
    needs = {
        "a handshake advertising lz4": any((m["handshake"] or {}).get("compression") == "lz4" for m in imsgs),
        "an lz4-compressed frame": any(f["compression"] == "lz4" for o in objs for f in o["frames"]),
        "a numpy.ndarray object": any(o["type"] == "numpy.ndarray" for o in objs),
        "a pickle-serialized object": any(o["serializer"] == "pickle" for o in objs),
        "a message over 1.6 MB (many segments)": any(m["wire-bytes"] > 1600000 for m in imsgs),
        "a segment with several messages": multi > 0,
        "the echo whose prelude straddles two segments": any(m["op"] == "echo" for m in imsgs),
        "a batched message": any(m.get("batched-ops") for m in imsgs),
    }
    if label.startswith("2026"):
        needs["a message with a short first length"] = any(m.get("short-length") for m in imsgs)
    missing = [k for k, ok in needs.items() if not ok]
    if missing:
        fail("%s: the capture lacks %s" % (label, ", ".join(missing)))

    # -T fields: the same ops, flat.
    ops_text = tshark(["-o", "tcp.try_heuristic_first:TRUE", "-Y", "dask", "-T", "fields", "-e", "dask.op",
                       "-E", "occurrence=a", "-E", "aggregator=,"], pcap)
    fields_ops = sorted(op for line in ops_text.splitlines() for op in line.split(",") if op)
    inspect_ops = sorted(op for m in imsgs for op in ([m["op"]] if m["op"] else m.get("batched-ops", [])))
    if fields_ops != inspect_ops:
        fail("%s: -T fields -e dask.op gives %d ops, inspect %d" % (label, len(fields_ops), len(inspect_ops)))

    # Nothing went wrong inside the dissector.
    bad = tshark(["-o", "tcp.try_heuristic_first:TRUE", "-Y",
                  "_ws.lua.text || _ws.malformed || dask.error || dask.bad_prelude || _ws.expert.severity >= error",
                  "-T", "fields", "-e", "frame.number"], pcap)
    if bad.strip():
        fail("%s: Lua errors, malformed or erroneous packets: frames %s" % (label, bad.split()))

    # The port preference without the heuristic: only the scheduler's connections.
    pgroups, _ = tshark_messages(pcap, endpoints, ["-o", "dask.port:%d" % sched_port,
                                                   "--disable-heuristic", "dask_tcp"])
    on_sched = lambda k: k[0].endswith(":%d" % sched_port) or k[1].endswith(":%d" % sched_port)  # noqa: E731
    pc, pmessages = compare_groups(label + " (port)", pgroups, igroups, only=on_sched)
    if pc.problems:
        fail("with dask.port: %d differences, first ones:\n%s" % (len(pc.problems), "\n".join(pc.problems[:40])))
    stray = [k for k in pgroups if not on_sched(k)]
    if stray:
        fail("with dask.port and no heuristic, connections not on the port were decoded: %s" % stray)
    if pmessages == 0 or pmessages == messages:
        fail("with dask.port: %d messages of %d (expected the scheduler's only)" % (pmessages, messages))

    print("OK: %s with %s: %d connections and directions, %d messages (%d objects), %d fields equal to "
          "inspect; %d segments held several messages; ops by -T fields: %d; with dask.port=%d and no "
          "heuristic: %d messages, %d fields equal" % (
              label, tshark_version, len(igroups), messages, len(objs), c.fields, multi, len(fields_ops),
              sched_port, pmessages, pc.fields))


# --- a synthetic capture: what real Dask rarely sends ------------------------

def write_pcap(path, segments):
    """segments: (src ip, sport, dst ip, dport, flags, seq, ack, payload), Ethernet/IPv4/TCP."""
    import socket
    import struct
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 262144, 1))
        for i, (src, sport, dst, dport, flags, seq, ack, payload) in enumerate(segments):
            tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0)
            ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), i, 0, 64, 6, 0,
                             socket.inet_aton(src), socket.inet_aton(dst))
            frame = b"\x00" * 12 + b"\x08\x00" + ip + tcp + payload
            f.write(struct.pack("<IIII", 1700000000 + i, 0, len(frame), len(frame)) + frame)


class Conversation:
    def __init__(self, client, cport, server, sport):
        self.ends = {True: (client, cport, server, sport), False: (server, sport, client, cport)}
        self.seq = {True: 1000, False: 5000}
        self.segments = []

    def _seg(self, from_client, flags, payload=b""):
        src, sp, dst, dp = self.ends[from_client]
        self.segments.append((src, sp, dst, dp, flags, self.seq[from_client], self.seq[not from_client], payload))
        self.seq[from_client] += len(payload) + (1 if flags & 0x03 else 0)

    def open(self):
        self._seg(True, 0x02)
        self._seg(False, 0x12)
        self._seg(True, 0x10)

    def send(self, from_client, data, cuts=()):
        """data in one segment, or cut at the given offsets."""
        last = 0
        for cut in list(cuts) + [len(data)]:
            self._seg(from_client, 0x18, data[last:cut])
            last = cut

    def close(self):
        self._seg(True, 0x11)
        self._seg(False, 0x11)
        self._seg(True, 0x10)


def dask_message(frames, short_after=None):
    """A Dask TCP message; short_after=k: L counts frames 0..k-1 only (2023.11+)."""
    import struct
    counted = frames if short_after is None else frames[:short_after]
    head = struct.pack("<QQ", 8 + 8 * len(frames) + sum(len(f) for f in counted), len(frames))
    return head + b"".join(struct.pack("<Q", len(f)) for f in frames) + b"".join(frames)


def synthetic_capture(path):
    import collections
    import pickle
    import msgpack

    def mp(obj):
        return msgpack.packb(obj, use_bin_type=True)

    c = Conversation("10.0.0.1", 40000, "10.0.0.2", 8786)
    c.open()
    c.send(False, dask_message([mp({"compression": False, "python": [3, 7, 9], "pickle-protocol": 4})]))
    c.send(True, dask_message([mp({"compression": None, "python": [3, 12, 1], "pickle-protocol": 5})]))
    ordered = pickle.dumps(collections.OrderedDict, protocol=5)
    nested = pickle.dumps(collections.OrderedDict, protocol=2)  # GLOBAL, not STACK_GLOBAL
    sub = mp({"serializer": "dask", "type-serialized": ordered, "compression": ["zstd", None],
              "num-sub-frames": 2})
    pickled = mp({"pickled-obj": pickle.dumps(1, protocol=5), "compression": [False], "num-sub-frames": 1})
    elements = mp({"serializer": "dask", "type": "tuple", "is-collection": True, "num-sub-frames": 0,
                   "sub-headers": [{"serializer": "pickle", "key": (1, "a")},
                                   {"serializer": "dask", "type-serialized": nested}]})
    # Keys that are arrays, bin and negative ints; floats, ext, deep nesting.
    root = {"op": "update", (1, 2): {"__Serialized__": 1}, b"\x00'k": {"__Pickled__": 4},
            -3: [{"__Serialized__": 6}], "f": 1.5, "g": -0.25, "big": 2 ** 63, "neg": -2 ** 40,
            "x": msgpack.ExtType(5, b"abc"), "deep": [[[[["end"]]]]], "reply": False}
    both = dask_message([mp(root), sub, b"\x01" * 300, b"", pickled, b"buf", elements])
    # Two messages in one segment with the first 5 bytes of a third.
    loose = dask_message([mp({"op": "loose"}), b"", b"tail"])
    batch = dask_message([mp([{"op": "a"}, {"op": "b", "x": 1}, {"no-op": 1}])])
    data = both + loose + batch
    c.send(True, data, cuts=[len(both) + len(loose) + 5])
    # The short first length of Dask 2023.11+, split inside the frames.
    short = dask_message([mp({"op": "short", "a": {"__Serialized__": 1}}),
                          mp({"serializer": "pickle", "num-sub-frames": 2, "compression": [None, "lz4"]}),
                          b"p" * 3000, b"q" * 5000], short_after=2)
    c.send(False, short, cuts=[30, 2000, 6000])
    # A placeholder past the last frame: unreadable for both.
    c.send(False, dask_message([mp({"op": "bad", "d": {"__Serialized__": 5}})]))
    c.send(False, dask_message([mp({"op": "after"})]))
    # Nesting at the limit of both decoders (1024 levels), then one deeper.
    for arrays in (1023, 1024):
        c.send(True, dask_message([b"\x82\xa2op\xa4deep\xa1x" + b"\x91" * arrays + b"\xc0"]))
    c.close()
    # Not Dask, on another port: nobody may claim it.
    other = Conversation("10.0.0.3", 40001, "10.0.0.4", 8080)
    other.open()
    other.send(True, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    other.send(False, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    other.close()
    write_pcap(path, c.segments + other.segments)


def check_synthetic(tmp, tshark_version):
    pcap = os.path.join(tmp, "synthetic.pcap")
    synthetic_capture(pcap)
    endpoints = packet_endpoints(pcap)
    out = subprocess.run([dask_caps(), "inspect", "--json", "--port", "8786", pcap], capture_output=True,
                         text=True, timeout=600)
    if out.returncode not in (0, 3):  # 3: the bad placeholder
        fail("inspect of the synthetic capture: exit %d: %s" % (out.returncode, out.stderr))
    igroups = inspect_groups(json.loads(out.stdout))
    # The default port 8786 (no heuristic), then the heuristic alone.
    for label, args in (("synthetic (port 8786)", ["--disable-heuristic", "dask_tcp"]),
                        ("synthetic (heuristic)", ["-o", "dask.port:0", "-o", "tcp.try_heuristic_first:TRUE"])):
        tgroups, multi = tshark_messages(pcap, endpoints, args)
        c, messages = compare_groups(label, tgroups, igroups)
        if c.problems:
            fail("%d differences, first ones:\n%s" % (len(c.problems), "\n".join(c.problems[:40])))
        if any(not k[0].endswith(":8786") and not k[1].endswith(":8786") for k in tgroups):
            fail("%s: the HTTP conversation was decoded as Dask" % label)
        imsgs = [m for ms in igroups.values() for m in ms]
        if messages != 10 or multi < 1 or not any("error" in m for m in imsgs) or \
                not any(m.get("short-length") for m in imsgs) or not any(o.get("elements") for m in imsgs
                                                                       for o in m.get("objects", [])):
            fail("%s: %d messages, %d packets with several; inspect: %s" % (label, messages, multi,
                                                                           json.dumps(imsgs)[:3000]))
        print("OK: %s with %s: %d messages, %d fields equal to inspect" % (label, tshark_version, messages,
                                                                          c.fields))


def record(label, python, tmp, scheduler_host, worker_host, env):
    for attempt in range(2):
        rec = daskpcap.record(python, tmp, "%s-%d" % (label, attempt), scheduler_host, worker_host, env)
        print("%s: tcpdump: %s" % (label, rec.tcpdump_log))
        if rec.dropped == 0:
            return rec
    fail("%s: tcpdump dropped packets twice" % label)


def main():
    if os.geteuid() != 0:
        skip("not root: tcpdump cannot capture")
    if daskpcap.find_tcpdump() is None:
        skip("tcpdump is not installed")
    if shutil.which("tshark") is None:
        if os.environ.get("CI"):
            fail("tshark is not installed (scripts/install-deps.sh installs it)")
        skip("tshark is not installed (scripts/install-deps.sh installs it)")
    version = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout.splitlines()[0].rstrip(".")
    print("using " + version)

    runs = [("2022.12.1", daskpcap.PYTHON_2022, "127.0.0.1", "127.0.0.1", {})]
    newest = daskpcap.python_2026()
    if newest:
        # Different loopback hosts, so that 2026.7.1 advertises (and uses) lz4.
        runs.append(("2026.7.1", newest, "127.0.0.2", "127.0.0.3",
                     {"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"}))
    else:
        print("NOTICE: ../shared/dask-2026.7.1 is absent: the Dask 2026.7.1 capture is skipped")

    tmp = tempfile.mkdtemp(prefix="daskcaps-wireshark-")
    try:
        check_synthetic(tmp, version)
        for label, python, sh, wh, env in runs:
            # Once in a CI run under the sanitizers (load 2+ on 2 cores),
            # tshark lost one 1.6 MB message of a 2026.7.1 capture that
            # inspect read whole (tcpdump dropped nothing); not reproduced
            # since. A second capture is taken then, and the first one's
            # differences are printed, so that it is seen, not hidden.
            for attempt in range(2):
                try:
                    rec = record(label if attempt == 0 else label + "-again", python, tmp, sh, wh, env)
                except daskpcap.RecordError as e:
                    fail(str(e))
                try:
                    check_capture(label, rec, version)
                    break
                except CaptureDiffers as e:
                    if attempt == 1:
                        fail(str(e))
                    print("NOTICE: %s: tshark and inspect differ on this capture; capturing again:\n%s"
                          % (label, e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
