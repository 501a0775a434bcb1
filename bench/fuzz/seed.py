#!/usr/bin/env python3
"""Seed corpora of the fuzz targets (fuzz/corpus/) from a real recording.

Usage: bench/fuzz/seed.py STREAM SMALL_SEALED_STREAM

STREAM: a `custos collect` recording; one line of each (type, syscall)
becomes a seed of `line_parsers` and `rawseg` (and a run of 16 lines of
the commonest shapes, so that lines are read by shape). SMALL_SEALED_STREAM:
a short sealed recording, kept whole and cut, for `verify`. Loss records
of every category, a container and a workflow start are added as the
schema (docs/event-schema.md) writes them: a short recording has none.
"""
import hashlib
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fuzz", "corpus")

EXTRA = [
    '{"type":"loss","cpu":1,"first_seq":4,"last_seq":9,"count":6,"category":"events","start_ns":1,"end_ns":2}',
    '{"type":"loss","cpu":0,"first_seq":10,"last_seq":10,"count":1,"category":"critical","start_ns":5,"end_ns":7}',
    '{"type":"loss","cpu":3,"first_seq":1,"last_seq":2,"count":2,"category":"unknown","start_ns":5,"end_ns":7}',
    '{"type":"loss","cpu":2,"count":3,"category":"skipped","start_ns":5,"end_ns":9}',
    '{"type":"loss","count":12,"category":"skipped","upper_bound":true,"start_ns":5,"end_ns":9}',
    '{"type":"loss","count":4,"lines":6,"category":"kafka","start_ns":5,"end_ns":9}',
    '{"type":"loss","cpu":1,"first_seq":4,"last_seq":9,"category":"events","start_ns":1,"end_ns":2}',
    '{"type":"event","id":7,"cpu":0,"time_ns":5,"pid":10,"tid":10,"ppid":1,"comm":"sh","syscall":"execve","ret":0,"path":"/bin/sh","argv":["sh","-c","x"],"container":{"id":"abc123","runtime":"podman","name":"web","image":"localhost/web:1","pod":"p","namespace":"n","container_name":"c"}}',
    '{"type":"event","id":8,"cpu":0,"time_ns":6,"pid":10,"tid":10,"ppid":1,"comm":"sh","syscall":"clone","ret":11,"child_pid":11,"workflow":8,"workflow_parent":3,"workflow_cause":2,"workflow_running":true}',
    '{"type":"event","id":9,"cpu":0,"time_ns":6,"pid":10,"tid":10,"comm":"a\\"b","syscall":"openat","ret":3,"fd":3,"path":"/tmp/\\u00e9\\n","incomplete":1,"root_dev":1,"root_inode":2}',
    '{"type":"event","id":10,"cpu":0,"time_ns":6,"pid":10,"syscall":"accept4","ret":4,"fd":4,"addr":"127.0.0.1:5","laddr":"127.0.0.1:80","args":{"fds":[3,4]}}',
    '{"type":"boot","boot_id":"0f9e"}',
    '{"type":"future","x":1}',
]


def put(target, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    stream, sealed = sys.argv[1], sys.argv[2]
    by_kind, by_shape = {}, {}
    for line in open(stream, encoding="utf-8"):
        line = line.rstrip("\n")
        d = json.loads(line)
        kind = (d.get("type"), d.get("syscall"), "laddr" in d, "workflow_running" in d)
        by_kind.setdefault(kind, line)
        if d.get("type") == "event":
            by_shape.setdefault(d.get("syscall"), []).append(line)
    lines = list(by_kind.values()) + EXTRA
    for mode in (0, 1):
        put("line_parsers", bytes([mode]) + "\n".join(lines).encode())
        put("rawseg", bytes([0]) + "\n".join(lines).encode())
    for i, line in enumerate(lines):
        put("line_parsers", bytes([i & 1]) + line.encode())
    for syscall in sorted(by_shape, key=lambda s: -len(by_shape[s]))[:4]:
        run = "\n".join(by_shape[syscall][:16]).encode()
        put("line_parsers", bytes([0]) + run)
        put("rawseg", bytes([0]) + run)
    data = open(sealed, "rb").read()
    put("verify", data)
    cut = data.splitlines(keepends=True)
    put("verify", b"".join(cut[:20]))
    put("verify", b"".join(cut[-12:]))


if __name__ == "__main__":
    main()
