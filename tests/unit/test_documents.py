"""core/documents.py: what text each kind of file gives the model, and the SDK's codes for the
files it cannot give any."""

from __future__ import annotations

import pytest

from proxy.core.documents import INVALID, UNSUPPORTED, Unreadable, extract_text
from tests.support.documents import pdf_with_text


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
