#!/usr/bin/env python3
"""An fsx-like random-operation checker for one cell (or any file).

Usage: fsx_cells.py PATH [OPS] [SEED] [MAXLEN]

Runs OPS random operations on PATH through one O_RDWR descriptor, as fsx
does: read, write, truncate, mapread, mapwrite (MAP_SHARED), fsync, and
close/reopen; each result is checked against an in-memory copy. Also checks
that a separate reader only ever sees a value a close or fsync committed.
Prints the count of each operation and exits 1 at the first mismatch.
"""
import mmap
import os
import random
import sys


def main():
    path = sys.argv[1]
    ops = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    maxlen = int(sys.argv[4]) if len(sys.argv) > 4 else 256 * 1024
    rnd = random.Random(seed)
    with open(path, "wb"):
        pass
    good = bytearray()
    committed = {bytes(good)}
    fd = os.open(path, os.O_RDWR)
    counts = {}

    def fail(op, why):
        print(f"FAIL op {n} {op}: {why}", file=sys.stderr)
        print(counts)
        sys.exit(1)

    kinds = ["read", "write", "write", "truncate", "mapread", "mapwrite", "fsync",
             "reopen", "reader"]
    if os.environ.get("FSX_NO_MMAP"):
        kinds = [k for k in kinds if not k.startswith("map")]
    for n in range(ops):
        op = rnd.choice(kinds)
        counts[op] = counts.get(op, 0) + 1
        size = len(good)
        if op == "read":
            off = rnd.randrange(0, size + 1)
            ln = rnd.randrange(0, 65536)
            got = os.pread(fd, ln, off)
            if got != bytes(good[off:off + ln]):
                fail(op, f"read {ln}@{off}: differs")
        elif op == "write":
            off = rnd.randrange(0, min(maxlen, size + 65536))
            ln = rnd.randrange(1, 65536)
            ln = min(ln, maxlen - off)
            if ln <= 0:
                continue
            data = bytes(rnd.getrandbits(8) for _ in range(min(ln, 64))) * (ln // 64 + 1)
            data = data[:ln]
            if os.pwrite(fd, data, off) != ln:
                fail(op, "short write")
            if off > len(good):
                good.extend(b"\0" * (off - len(good)))
            good[off:off + ln] = data
        elif op == "truncate":
            ln = rnd.randrange(0, maxlen)
            os.ftruncate(fd, ln)
            if ln < len(good):
                del good[ln:]
            else:
                good.extend(b"\0" * (ln - len(good)))
        elif op in ("mapread", "mapwrite"):
            if size == 0:
                continue
            off = rnd.randrange(0, size)
            ln = rnd.randrange(1, size - off + 1)
            m = mmap.mmap(fd, size, mmap.MAP_SHARED,
                          mmap.PROT_READ | (mmap.PROT_WRITE if op == "mapwrite" else 0))
            if op == "mapread":
                if m[off:off + ln] != bytes(good[off:off + ln]):
                    m.close()
                    fail(op, f"mapread {ln}@{off}: differs")
            else:
                data = bytes([rnd.getrandbits(8)]) * ln
                m[off:off + ln] = data
                good[off:off + ln] = data
                m.flush()
                committed.add(bytes(good))
            # Python's mmap holds a duplicate of the descriptor, and every
            # close of a descriptor commits what was written.
            m.close()
            committed.add(bytes(good))
        elif op == "fsync":
            os.fsync(fd)
            committed.add(bytes(good))
        elif op == "reopen":
            os.close(fd)
            committed.add(bytes(good))
            fd = os.open(path, os.O_RDWR)
        elif op == "reader":
            with open(path, "rb") as f:
                seen = f.read()
            if seen not in committed:
                last = max(committed, key=lambda c: len(os.path.commonprefix([c, seen])))
                at = len(os.path.commonprefix([last, seen]))
                fail(op, f"a reader saw {len(seen)} bytes nobody committed (the nearest "
                         f"committed value has {len(last)}, differs at {at}; the writer has {len(good)})")
        if os.fstat(fd).st_size != len(good):
            fail(op, f"size {os.fstat(fd).st_size} != {len(good)}")
    os.close(fd)
    with open(path, "rb") as f:
        if f.read() != bytes(good):
            fail("final", "the committed value differs")
    print(f"ok {ops} ops: {counts}")


if __name__ == "__main__":
    main()
