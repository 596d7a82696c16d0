"""Small documents for the file tests (and bench/vectors.py): a real PDF with a text layer,
written by hand (the xref offsets computed), so no PDF writer is needed to make one."""

from __future__ import annotations

import zlib


def pdf_with_text(text: str) -> bytes:
    """A one-page PDF whose text layer is `text` (ASCII, no parentheses or backslashes)."""
    return pdf_with_pages([[text]])


def pdf_with_pages(pages: list[list[str]]) -> bytes:
    """A PDF of one page per entry, each its lines of text (ASCII, no parentheses or
    backslashes), one under the other."""
    font = 3 + 2 * len(pages)  # after the catalog, the page tree and each page's two objects
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
                   b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(len(pages))), len(pages))]
    for lines in pages:
        shown = " T* ".join(f"({line}) Tj" for line in lines)
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents "
                       b"%d 0 R /Resources << /Font << /F1 %d 0 R >> >> >>"
                       % (len(objects), font))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_of(objects)


def pdf_of(objects: list[bytes]) -> bytes:
    """The file of these objects (numbered from 1, the first the catalog), xref computed."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)


def pdf_sharing_one_stream(operators: int, pages: int, shown: str = "a") -> bytes:
    """A small PDF that costs much to read: one compressed content stream of
    `operators` text operators (`(a) Tj`, or `shown` instead of `a`), which each of its `pages`
    pages names, so a reader interprets it `pages` times. 200,000 operators and five pages
    make ~3.3 KB."""
    op = b"(%s) Tj " % shown.encode()
    stream = zlib.compress(b"BT /F1 12 Tf " + op * operators + b"ET", 9)
    font = 4 + pages
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
                   b" ".join(b"%d 0 R" % (3 + i) for i in range(pages)), pages)]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (3 + pages, font)] * pages
    objects.append(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream
                   + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_of(objects)
