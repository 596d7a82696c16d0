"""The worst inputs the suite sends: each is small on the wire and expands inside the proxy."""

from __future__ import annotations

import zlib

from tests.support.documents import pdf_of


def runaway_pdf(operators: int, pages: int = 5) -> bytes:
    """A few KB of PDF whose one Flate-compressed content stream of `operators` text-showing
    operators is shared by `pages` pages: extraction walks it once per page."""
    stream = zlib.compress(b"BT /F1 12 Tf 72 720 Td " + b"(a) Tj " * operators + b"ET", 9)
    font = 3 + pages + 1
    kids = b" ".join(b"%d 0 R" % (4 + i) for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream
               + b"\nendstream"]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % font] * pages
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return pdf_of(objects)


def template_bomb(placeholders: int, value_bytes: int) -> dict[str, object]:
    """A prompt template of `placeholders` times `{{x}}` (5 bytes each) with a default value
    of `value_bytes`: rendered, placeholders x value_bytes."""
    return {"prompt": "{{x}}" * placeholders, "variables": {"x": "v" * value_bytes}}


def text_file(size: int) -> bytes:
    """Plain words up to `size` bytes (extraction keeps all of it: nothing to strip)."""
    unit = b"lorem ipsum dolor sit amet consectetur "
    return (unit * (size // len(unit) + 1))[:size]
