"""A small, valid PDF with a text layer, written without a PDF library: one page per list of
lines, in Helvetica, so tests and evals can upload PDFs whose every page says something known
(the SQuAD pages rendered to PDF, a page 3 that answers a question)."""

from __future__ import annotations

import textwrap

LINE_CHARS = 90
LINES_PER_PAGE = 60


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _page_stream(lines: list[str]) -> bytes:
    body = ["BT", "/F1 10 Tf", "12 TL", "50 800 Td"]
    for line in lines:
        latin = line.encode("latin-1", "replace").decode("latin-1")
        body.append(f"({_escape(latin)}) Tj T*")
    body.append("ET")
    return "\n".join(body).encode("latin-1")


def wrap(text: str) -> list[str]:
    """Paragraphs as lines short enough for the page."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        lines.extend(textwrap.wrap(paragraph, LINE_CHARS) or [""])
    return lines


def pdf_with_pages(pages: list[list[str]]) -> bytes:
    """A PDF whose page i shows `pages[i]`'s lines (at most LINES_PER_PAGE each)."""
    objects: list[bytes] = []  # object n is objects[n - 1]
    font = 3 + 2 * len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    for i, lines in enumerate(pages):
        stream = _page_stream(lines[:LINES_PER_PAGE])
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {4 + 2 * i} 0 R"
            f" /Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
