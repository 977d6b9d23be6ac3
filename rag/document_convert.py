"""Uploaded documents (PDF, DOCX, PPTX, XLSX, CSV, HTML, Markdown, text) → Markdown pages, safely.

`convert_document(data, filename)` returns a `Converted`: the file's kind and its pages, each page
Markdown with its headings as `#` lines (the chunker splits on them) and its number — a PDF page,
a PowerPoint slide, an Excel sheet (1-based, as the user sees them in their viewer); other formats
are one page numbered None. Pages with no text (a PDF page that is only a picture, an empty sheet)
are left out, but `page_count` still counts them, so citations keep the real page numbers.

Anything that cannot be read raises `DocumentRejected`, whose message is one sentence for the user
("This PDF is encrypted: remove its password and upload it again."). Checks made before any parser
sees the bytes: the extension is one of `SUPPORTED`; the content is what the extension says (a
PDF starts with `%PDF-`, an Office file is a ZIP holding that application's parts, a text format
has no NUL bytes and few control characters, so a renamed PNG or random bytes are refused);
an Office ZIP unpacks to at most `MAX_UNCOMPRESSED_BYTES` with at most `MAX_COMPRESSION_RATIO`
(zip bombs), judged from the sizes the archive declares — Python's zipfile stops every member at
its declared size, so a member cannot inflate further than declared.

Libraries (chosen by measurement, `python -m bench.pdf_extractors`; see bench/README.md):
- PDF: pypdfium2 (PDFium, Apache-2.0/BSD-3), page by page. On pypdf's sample corpus it read the
  text as well as the best (consensus recall 0.989; columns in order, ligatures and maths symbols
  as Unicode, hyphenated line ends joined) at 300-400 pages/s: 10× pypdf, 100× pymupdf4llm (AGPL;
  its Markdown headings did not pay for that). Figures in bench/RESULTS.md.
  PDFs carry no headings, so a line set clearly larger than the body text becomes one (the
  largest size `#`, the next `##`, ...), short lines only;
- DOCX: mammoth (Word styles → HTML, "Heading 1" → h1), then the HTML path;
- HTML: BeautifulSoup + markdownify (ATX `#` headings), scripts and styles dropped;
- PPTX: python-pptx, one page per slide, its title as `#`, tables as Markdown tables, notes;
- XLSX: openpyxl (read-only, values not formulas), one page per sheet, as a Markdown table;
- CSV, Markdown, text: the standard library. Text that is not UTF-8 (and has no BOM) is read as
  windows-1252, the WHATWG fallback for unlabelled legacy text: right for Latin-1 and Windows
  Western European files, wrong for other legacy code pages (Cyrillic, CJK), which come out garbled.
markitdown wraps these same libraries; it was not used because importing it takes ~1-2 s (it loads
magika and onnxruntime, and pandas for XLSX, ~160 MB) in every conversion process, for file-type
guessing we do not need, and its PDF path keeps no page boundaries.

The server never runs these parsers itself: rag/conversion_process.py runs them in a separate,
limited process.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import logging
import re
import threading
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

MAX_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_COMPRESSION_RATIO = 100
# Below this many unpacked bytes the ratio is not checked: a small file cannot hurt, and tiny
# repetitive workbooks do compress 100×.
RATIO_CHECK_FROM_BYTES = 16 * 1024 * 1024
MAX_ARCHIVE_MEMBERS = 20_000

SUPPORTED: dict[str, str] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".csv": "csv",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
}
MEDIA_TYPES: dict[str, str] = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "text/csv": "csv",
    "text/html": "html",
    "text/markdown": "markdown",
    "text/plain": "text",
}
# How the user would name each kind, in messages.
LABELS = {
    "pdf": "PDF",
    "docx": "Word document",
    "pptx": "PowerPoint presentation",
    "xlsx": "Excel workbook",
    "csv": "CSV file",
    "html": "HTML page",
    "markdown": "Markdown file",
    "text": "text file",
}
_ACCEPTED = (
    "a PDF, Word (.docx), PowerPoint (.pptx), Excel (.xlsx), CSV, HTML, Markdown or text file"
)
# The folder of each Office application's parts inside its ZIP package.
_OFFICE_PARTS = {"docx": "word/", "pptx": "ppt/", "xlsx": "xl/"}
_OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Formats a wrong upload is most likely to be, to say what the file is instead.
_SIGNATURES: list[tuple[bytes, str]] = [
    (b"%PDF-", "a PDF"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF87a", "a GIF image"),
    (b"GIF89a", "a GIF image"),
    (b"II*\x00", "a TIFF image"),
    (b"MM\x00*", "a TIFF image"),
    (b"PK\x03\x04", "a ZIP archive"),
    (_OLE2, "an old-format Office file"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!\x1a\x07", "a RAR archive"),
    (b"\x7fELF", "a program"),
    (b"{\\rtf", "an RTF document"),
]
_BOMS = [
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
]
# C0 controls other than tab, newline, form feed and carriage return: text has almost none.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
# PDFium is not thread-safe: one conversion at a time per process.
_PDFIUM_LOCK = threading.Lock()


@dataclass(frozen=True)
class Page:
    """A PDF page, PPTX slide or XLSX sheet; other formats are one page, numbered None."""

    number: int | None
    markdown: str


@dataclass(frozen=True)
class Converted:
    kind: str  # a value of SUPPORTED: "pdf", "docx", "pptx", "xlsx", "csv", "html", ...
    pages: list[Page]
    page_count: int | None  # pages, slides or sheets in the file, empty ones included


class DocumentRejected(ValueError):
    """The file cannot be converted; the message is one sentence to show the user."""


def kind_of(filename: str) -> str:
    """The kind of a file from its name, or DocumentRejected if ResolveAI does not read it."""
    extension = Path(filename).suffix.lower()
    if not extension:
        raise DocumentRejected(f"This file has no extension: upload {_ACCEPTED}.")
    if extension not in SUPPORTED:
        hint = ""
        if extension in (".doc", ".xls", ".ppt"):
            hint = f" Save it as {extension}x in Office and upload that."
        raise DocumentRejected(
            f"ResolveAI cannot read {extension} files: upload {_ACCEPTED}.{hint}"
        )
    return SUPPORTED[extension]


def convert_document(data: bytes, filename: str) -> Converted:
    """Convert a file's bytes to Markdown pages (CPU-bound: run it off the event loop)."""
    kind = kind_of(filename)
    if not data:
        raise DocumentRejected("This file is empty.")
    label = LABELS[kind]
    try:
        converted = _CONVERTERS[kind](data)
    except (DocumentRejected, MemoryError):
        raise
    except Exception as error:
        # Parsers of untrusted files fail in many ways (struct errors, KeyErrors on missing
        # parts, lxml syntax errors): to the user they all mean the file is damaged.
        logger.warning("could not convert a %s (%s)", kind, filename, exc_info=True)
        raise DocumentRejected(f"This {label} could not be read: it may be damaged.") from error
    pages = [Page(p.number, _clean(p.markdown)) for p in converted.pages]
    pages = [p for p in pages if p.markdown.strip()]
    if not pages:
        if kind == "pdf":
            raise DocumentRejected(
                "No text found in this PDF; scanned PDFs need OCR, which ResolveAI does not do yet."
            )
        raise DocumentRejected(f"This {label} has no text in it.")
    return Converted(kind, pages, converted.page_count)


def _clean(text: str) -> str:
    # Postgres text holds neither NUL nor lone surrogates (a PDF's broken ToUnicode map can
    # produce both).
    text = text.replace("\x00", "")
    return _LONE_SURROGATE.sub("\ufffd", text)


def _describe(data: bytes) -> str | None:
    for signature, what in _SIGNATURES:
        if data.startswith(signature):
            return what
    return None


def _not_a(kind: str, data: bytes, what: str | None = None) -> DocumentRejected:
    what = what or _describe(data)
    name = LABELS[kind]
    article = "an" if name[0] in "AEIOU" else "a"
    if what:
        return DocumentRejected(
            f"This file is {what}, not {article} {name}: check that you picked the right file."
        )
    return DocumentRejected(
        f"This file is not {article} {name}: check that you picked the right file."
    )


# Text formats ------------------------------------------------------------------------------------


def _decode_text(data: bytes, kind: str) -> str:
    """Bytes of a text format → str, or DocumentRejected if they are not text."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            text = data[len(bom) :].decode(encoding, errors="replace")
            break
    else:
        if b"\x00" in data:  # no text encoding we read writes NUL bytes: a binary file
            raise _not_text(kind, data)
        declared = _declared_html_encoding(data) if kind == "html" else None
        try:
            text = data.decode(declared or "utf-8")
        except (UnicodeDecodeError, LookupError):
            # Not UTF-8 (nor what the page declared): windows-1252, the WHATWG fallback for
            # legacy text, which reads Latin-1 too. Its 5 unassigned bytes become U+FFFD.
            text = data.decode("cp1252", errors="replace")
    sample = text[: 1 << 20]
    if len(_CONTROL.findall(sample)) > max(2, len(sample) // 100):
        raise _not_text(kind, data)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _not_text(kind: str, data: bytes) -> DocumentRejected:
    what = _describe(data)
    if what:
        return DocumentRejected(
            f"This file is {what}, not a text file: check that you picked the right file."
        )
    name = LABELS[kind]
    as_it_should = "" if kind == "text" else f", as {'an' if kind == 'html' else 'a'} {name} is"
    return DocumentRejected(
        f"This file is not a text file{as_it_should}: check that you picked the right file."
    )


def _declared_html_encoding(data: bytes) -> str | None:
    from bs4.dammit import EncodingDetector

    declared = EncodingDetector.find_declared_encoding(data[:4096], is_html=True)
    # A page saved as UTF-8 often still says latin-1/windows-1252 (browsers read both as
    # windows-1252): try UTF-8 first for those, as the decode above falls back to cp1252 anyway.
    if declared and declared.lower() in ("iso-8859-1", "latin-1", "windows-1252", "cp1252"):
        return None
    return declared


def _convert_text(data: bytes) -> Converted:
    return Converted("text", [Page(None, _decode_text(data, "text"))], None)


def _convert_markdown(data: bytes) -> Converted:
    return Converted("markdown", [Page(None, _decode_text(data, "markdown"))], None)


def _convert_csv(data: bytes) -> Converted:
    text = _decode_text(data, "csv")
    head = text[:8192]
    try:
        reader = csv.reader(io.StringIO(text), csv.Sniffer().sniff(head, delimiters=",;\t|"))
    except csv.Error:
        # The sniffer gives up on ragged rows: take the likeliest delimiter of the first line.
        first = head.split("\n", 1)[0]
        reader = csv.reader(io.StringIO(text), delimiter=max(",;\t|", key=first.count))
    try:
        rows = list(reader)
    except csv.Error as error:  # e.g. a field longer than csv.field_size_limit() (128 KiB)
        raise DocumentRejected(f"This CSV file could not be read as a table: {error}.") from error
    return Converted("csv", [Page(None, markdown_table(rows))], None)


def markdown_table(rows: Iterable[Sequence[Any]]) -> str:
    """Rows (the first one the header) → a Markdown table; empty rows and columns dropped."""
    cells = [[_cell(value) for value in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    width = max(len(row) for row in cells)
    while width and not any(len(row) >= width and row[width - 1] for row in cells):
        width -= 1
    cells = [(row + [""] * width)[:width] for row in cells]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + " --- |" * width)
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, dt.datetime) and value.time() == dt.time(0):
        value = value.date()
    if isinstance(value, dt.date | dt.time):
        value = value.isoformat()
    # A table cell is one line; a pipe would end the cell.
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("|", "\\|")


# HTML and DOCX -----------------------------------------------------------------------------------


def _convert_html(data: bytes) -> Converted:
    return Converted("html", [Page(None, html_to_markdown(_decode_text(data, "html")))], None)


def html_to_markdown(html: str) -> str:
    """HTML → Markdown with `#` headings; scripts, styles and images dropped (alt text kept)."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    class _Converter(MarkdownConverter):
        def convert_img(self, el: Any, text: str, parent_tags: Any) -> str:
            return el.attrs.get("alt", "") or ""

    soup = BeautifulSoup(html, "html.parser")
    for element in soup(["script", "style", "noscript", "template", "head", "svg", "iframe"]):
        element.decompose()
    root = soup.body or soup
    try:
        markdown = _Converter(
            heading_style="ATX", bullets="-", table_infer_header=True
        ).convert_soup(root)
    except RecursionError:
        # markdownify walks the tree recursively: a deeply nested page (hostile or generated)
        # exceeds the recursion limit. Its text, without structure, is still worth having.
        markdown = root.get_text("\n", strip=True)
    return re.sub(r"\n{3,}", "\n\n", markdown).strip() + "\n"


def _convert_docx(data: bytes) -> Converted:
    _check_office_zip(data, "docx")
    import mammoth
    import mammoth.images

    # Images are skipped without reading them (mammoth would inline each as base64).
    skip_image = mammoth.images.img_element(lambda image: {"alt": image.alt_text or ""})
    result = mammoth.convert_to_html(io.BytesIO(data), convert_image=skip_image)
    return Converted("docx", [Page(None, html_to_markdown(result.value))], None)


# ZIP-based Office files -------------------------------------------------------------------------


def _check_office_zip(data: bytes, kind: str) -> None:
    """Refuse what is not this Office kind's ZIP package, or would unpack too large."""
    if data.startswith(_OLE2):
        extension = next(e for e, k in SUPPORTED.items() if k == kind)
        raise DocumentRejected(
            f"This file is an old-format Office file (.doc, .xls or .ppt) or is protected by a "
            f"password: save it as {extension} without a password and upload it again."
        )
    if not data.startswith(b"PK"):
        raise _not_a(kind, data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise DocumentRejected(
            f"This {LABELS[kind]} could not be read: it is damaged or incomplete."
        ) from error
    with archive:
        members = archive.infolist()
        if len(members) > MAX_ARCHIVE_MEMBERS:
            raise DocumentRejected(f"This {LABELS[kind]} has too many parts to be a document.")
        unpacked = sum(member.file_size for member in members)
        if unpacked > MAX_UNCOMPRESSED_BYTES:
            raise DocumentRejected(
                f"This {LABELS[kind]} is too large once unpacked "
                f"({unpacked // 2**20:,} MB; the limit is {MAX_UNCOMPRESSED_BYTES // 2**20} MB)."
            )
        if unpacked > RATIO_CHECK_FROM_BYTES and unpacked > MAX_COMPRESSION_RATIO * len(data):
            raise DocumentRejected(
                f"This {LABELS[kind]} is compressed {unpacked // len(data):,} times over, "
                "which no real document is: it looks like a zip bomb."
            )
        names = {member.filename for member in members}
    if "[Content_Types].xml" not in names:
        raise _not_a(kind, data, "a ZIP archive")
    found = [k for k, folder in _OFFICE_PARTS.items() if any(n.startswith(folder) for n in names)]
    if kind not in found:
        what = f"{'an' if found[0] == 'xlsx' else 'a'} {LABELS[found[0]]}" if found else None
        raise _not_a(kind, data, what or "a ZIP archive")


def _convert_pptx(data: bytes) -> Converted:
    _check_office_zip(data, "pptx")
    import pptx

    presentation = pptx.Presentation(io.BytesIO(data))
    pages = []
    slides = list(presentation.slides)
    for number, slide in enumerate(slides, start=1):
        title = slide.shapes.title
        lines: list[str] = []
        if title is not None and title.has_text_frame and title.text_frame.text.strip():
            lines.append("# " + " ".join(title.text_frame.text.split()))
        for shape in _reading_order(slide.shapes):
            if title is not None and shape.shape_id == title.shape_id:
                continue
            lines.extend(_shape_lines(shape))
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                lines += ["", "## Notes", notes.text.strip()]
        pages.append(Page(number, "\n\n".join(line for line in lines if line) + "\n"))
    return Converted("pptx", pages, len(slides))


def _reading_order(shapes: Iterable[Any]) -> list[Any]:
    return sorted(shapes, key=lambda s: (s.top or 0, s.left or 0))


def _shape_lines(shape: Any) -> list[str]:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
        return [line for child in _reading_order(shape.shapes) for line in _shape_lines(child)]
    if getattr(shape, "has_table", False) and shape.has_table:
        rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
        return [markdown_table(rows)]
    if getattr(shape, "has_chart", False) and shape.has_chart:
        chart = shape.chart
        return [f"Chart: {chart.chart_title.text_frame.text}"] if chart.has_title else []
    if shape.has_text_frame:
        return [p for p in (_escape_heading(p.text.strip()) for p in shape.text_frame.paragraphs)]
    return []


def _escape_heading(line: str) -> str:
    # A body line that starts with '#' is text, not a heading to split on.
    return "\\" + line if line.startswith("#") else line


def _convert_xlsx(data: bytes) -> Converted:
    _check_office_zip(data, "xlsx")
    import openpyxl

    # read_only streams rows from the XML; data_only gives the values Excel last computed.
    workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        pages = []
        sheets = workbook.worksheets
        for number, sheet in enumerate(sheets, start=1):
            # Rows as stored, not padded to the width the sheet declares: one saying "A1:XFD…"
            # would turn every row into 16,384 cells (3,000 rows: 14 s instead of 0.1 s).
            sheet.reset_dimensions()
            table = markdown_table(sheet.iter_rows(values_only=True))
            if table:
                pages.append(Page(number, f"# {' '.join(sheet.title.split())}\n\n{table}"))
        return Converted("xlsx", pages, len(sheets))
    finally:
        workbook.close()


# PDF ---------------------------------------------------------------------------------------------


def _convert_pdf(data: bytes) -> Converted:
    if b"%PDF-" not in data[:1024]:  # readers accept junk before the header, up to 1 KiB
        raise _not_a("pdf", data)
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    with _PDFIUM_LOCK:
        try:
            pdf = pypdfium2.PdfDocument(data)
        except pypdfium2.PdfiumError as error:
            code = getattr(error, "err_code", None)
            if code in (pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY):
                raise DocumentRejected(
                    "This PDF is encrypted: remove its password and upload it again."
                ) from error
            raise DocumentRejected(
                "This PDF is damaged or incomplete and cannot be read: "
                "export it again from the program that made it."
            ) from error
        try:
            lines_by_page = [_pdf_page_lines(pdf[index], pdfium_c) for index in range(len(pdf))]
            page_count = len(pdf)
        finally:
            pdf.close()
    levels = _heading_levels(lines_by_page)
    pages = []
    for number, lines in enumerate(lines_by_page, start=1):
        out: list[str] = []
        previous_level = None
        for text, size in lines:
            level = levels.get(size) if _heading_like(text) else None
            if level and level == previous_level:
                out[-2] += " " + text  # a title broken over lines of one size is one heading
            elif level:
                out += ["", "#" * level + " " + text, ""]
            else:
                out.append(_escape_heading(text))
            previous_level = level
        pages.append(Page(number, re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"))
    return Converted("pdf", pages, page_count)


def _pdf_page_lines(page: Any, pdfium_c: Any) -> list[tuple[str, float]]:
    """A page's text lines (PDFium's reading order), each with its largest font size."""
    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        text = textpage.get_text_range(0, count) if count else ""
        # PDFium's text has one character per char index (it inserts the line breaks it
        # infers as chars of their own), so sizes line up with the text; when they do not
        # (a character outside the BMP), the page is read without headings.
        sizes = (
            [pdfium_c.FPDFText_GetFontSize(textpage, i) for i in range(count)]
            if len(text) == count
            else [0.0] * len(text)
        )
    finally:
        textpage.close()
        page.close()
    lines = []
    start = 0
    for raw in re.split(r"(\r\n|\n|\r)", text):
        if raw in ("\r\n", "\n", "\r"):
            start += len(raw)
            continue
        line_sizes = [sizes[i] for i in range(start, start + len(raw)) if not text[i].isspace()]
        start += len(raw)
        # U+FFFE marks where PDFium joined a word hyphenated at the end of a line.
        line = _CONTROL.sub("", raw.replace("\ufffe", "")).strip()
        if line:
            size = round(max(line_sizes), 1) if line_sizes else 0.0
            lines.append((" ".join(line.split()), size))
    return lines


def _heading_levels(lines_by_page: list[list[tuple[str, float]]]) -> dict[float, int]:
    """Font sizes that mark headings → level 1..4, the largest size first.

    The body size is the one most characters are set in; a size at least 15 % larger that is
    used by short lines only (not a large-print paragraph) marks headings.
    """
    chars: Counter[float] = Counter()
    long_lines: Counter[float] = Counter()
    for lines in lines_by_page:
        for text, size in lines:
            chars[size] += len(text)
            if not _heading_like(text):
                long_lines[size] += 1
    if not chars:
        return {}
    body = chars.most_common(1)[0][0]
    if body <= 0:
        return {}
    sizes = sorted(
        (s for s in chars if s >= body * 1.15 and long_lines[s] <= max(1, chars[s] // 2000)),
        reverse=True,
    )
    return {size: level for level, size in enumerate(sizes[:4], start=1)}


def _heading_like(text: str) -> bool:
    # Short, with letters, not a sentence: axis labels and page numbers are digits only.
    return len(text) <= 120 and len(text.split()) <= 14 and any(c.isalpha() for c in text)


_CONVERTERS: dict[str, Callable[[bytes], Converted]] = {
    "pdf": _convert_pdf,
    "docx": _convert_docx,
    "pptx": _convert_pptx,
    "xlsx": _convert_xlsx,
    "csv": _convert_csv,
    "html": _convert_html,
    "markdown": _convert_markdown,
    "text": _convert_text,
}
