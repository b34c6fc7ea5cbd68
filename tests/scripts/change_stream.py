"""Reads a table's change stream with the official Python client's generated
(GAPIC) client: GenerateInitialChangeStreamPartitions, then ReadChangeStream
of each partition, as Apache Beam's connector does.

Run with BIGTABLE_EMULATOR_HOST=host:port.

    change_stream.py follow TABLE DIR
        One file per partition, DIR/part-N, first line
        `# partition <start> <end>`, then each change as the mount's
        `.changes` lines print it (docs/changes.md): `# change <µs> <token>`
        (` gc` after a garbage-collection change), then its ops. Forever; a
        stream that fails is resumed from the last token seen (the failure
        is printed to stderr).
    change_stream.py read TABLE START END TOKEN END_US
        The changes of the partition [START, END) after TOKEN, up to END_US,
        to stdout in the same lines.

Rows, qualifiers and values are %XX-escaped as `.mutate` takes them. Values
that arrive in chunks (DataChange chunk_info) are put back together, and a
change split over several messages (done=false) is printed once, whole.
"""
import os
import sys
import threading
import urllib.parse

import grpc
from google.cloud.bigtable_v2 import BigtableClient
from google.cloud.bigtable_v2.services.bigtable.transports import BigtableGrpcTransport
from google.cloud.bigtable_v2.types import (
    ReadChangeStreamRequest,
    ReadChangeStreamResponse,
    RowRange,
    StreamContinuationToken,
    StreamContinuationTokens,
    StreamPartition,
)
from google.protobuf import duration_pb2, timestamp_pb2

GC = ReadChangeStreamResponse.DataChange.Type.GARBAGE_COLLECTION


def esc(b):
    return urllib.parse.quote(bytes(b), safe="")


def unesc(s):
    return urllib.parse.unquote_to_bytes(s)


def client():
    # The default message limit (4 MiB): a larger value must come chunked.
    channel = grpc.insecure_channel(os.environ["BIGTABLE_EMULATOR_HOST"])
    return BigtableClient(transport=BigtableGrpcTransport(channel=channel))


def table_name(t):
    return f"projects/p/instances/default/tables/{t}"


def micros(ts):
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def ops(mutations):
    """The `.mutate` lines of one change's mutations (raw protobufs)."""
    out = []
    for m in mutations:
        kind = m.WhichOneof("mutation")
        if kind == "set_cell":
            c = m.set_cell
            out.append(
                f"set {{row}} {c.family_name}:{esc(c.column_qualifier)} "
                f"{esc(c.value)} {c.timestamp_micros}"
            )
        elif kind == "delete_from_column":
            c = m.delete_from_column
            r = c.time_range
            if r.start_timestamp_micros == 0 and r.end_timestamp_micros == 0:
                rng = ""
            else:
                end = r.end_timestamp_micros or ""
                rng = f" {r.start_timestamp_micros}..{end}"
            out.append(f"delete {{row}} {c.family_name}:{esc(c.column_qualifier)}{rng}")
        elif kind == "delete_from_family":
            out.append(f"deletefamily {{row}} {m.delete_from_family.family_name}")
        elif kind == "delete_from_row":
            out.append("deleterow {row}")
        elif kind == "add_to_cell":
            c = m.add_to_cell
            out.append(
                f"add {{row}} {c.family_name}:{esc(c.column_qualifier.raw_value)} "
                f"{c.input.int_value} {c.timestamp.raw_timestamp_micros}"
            )
        elif kind == "merge_to_cell":
            c = m.merge_to_cell
            out.append(
                f"merge {{row}} {c.family_name}:{esc(c.column_qualifier.raw_value)} "
                f"{esc(c.input.raw_value)} {c.timestamp.raw_timestamp_micros}"
            )
        else:
            out.append(f"unknown {{row}} {kind}")
    return out


class Assembler:
    """Puts DataChanges split over messages and chunked values back together."""

    def __init__(self):
        self.pending = None
        self.muts = []
        self.value = None

    def add(self, dc):
        """A raw DataChange; returns (change, mutations) once it is whole."""
        if self.pending is None:
            self.pending = dc
            self.muts = []
        for ch in dc.chunks:
            m = ch.mutation
            if ch.HasField("chunk_info") and ch.chunk_info.chunked_value_size > 0:
                info = ch.chunk_info
                if self.value is None:
                    if info.chunked_value_offset != 0:
                        raise ValueError(f"a chunked value starts at offset {info.chunked_value_offset}")
                    self.value = bytearray()
                if info.chunked_value_offset != len(self.value):
                    raise ValueError("a chunk out of order")
                self.value += m.set_cell.value
                if not info.last_chunk:
                    continue
                if len(self.value) != info.chunked_value_size:
                    raise ValueError(
                        f"a chunked value of {len(self.value)} bytes, {info.chunked_value_size} announced"
                    )
                m.set_cell.value = bytes(self.value)
                self.value = None
            self.muts.append(m)
        if not dc.done:
            return None
        if self.value is not None:
            raise ValueError("a change ended inside a chunked value")
        whole, muts = self.pending, self.muts
        # The last message carries the token and the timestamps.
        whole.token, whole.done = dc.token, True
        self.pending, self.muts = None, []
        return whole, muts


def lines_of(dc, muts):
    row = esc(dc.row_key)
    gc = " gc" if dc.type_ == GC else ""
    head = f"# change {micros(dc.commit_timestamp)} {dc.token}{gc}\n"
    return head + "".join(op.replace("{row}", row) + "\n" for op in ops(muts))


def stream(c, table, partition, token, end_us, out, log):
    """Writes the partition's changes to `out` from `token` (None: the
    oldest kept) until end_us (None: forever, resuming after failures)."""
    while True:
        req = ReadChangeStreamRequest(
            table_name=table_name(table),
            partition=partition,
            heartbeat_duration=duration_pb2.Duration(seconds=1),
        )
        if token is not None:
            req.continuation_tokens = StreamContinuationTokens(
                tokens=[StreamContinuationToken(partition=partition, token=token)]
            )
        if end_us is not None:
            req.end_time = timestamp_pb2.Timestamp(
                seconds=end_us // 1_000_000, nanos=(end_us % 1_000_000) * 1000
            )
        asm = Assembler()
        try:
            for resp in c.read_change_stream(request=req, retry=None, timeout=None):
                raw = ReadChangeStreamResponse.pb(resp)
                kind = raw.WhichOneof("stream_record")
                if kind == "data_change":
                    whole = asm.add(raw.data_change)
                    if whole is not None:
                        out.write(lines_of(*whole))
                        out.flush()
                        token = whole[0].token
                elif kind == "heartbeat":
                    token = raw.heartbeat.continuation_token.token or token
                elif kind == "close_stream":
                    out.write("# close\n")
                    out.flush()
                    return
            if end_us is not None:
                return
        except grpc.RpcError as e:
            if end_us is not None:
                raise
            log.write(f"# resuming after token {token}: {e.code()} {e.details()}\n")
            log.flush()


def partition_of(start, end):
    rr = RowRange(start_key_closed=start)
    if end:
        rr.end_key_open = end
    return StreamPartition(row_range=rr)


def follow(table, outdir):
    c = client()
    parts = [
        r.partition
        for r in c.generate_initial_change_stream_partitions(table_name=table_name(table))
    ]
    threads = []
    for i, p in enumerate(parts):
        out = open(os.path.join(outdir, f"part-{i}"), "w")
        start, end = p.row_range.start_key_closed, p.row_range.end_key_open
        out.write(f"# partition {esc(start) or '-'} {esc(end) or '-'}\n")
        out.flush()
        t = threading.Thread(
            target=stream, args=(c, table, p, None, None, out, sys.stderr), daemon=True
        )
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def main():
    cmd = sys.argv[1]
    if cmd == "follow":
        follow(sys.argv[2], sys.argv[3])
    elif cmd == "read":
        table, start, end, token, end_us = sys.argv[2:7]
        start = b"" if start == "-" else unesc(start)
        end = b"" if end == "-" else unesc(end)
        stream(client(), table, partition_of(start, end), token, int(end_us), sys.stdout, sys.stderr)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
