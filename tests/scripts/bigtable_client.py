"""Drives the daemon's gRPC API with the official Python client.

Run with BIGTABLE_EMULATOR_HOST=host:port. Reads the table `fromfs` (written
through the mount by the caller), writes the table `pytable` (read back
through the mount by the caller), and creates and deletes `scratch`.
"""
import sys

from google.cloud import bigtable
from google.cloud.bigtable import column_family, row_filters
from google.cloud.bigtable.row_set import RowSet


def main():
    client = bigtable.Client(project="p", admin=True)
    instance = client.instance("default")

    # What the mount wrote is visible here.
    fromfs = instance.table("fromfs")
    row = fromfs.read_row(b"written-by-cat")
    assert row is not None, "row written through the mount is missing"
    assert row.cells["f"][b"q"][0].value == b"hello from the mount\n", row.cells

    # Create a table with families and GC rules.
    table = instance.table("pytable")
    table.create(column_families={
        "cf": column_family.MaxVersionsGCRule(2),
        "stats": None,
    })
    assert table.exists()
    assert "pytable" in [t.table_id for t in instance.list_tables()]
    families = table.list_column_families()
    assert set(families) == {"cf", "stats"}, families

    # Write rows (MutateRows) and one row (MutateRow).
    rows = []
    for i in range(10):
        r = table.direct_row(f"user#{i:02d}".encode())
        r.set_cell("cf", b"name", f"name {i}".encode())
        r.set_cell("cf", b"city", b"Paris" if i % 2 == 0 else b"Oslo")
        rows.append(r)
    statuses = table.mutate_rows(rows)
    assert all(s.code == 0 for s in statuses), statuses
    r = table.direct_row(b"from-python")
    r.set_cell("cf", b"greeting", b"hello from python")
    r.commit()

    # Read one row, a range with a limit, and rows through filters.
    row = table.read_row(b"user#03")
    assert row.cells["cf"][b"name"][0].value == b"name 3"
    rs = RowSet()
    rs.add_row_range_from_keys(start_key=b"user#05", end_key=b"user#08")
    got = [r.row_key for r in table.read_rows(row_set=rs)]
    assert got == [b"user#05", b"user#06", b"user#07"], got
    got = [r.row_key for r in table.read_rows(limit=2)]
    assert got == [b"from-python", b"user#00"], got
    paris = row_filters.RowFilterChain(filters=[
        row_filters.ColumnQualifierRegexFilter(b"city"),
        row_filters.ValueRegexFilter(b"Paris"),
    ])
    got = [r.row_key for r in table.read_rows(filter_=paris)]
    assert got == [f"user#{i:02d}".encode() for i in range(0, 10, 2)], got
    names_only = row_filters.RowFilterChain(filters=[
        row_filters.FamilyNameRegexFilter("cf"),
        row_filters.ColumnQualifierRegexFilter(b"name"),
        row_filters.CellsColumnLimitFilter(1),
    ])
    got = [r.cells["cf"][b"name"][0].value for r in table.read_rows(filter_=names_only)
           if b"name" in r.cells.get("cf", {})]
    assert len(got) == 10, got

    # Conditional mutation (CheckAndMutateRow).
    cond = table.conditional_row(b"user#01", filter_=row_filters.ValueRegexFilter(b"Oslo"))
    cond.set_cell("cf", b"visited", b"yes", state=True)
    cond.set_cell("cf", b"visited", b"no", state=False)
    assert cond.commit() is True
    cond = table.conditional_row(b"user#02", filter_=row_filters.ValueRegexFilter(b"Oslo"))
    cond.set_cell("cf", b"visited", b"yes", state=True)
    cond.set_cell("cf", b"visited", b"no", state=False)
    assert cond.commit() is False
    assert table.read_row(b"user#02").cells["cf"][b"visited"][0].value == b"no"

    # Read-modify-write: increments and appends.
    for _ in range(2):
        ar = table.append_row(b"counter")
        ar.increment_cell_value("stats", b"hits", 5)
        ar.append_cell_value("cf", b"log", b"ab")
        result = ar.commit()
    hits = result["stats"][b"hits"][0][0]
    assert int.from_bytes(hits, "big") == 10, result
    assert result["cf"][b"log"][0][0] == b"abab", result

    # Sample row keys: the last sample is the table's end.
    samples = list(table.sample_row_keys())
    assert samples and samples[-1].row_key == b"", samples

    # Drop a row range, then create and delete another table.
    table.drop_by_prefix(b"user#09")
    assert table.read_row(b"user#09") is None
    scratch = instance.table("scratch")
    scratch.create(column_families={"f": None})
    scratch.delete()
    assert not scratch.exists()
    print("python client: ok")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        import traceback
        traceback.print_exc()
        sys.exit(f"assertion failed: {e}")
