"""The text of a document a client gave us (an `input_file`, an uploaded file): what the model
reads, since a chat fleet reads no binary documents. Pure: bytes in, text out. Vector-store
ingestion reads files through the same function.

Kinds, told by the file's first bytes first (a PDF named `notes.txt` is still a PDF), then by its
name or media type:
  - PDF: the text layer (pypdf); a PDF without one (a scan) has no text and is refused;
  - HTML: the text without tags, scripts or styles;
  - JSON: the text as sent, once it parses (a truncated upload is refused, not half-read);
  - anything else that is UTF-8 text without NUL bytes: plain text, Markdown, CSV, code.
Anything else (images, archives, Office files) is `unsupported_file`; a file of a supported
kind that cannot be read (a broken PDF, invalid JSON, bad UTF-8) is `invalid_file`: the SDK's
codes, and the caller's 400 names the part.

A PDF is a program, not a text: a few KB of it can name one content stream of 200,000 text
operators shared by every page, which pypdf (pure Python) reads for a minute. `PdfLimits` bounds
the work of one document (its pages, its pages' decoded content, the operators read, the text
kept); past any of them the PDF is `invalid_file`. The time it may take is bounded where it runs
(services/files/extraction.py: a child process, killed past its CPU seconds).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

# A file's bytes: a reader that filled a buffer passes it without a copy.
Data = bytes | bytearray
UNSUPPORTED = "unsupported_file"
INVALID = "invalid_file"

_PDF_MAGIC = b"%PDF-"
_HTML_SUFFIXES = (".html", ".htm", ".xhtml")
# Elements whose content is not text a reader sees.
_HIDDEN = frozenset({"script", "style", "template", "noscript", "head"})
# Signatures of binary formats we do not read: refused as unsupported, never decoded as text.
_BINARY_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"PK\x03\x04", b"\x1f\x8b", b"RIFF",
                 b"\xd0\xcf\x11\xe0", b"7z\xbc\xaf")


@dataclass(frozen=True)
class PdfLimits:
    """What reading one PDF may cost. The defaults pass an 800-page text-dense book (about
    300 operators and 5 KB of content a page) and stop a hostile file within seconds of CPU:
    pypdf parses a page's whole content (~1 µs a byte here) before it interprets its operators
    (~13 µs each), so the content is bounded before parsing, the operators as they run."""

    pages: int = 2000
    # Decoded content bytes of all pages; a stream shared by N pages counts N times, as it is
    # parsed N times.
    content_bytes: int = 8 * 1024 * 1024
    operators: int = 250_000
    # Extraction stops once the text passes this many characters (None: no bound): a caller
    # with a budget refuses a text over it and needs none of the rest.
    chars: int | None = None


class Unreadable(Exception):
    """Why a document has no text we can give the model; `code` is the SDK's."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def is_pdf(data: Data, filename: str | None = None, media_type: str | None = None) -> bool:
    """Read as a PDF: the costly kind (callers run it off the event loop)."""
    kind = (media_type or "").split(";")[0].strip().lower()
    return (data.startswith(_PDF_MAGIC) or kind == "application/pdf"
            or (filename or "").lower().endswith(".pdf"))


def runs_long(data: Data, filename: str | None = None, media_type: str | None = None) -> bool:
    """Whether reading `data` is work whose cost its size does not bound well: a PDF (a
    program), HTML (a pure-Python parser that has had quadratic inputs), JSON (checked by
    parsing it: `[{},{},...]` parses to 24x its size). A server reads such a file in a child
    process whose CPU and memory are bounded (services/files/extraction.py)."""
    name = (filename or "").lower()
    kind = (media_type or "").split(";")[0].strip().lower()
    return (is_pdf(data, filename, media_type) or name.endswith((*_HTML_SUFFIXES, ".json"))
            or kind in ("text/html", "application/xhtml+xml", "application/json"))


def extract_text(data: Data, filename: str | None = None, media_type: str | None = None,
                 limits: PdfLimits = PdfLimits()) -> str:
    """The text of `data` (see the module docstring), or `Unreadable`. CPU-bound for a PDF
    (seconds for a large one): a server reads one in a child process it can kill
    (services/files/extraction.py), never on its event loop or in its threads."""
    name = (filename or "").lower()
    kind = (media_type or "").split(";")[0].strip().lower()
    if is_pdf(data, filename, media_type):
        return _pdf_text(data, limits)
    if data.startswith(_BINARY_MAGIC):
        raise Unreadable(UNSUPPORTED, "the file is not a kind this server reads (PDF, text, "
                                      "Markdown, HTML or JSON)")
    text = _utf8(data)
    if name.endswith(_HTML_SUFFIXES) or kind in ("text/html", "application/xhtml+xml"):
        return _html_text(text)
    if name.endswith(".json") or kind == "application/json":
        try:
            json.loads(text)
        except ValueError:
            raise Unreadable(INVALID, "the file is not valid JSON") from None
    return text


def _utf8(data: Data) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable(UNSUPPORTED, "the file is binary or not UTF-8 text; this server reads "
                                      "PDF, text, Markdown, HTML and JSON files") from None
    if "\x00" in text:
        raise Unreadable(UNSUPPORTED, "the file is binary; this server reads PDF, text, "
                                      "Markdown, HTML and JSON files")
    return text.removeprefix("\ufeff")


class _Work:
    """The work one PDF has cost so far, against its `PdfLimits`."""

    def __init__(self, limits: PdfLimits) -> None:
        self.limits = limits
        self.content = 0
        self.operators = 0
        self.chars = 0

    def page(self, page: Any) -> None:
        """Count a page's decoded content before its operators are parsed (parsing them is
        the costly part)."""
        contents = page.get_contents()
        self.content += len(contents.get_data()) if contents is not None else 0
        if self.content > self.limits.content_bytes:
            raise Unreadable(INVALID, f"the PDF's pages hold more than "
                                      f"{self.limits.content_bytes} bytes of content, more "
                                      "than this server reads in one document")

    def operator(self, *_: Any) -> None:
        # pypdf's visitor, called before each operator is interpreted.
        self.operators += 1
        if self.operators > self.limits.operators:
            raise Unreadable(INVALID, f"the PDF's pages run more than {self.limits.operators} "
                                      "operators, more than this server reads in one document")

    def full(self, text: str) -> bool:
        self.chars += len(text)
        return self.limits.chars is not None and self.chars > self.limits.chars


def _pdf_text(data: Data, limits: PdfLimits) -> str:
    from pypdf import PdfReader  # imported when a PDF comes: most requests carry none

    work = _Work(limits)
    pages: list[str] = []
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise Unreadable(INVALID, "the PDF is encrypted")
        if len(reader.pages) > limits.pages:
            raise Unreadable(INVALID, f"the PDF has more than {limits.pages} pages, more than "
                                      "this server reads in one document")
        for page in reader.pages:
            work.page(page)
            pages.append((page.extract_text(visitor_operand_before=work.operator)
                          or "").strip())
            if work.full(pages[-1]):
                break  # already past what the caller takes: it refuses the text
    except Unreadable:
        raise
    except Exception:
        # A client's file, parsed by a library: a damaged or hostile PDF makes pypdf raise
        # any of a spread of types (its own, ValueError, KeyError, RecursionError, its
        # decompression limits...); each means "cannot be read", never a 500.
        raise Unreadable(INVALID, "the PDF cannot be read") from None
    text = "\n\n".join(p for p in pages if p)
    if not text:
        raise Unreadable(INVALID, "the PDF has no text layer (a scanned document?); this "
                                  "server does not run OCR")
    return text


class _TextOnly(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self._hidden += 1
        elif tag in ("br", "p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def _html_text(text: str) -> str:
    parser = _TextOnly()
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)
