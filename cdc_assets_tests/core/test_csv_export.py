"""Arrow's column-wise reading of a CSV export agrees with the row reader wherever it is used."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdc_assets.core.csv_export import export_columns, header_of, line_texts, read_text_columns, typed_columns
from cdc_assets.core.formats import RecordError, _csv_records
from cdc_assets.core.target import arrow_type

HEADER = ["id", "name", "amount"]


def rows_by_the_row_reader(body: bytes) -> list[tuple[int, dict]] | None:
    """What formats._csv_records reads (values '' -> None, as text columns keep them), or None when
    it rejects a line."""
    out = []
    for line, record, _ in _csv_records(b"id,name,amount\n" + body):
        if isinstance(record, RecordError):
            return None
        out.append((line, {k: (v if v != "" else None) for k, v in record.items()}))
    return out


def check(body: bytes) -> None:
    fast = read_text_columns(body, HEADER)
    if fast is None:
        return  # left to the row reader
    want = rows_by_the_row_reader(body)
    assert want is not None, "the column reader took a file the row reader rejects lines of"
    assert [line for line, _ in want] == list(range(2, 2 + fast.num_rows)), "a record is not one line"
    assert fast.to_pylist() == [r for _, r in want]


PLAIN = st.text(alphabet="ab 1.é€", max_size=5)
FIELD = st.one_of(PLAIN, PLAIN.map(lambda t: '"' + t + '"'),
                  st.text(alphabet='ab ,"\r\n\x00é€', max_size=6),
                  st.text(alphabet='ab ,"é\n', max_size=6).map(lambda t: '"' + t.replace('"', '""') + '"'))
# mostly the header's three fields, so that most files are ones the column reader takes
LINE = st.one_of(st.lists(FIELD, min_size=3, max_size=3), st.lists(FIELD, min_size=1, max_size=4)).map(",".join)


@settings(max_examples=600, deadline=None)
@given(st.lists(LINE, max_size=6), st.booleans(), st.booleans())
@example(['1,"a ""b"" c",3'], True, False)
@example(['1,"x"y,3'], True, False)
@example(['1,x"y,3'], True, False)
@example(['1,,3', '', '2,b,4'], True, False)
@example(['1,"a\rb",3'], True, True)
@example(['1,a,3\r', '2,b,4\r'], False, False)
def test_the_column_reader_reads_what_the_row_reader_reads_or_declines(lines, trailing_newline, crlf):
    end = "\r\n" if crlf else "\n"
    body = end.join(lines) + (end if trailing_newline and lines else "")
    check(body.encode("utf-8"))


def test_it_takes_quoted_fields_and_empty_ones_and_declines_a_line_break_inside_quotes():
    t = read_text_columns(b'1,"a, ""b""",2.50\n2,,\n3,"",7\n', HEADER)
    assert t is not None and t.to_pylist() == [{"id": "1", "name": 'a, "b"', "amount": "2.50"},
                                               {"id": "2", "name": None, "amount": None},
                                               {"id": "3", "name": None, "amount": "7"}]
    assert read_text_columns(b'1,"a\nb",2\n', HEADER) is None
    assert read_text_columns(b"1,a,2\n\n2,b,3\n", HEADER) is None
    assert read_text_columns(b"1,a\n", HEADER) is None
    assert read_text_columns(b"1,\xff,2\n", HEADER) is None
    assert read_text_columns(b"1," + b"x" * 140_000 + b",2\n", HEADER) is None


def test_a_header_qualifies_only_with_every_column_declared():
    declared = {"id": "long", "name": "string", "amount": "decimal(12,2)"}
    assert header_of(b'\xef\xbb\xbf"id",name,amount\r') == HEADER
    assert export_columns(HEADER, declared, ["id"], []) == declared
    assert export_columns(HEADER, {"id": "long", "name": "string"}, ["id"], []) is None
    assert export_columns(["id", "ID", "amount"], {"id": "long", "ID": "long", "amount": "double"}, ["id"], []) is None
    assert export_columns(["id", "_cdc_x"], {"id": "long", "_cdc_x": "long"}, ["id"], []) is None
    assert export_columns(["name", "amount"], declared, ["id"], []) is None


def test_a_misfit_names_the_first_declared_column_as_the_row_reader_does():
    body = b"1,a,2.5\nx,b,9.999\n3,c,oops\n"
    text = read_text_columns(body, HEADER)
    assert text is not None
    declared = {"amount": "decimal(12,2)", "id": "long", "name": "string"}  # `columns:` order
    typed, reasons = typed_columns(text, {h: declared[h] for h in HEADER}, list(declared), arrow_type)
    assert typed.schema.names == HEADER and typed.column("id").type == pa.int64()
    assert reasons == {1: "column 'amount' is declared decimal(12,2); this change's value does not fit it",
                       2: "column 'amount' is declared decimal(12,2); this change's value does not fit it"}
    assert line_texts(body, [1]) == ["x,b,9.999"]
