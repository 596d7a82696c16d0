"""core/documents.py: what text each kind of file gives the model, and the SDK's codes for the
files it cannot give any; what reading one PDF may cost (PdfLimits)."""

from __future__ import annotations

import time

import pytest

from proxy.core.documents import (
    INVALID,
    UNSUPPORTED,
    PdfLimits,
    Unreadable,
    extract_text,
    runs_long,
)
from tests.support.documents import pdf_sharing_one_stream, pdf_with_pages, pdf_with_text


def code_of(data: bytes, name: str | None = None, kind: str | None = None) -> str:
    with pytest.raises(Unreadable) as info:
        extract_text(data, name, kind)
    return info.value.code


def test_a_pdf_gives_its_text_layer_whatever_its_name() -> None:
    assert extract_text(pdf_with_text("Quarterly revenue grew"), "notes.txt") == \
        "Quarterly revenue grew"


def test_html_loses_tags_scripts_and_styles_by_name_or_media_type() -> None:
    page = (b"<html><head><style>p{}</style><title>t</title></head><body><h1>Title</h1>"
            b"<script>alert(1)</script><p>One &amp; <i>two</i></p></body></html>")
    assert extract_text(page, "page.html") == "Title\nOne & two"
    assert extract_text(page, None, "text/html; charset=utf-8") == "Title\nOne & two"


def test_json_markdown_and_text_are_kept_as_sent() -> None:
    assert extract_text(b'{"a": [1, 2]}', "d.json") == '{"a": [1, 2]}'
    assert extract_text("\ufeff# Title\n\n*x*".encode(), "r.md") == "# Title\n\n*x*"


def test_unreadable_files_carry_the_sdks_codes() -> None:
    assert code_of(b"\x89PNG\r\n\x1a\n\x00\x00") == UNSUPPORTED
    assert code_of(b"PK\x03\x04zip") == UNSUPPORTED
    assert code_of(b"\xff\xfe\x00bad utf-8") == UNSUPPORTED
    assert code_of(b"text\x00with nul") == UNSUPPORTED
    assert code_of(b'{"a": ', "cut.json") == INVALID
    assert code_of(b"%PDF-1.4\nno objects at all") == INVALID
    # A PDF without a text layer (a scan): nothing to read, and said so.
    assert code_of(pdf_with_text("")) == INVALID


def refusal(data: bytes, limits: PdfLimits) -> str:
    with pytest.raises(Unreadable) as info:
        extract_text(data, None, None, limits)
    assert info.value.code == INVALID
    return info.value.message


def test_the_issues_pdf_is_refused_by_its_operator_count_and_its_reading_stops() -> None:
    # 3.3 KB: one stream of 200,000 operators named by five pages (58 s of CPU before; the
    # default bound, 250,000, stops it after ~3 s: tests/integration/test_extraction.py reads
    # it in a child). A bound of 20,000 here: the reading stops there, not after 1,000,000.
    hostile = pdf_sharing_one_stream(200_000, 5)
    assert len(hostile) < 4096 and PdfLimits().operators == 250_000
    started = time.process_time()
    assert "more than 20000 operators" in refusal(hostile, PdfLimits(operators=20_000))
    # ~1.5 s: pypdf parses the page's whole stream (1.4 MB) before its operators run.
    assert time.process_time() - started < 10


def test_each_bound_on_a_pdf_refuses_past_it_and_exactly_at_it_reads() -> None:
    three_pages = pdf_with_pages([["one"], ["two"], ["three"]])
    assert extract_text(three_pages, None, None, PdfLimits(pages=3)) == "one\n\ntwo\n\nthree"
    assert "more than 2 pages" in refusal(three_pages, PdfLimits(pages=2))
    shared = pdf_sharing_one_stream(100, 3)  # "BT /F1 12 Tf " + 100 x "(a) Tj " + "ET": 715 B
    assert extract_text(shared, None, None, PdfLimits(content_bytes=3 * 715))
    assert "2144 bytes of content" in refusal(shared, PdfLimits(content_bytes=3 * 715 - 1))
    # BT, Tf, 100 Tj and ET: 103 operators a page, counted on each of the three.
    assert extract_text(shared, None, None, PdfLimits(operators=3 * 103))
    assert "more than 308 operators" in refusal(shared, PdfLimits(operators=3 * 103 - 1))


def test_a_pdfs_reading_stops_once_its_text_passes_what_the_caller_takes() -> None:
    pages = pdf_with_pages([["first page"], ["second page"], ["third page"]])
    assert extract_text(pages, None, None, PdfLimits(chars=5)) == "first page"
    assert extract_text(pages, None, None, PdfLimits(chars=20)) == \
        "first page\n\nsecond page"


def test_pdf_html_and_json_are_the_kinds_read_out_of_process() -> None:
    assert runs_long(pdf_with_text("x"), "a.txt")
    assert runs_long(b"<p>x</p>", "a.HTML") and runs_long(b"x", None, "text/html; charset=x")
    assert runs_long(b"{}", "a.json") and runs_long(b"{}", None, "application/json")
    assert not runs_long(b"plain", "a.txt", "text/plain")
    assert not runs_long(b"# md", "a.md", None)
