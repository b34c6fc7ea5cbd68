"""Aggregate column families through the official Python client, as its
system tests use them (tests/system/data in google-cloud-bigtable): the table
fixture makes an Int64 Sum family through the admin client, rows are seeded
with a raw AddToCell request, and the data client adds to them."""

from google.cloud.bigtable.client import Client
from google.cloud.bigtable.data import BigtableDataClient, ReadRowsQuery
from google.cloud.bigtable.data.mutations import AddToCell, SetCell
from google.cloud.bigtable_admin_v2 import types
from google.api_core import exceptions

PROJECT, INSTANCE, TABLE = "p", "default", "aggpy"
parent = f"projects/{PROJECT}/instances/{INSTANCE}"

admin = Client(project=PROJECT, admin=True)
int_sum = types.Type.Aggregate(
    input_type=types.Type(int64_type={"encoding": {"big_endian_bytes": {}}}),
    sum={},
)
admin.table_admin_client.create_table(
    request={
        "parent": parent,
        "table_id": TABLE,
        "table": {
            "column_families": {
                "cf": types.ColumnFamily(),
                "agg": types.ColumnFamily(value_type=types.Type(aggregate_type=int_sum)),
            }
        },
    }
)
got = admin.table_admin_client.get_table(
    request={"name": f"{parent}/tables/{TABLE}", "view": types.Table.View.SCHEMA_VIEW}
)
assert got.column_families["agg"].value_type.aggregate_type.sum is not None
assert "sum" in types.Type.Aggregate.pb(got.column_families["agg"].value_type.aggregate_type).WhichOneof("aggregator")
assert not types.ColumnFamily.pb(got.column_families["cf"]).HasField("value_type")

with BigtableDataClient(project=PROJECT) as client:
    table = client.get_table(INSTANCE, TABLE)
    # The system tests' add_aggregate_row: a raw request through the GAPIC client.
    client._gapic_client.mutate_row(
        {
            "table_name": table.table_name,
            "row_key": b"add_to_cell",
            "mutations": [
                {
                    "add_to_cell": {
                        "family_name": "agg",
                        "column_qualifier": {"raw_value": b"q"},
                        "timestamp": {"raw_timestamp_micros": 0},
                        "input": {"int_value": 0},
                    }
                }
            ],
        }
    )

    def value():
        rows = table.read_rows(ReadRowsQuery(row_keys=b"add_to_cell"))
        assert len(rows) == 1 and len(rows[0].cells) == 1, rows
        return int.from_bytes(rows[0].cells[0].value, "big", signed=True)

    table.mutate_row(b"add_to_cell", AddToCell("agg", b"q", 1, timestamp_micros=0))
    assert value() == 1
    table.mutate_row(b"add_to_cell", AddToCell("agg", b"q", 9, timestamp_micros=0))
    assert value() == 10
    table.mutate_row(b"add_to_cell", AddToCell("agg", b"q", -52, timestamp_micros=0))
    assert value() == -42
    try:
        table.mutate_row(b"add_to_cell", SetCell("agg", b"q", b"12345678"))
        raise SystemExit("SetCell into an aggregate family was accepted")
    except exceptions.InvalidArgument:
        pass
print("ok")
