"""Uploaded files → Markdown pages: every format's happy path, page numbers, and each kind of bad
input (wrong type, renamed binary, encrypted/damaged/scanned PDF, zip bomb, huge or non-UTF-8
text, empty file) rejected with a sentence a user can act on; the conversion process's time-out,
crash and memory limit.

Real PDFs come from pypdf's sample corpus, read in place from ../shared/docs/pdf-samples (CC BY-SA;
never copied here). Office files are built here with python-docx, python-pptx and openpyxl.
"""

from __future__ import annotations

import asyncio
import csv
import io
import itertools
import os
import re
import struct
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from core.config import PROJECT_ROOT
from rag import conversion_process
from rag.conversion_process import convert_in_subprocess
from rag.document_convert import (
    MAX_UNCOMPRESSED_BYTES,
    SUPPORTED,
    Converted,
    DocumentRejected,
    Page,
    convert_document,
)

SAMPLES = Path(
    os.environ.get("PDF_SAMPLES_DIR", PROJECT_ROOT.parent / "shared" / "docs" / "pdf-samples")
)
needs_samples = pytest.mark.skipif(
    not (SAMPLES / "files.json").exists(), reason=f"pypdf's sample PDFs are not in {SAMPLES}"
)

FOUR_PAGES = "004-pdflatex-4-pages/pdflatex-4-pages.pdf"
ENCRYPTED = "005-libreoffice-writer-password/libreoffice-writer-password.pdf"
OUTLINE = "006-pdflatex-outline/pdflatex-outline.pdf"
GEOTOPO = "009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"
# Image-only pages (checked: no text layer on any page).
SCANNED = [
    "007-imagemagick-images/imagemagick-lzw.pdf",
    "007-imagemagick-images/imagemagick-ASCII85Decode.pdf",
    "007-imagemagick-images/imagemagick-CCITTFaxDecode.pdf",
    "019-grayscale-image/grayscale-image.pdf",
    "023-cmyk-image/cmyk-image.pdf",
]

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000") + bytes(40)
RANDOM = bytes((i * 7919 + 13) % 256 for i in range(4096))  # deterministic noise, NULs included


def sample(path: str) -> bytes:
    return (SAMPLES / path).read_bytes()


def rejected(data: bytes, filename: str) -> str:
    with pytest.raises(DocumentRejected) as info:
        convert_document(data, filename)
    message = str(info.value)
    # Every refusal is one readable sentence for the user, not a traceback or a class name.
    assert message[0].isupper() and message.endswith("."), message
    assert "Error" not in message and "Traceback" not in message, message
    return message


def text_of(converted: Converted) -> str:
    return "\n".join(page.markdown for page in converted.pages)


# Office files, built in the test ---------------------------------------------------------------


def make_docx() -> bytes:
    docx = pytest.importorskip("docx", reason="python-docx (requirements-dev.txt) builds the DOCX")
    document = docx.Document()
    document.add_heading("Quarterly report", level=1)
    document.add_paragraph("Revenue grew by 12 percent in the third quarter.")
    document.add_heading("Risks", level=2)
    document.add_paragraph("Supply of copper remains uncertain.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Region", "Sales"
    table.cell(1, 0).text, table.cell(1, 1).text = "North", "420"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def make_pptx() -> bytes:
    pptx = pytest.importorskip("pptx", reason="python-pptx builds the PPTX")
    presentation = pptx.Presentation()
    for title, body in [("Launch plan", "Ship in March"), ("Budget", "Forty thousand euros")]:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def make_xlsx() -> bytes:
    openpyxl = pytest.importorskip("openpyxl", reason="openpyxl builds the XLSX")
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Prices"
    sheet.append(["Item", "Price"])
    sheet.append(["Tea", 3.5])
    sheet.append(["Coffee | large", 4])
    second = workbook.create_sheet("Staff")
    second.append(["Name", "Start"])
    second.append(["Ana", "2024-01-02"])
    workbook.create_sheet("Empty")
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def zip_bomb(main_part: str, uncompressed: int) -> bytes:
    """A valid-looking OOXML package whose main part inflates to `uncompressed` bytes of spaces."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        with archive.open(main_part, "w", force_zip64=True) as member:
            block = b" " * (1 << 20)
            for _ in range(uncompressed >> 20):
                member.write(block)
    return out.getvalue()


# Happy paths ------------------------------------------------------------------------------------


@needs_samples
def test_pdf_has_one_page_per_pdf_page_with_its_number() -> None:
    converted = convert_document(sample(FOUR_PAGES), "paper.pdf")
    assert converted.kind == "pdf"
    assert converted.page_count == 4
    assert [page.number for page in converted.pages] == [1, 2, 3, 4]
    assert "Hello, here is some text without a meaning." in converted.pages[0].markdown
    # Readable text: words separated by spaces, not glued or split letter by letter.
    words = converted.pages[1].markdown.split()
    assert len(words) > 400 and sum(len(w) > 25 for w in words) == 0


@needs_samples
def test_pdf_headings_become_markdown_headings() -> None:
    converted = convert_document(sample(OUTLINE), "outline.pdf")
    headings = [
        line for page in converted.pages for line in page.markdown.splitlines() if line[:1] == "#"
    ]
    # The sections are set in a larger size than the body (and listed in the outline).
    assert headings == ["# Contents", "# 1 Foo", "# 2 Bar", "# 3 Baz", "# 4 Foo", "# 5 Bar",
                        "# 6 Baz", "# 7 Foo", "# 8 Bar", "# 9 Baz"][: len(headings)]  # fmt: skip
    assert len(headings) >= 4


@needs_samples
def test_long_pdf_text_is_on_the_right_page() -> None:
    converted = convert_document(sample(GEOTOPO), "GeoTopo.pdf")
    assert converted.page_count == 117
    numbers = [page.number for page in converted.pages]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    assert all(page.markdown.strip() for page in converted.pages)
    # The table of contents is near the front, the index at the back.
    assert "Inhaltsverzeichnis" in text_of(Converted("pdf", converted.pages[:5], 5))
    assert "Stichwortverzeichnis" in converted.pages[-1].markdown + converted.pages[-2].markdown
    # Ligatures come out as letters (so "Definition" is found by search), not as U+FB01.
    assert "\ufb01" not in text_of(converted)


@needs_samples
def test_pdf_pages_without_text_are_left_out_but_counted() -> None:
    converted = convert_document(sample("007-imagemagick-images/imagemagick-images.pdf"), "i.pdf")
    assert converted.page_count == 6
    assert [page.number for page in converted.pages] == [1, 2, 3, 6]
    assert all(page.markdown.strip() for page in converted.pages)


def test_html_keeps_headings_and_drops_scripts() -> None:
    html = (
        "<html><head><title>T</title><style>p{color:red}</style></head><body>"
        "<h1>Travel policy</h1><p>Book trains for trips under <b>500 km</b>.</p>"
        "<script>alert('x')</script><h2>Hotels</h2><ul><li>Up to 120 € a night</li></ul>"
        "</body></html>"
    )
    converted = convert_document(html.encode(), "policy.html")
    assert converted == Converted("html", converted.pages, None)
    assert [page.number for page in converted.pages] == [None]
    markdown = converted.pages[0].markdown
    assert "# Travel policy" in markdown.splitlines()
    assert "## Hotels" in markdown.splitlines()
    assert "500 km" in markdown and "120 €" in markdown
    assert "alert" not in markdown and "color:red" not in markdown


def test_html_declared_in_another_charset() -> None:
    html = '<html><head><meta charset="windows-1252"></head><body><p>Größe: 5 €</p></body></html>'
    converted = convert_document(html.encode("cp1252"), "page.htm")
    assert "Größe: 5 €" in converted.pages[0].markdown


def test_markdown_is_kept_as_written() -> None:
    markdown = "# Setup\n\nRun `make`.\r\n\r\n## Notes\n\n- one\n- two\n"
    converted = convert_document(markdown.encode(), "README.md")
    assert converted == Converted(
        "markdown", [Page(None, "# Setup\n\nRun `make`.\n\n## Notes\n\n- one\n- two\n")], None
    )


def test_text_file() -> None:
    converted = convert_document("Line one\nLine two\n".encode("utf-8-sig"), "notes.txt")
    assert converted == Converted("text", [Page(None, "Line one\nLine two\n")], None)


def test_text_file_in_latin1_decodes_sensibly() -> None:
    text = "Café crème, naïve façade: 20 °C, über 5 Grüße. Señor Muñoz paid £12.\n" * 3
    converted = convert_document(text.encode("latin-1"), "menu.txt")
    assert converted.pages[0].markdown == text


def test_text_file_in_utf16_with_bom() -> None:
    converted = convert_document("Grüße aus Köln\n".encode("utf-16"), "hello.txt")
    assert converted.pages[0].markdown == "Grüße aus Köln\n"


def test_csv_becomes_a_markdown_table() -> None:
    rows = [["name", "city", "note"], ["Ana", "Lisbon", "likes | pipes"], ["Bo", "Oslo", ""]]
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    converted = convert_document(out.getvalue().encode(), "people.csv")
    assert converted.kind == "csv" and converted.page_count is None
    lines = converted.pages[0].markdown.splitlines()
    assert lines[0] == "| name | city | note |"
    assert lines[1] == "| --- | --- | --- |"
    assert lines[2] == "| Ana | Lisbon | likes \\| pipes |"
    assert lines[3] == "| Bo | Oslo |  |"


def test_csv_with_semicolons_and_ragged_rows() -> None:
    converted = convert_document(b"a;b\n1;2;3\n4\n", "data.csv")
    lines = converted.pages[0].markdown.splitlines()
    assert lines[0] == "| a | b |  |"
    assert lines[2:] == ["| 1 | 2 | 3 |", "| 4 |  |  |"]


def test_docx_keeps_headings_and_tables() -> None:
    converted = convert_document(make_docx(), "report.docx")
    assert converted.kind == "docx" and converted.page_count is None
    assert [page.number for page in converted.pages] == [None]
    lines = converted.pages[0].markdown.splitlines()
    assert "# Quarterly report" in lines and "## Risks" in lines
    assert "Revenue grew by 12 percent" in converted.pages[0].markdown
    assert any("North" in line and "420" in line and "|" in line for line in lines)


def test_pptx_has_one_page_per_slide() -> None:
    converted = convert_document(make_pptx(), "deck.pptx")
    assert converted.kind == "pptx" and converted.page_count == 2
    assert [page.number for page in converted.pages] == [1, 2]
    assert converted.pages[0].markdown.splitlines()[0] == "# Launch plan"
    assert "Ship in March" in converted.pages[0].markdown
    assert "# Budget" in converted.pages[1].markdown
    assert "Launch plan" not in converted.pages[1].markdown
    assert "<!--" not in text_of(converted)


def test_xlsx_has_one_page_per_sheet() -> None:
    converted = convert_document(make_xlsx(), "book.xlsx")
    assert converted.kind == "xlsx" and converted.page_count == 3
    assert [page.number for page in converted.pages] == [1, 2]  # the empty sheet is left out
    prices = converted.pages[0].markdown.splitlines()
    assert prices[0] == "# Prices"
    assert "| Item | Price |" in prices
    assert "| Tea | 3.5 |" in prices
    assert "| Coffee \\| large | 4 |" in prices
    assert converted.pages[1].markdown.startswith("# Staff\n")


def test_xlsx_declaring_a_huge_sheet_is_read_as_stored() -> None:
    # 3,000 rows of two cells, in a sheet that says it is 16,384 columns wide: padded to that
    # width, its rows would be 49 million cells.
    openpyxl = pytest.importorskip("openpyxl")
    workbook = openpyxl.Workbook()
    for row in range(3000):
        workbook.active.append([f"item {row}", row])
    saved = io.BytesIO()
    workbook.save(saved)
    source = zipfile.ZipFile(saved)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "xl/worksheets/sheet1.xml":
                data = re.sub(rb'<dimension ref="[^"]*"', b'<dimension ref="A1:XFD3000"', data)
                assert b"XFD3000" in data
            archive.writestr(item, data)
    started = time.monotonic()
    converted = convert_document(out.getvalue(), "book.xlsx")
    assert time.monotonic() - started < 5
    lines = converted.pages[0].markdown.splitlines()
    assert lines[-1] == "| item 2999 | 2999 |"


def test_deeply_nested_html_still_gives_its_text() -> None:
    html = "<div>" * 20_000 + "deep text" + "</div>" * 20_000
    started = time.monotonic()
    converted = convert_document(html.encode(), "nested.html")
    assert time.monotonic() - started < 10
    assert converted.pages[0].markdown.strip() == "deep text"


def test_supported_lists_every_kind() -> None:
    kinds = {"pdf", "docx", "pptx", "xlsx", "csv", "html", "markdown", "text"}
    assert set(SUPPORTED.values()) == kinds
    assert {".pdf", ".docx", ".pptx", ".xlsx", ".csv", ".html", ".htm", ".md", ".txt"} <= set(
        SUPPORTED
    )


def test_extension_is_case_insensitive() -> None:
    assert convert_document(b"hello", "NOTES.TXT").kind == "text"


# Bad input --------------------------------------------------------------------------------------


def test_unknown_type_is_rejected() -> None:
    message = rejected(PNG, "holiday.png")
    assert ".png" in message and "PDF" in message
    assert "no extension" in rejected(b"hello", "README")
    assert ".doc" in rejected(b"\xd0\xcf\x11\xe0" + bytes(100), "old.doc")


@pytest.mark.parametrize("name", ["scan.pdf", "report.docx", "deck.pptx", "book.xlsx"])
def test_renamed_png_is_rejected(name: str) -> None:
    message = rejected(PNG, name)
    assert "PNG image" in message, message


@pytest.mark.parametrize("name", ["notes.txt", "data.csv", "page.html", "README.md"])
def test_binary_named_as_text_is_rejected(name: str) -> None:
    assert "not a text file" in rejected(PNG, name)
    assert "not a text file" in rejected(RANDOM, name)


@pytest.mark.parametrize("name", ["scan.pdf", "report.docx", "book.xlsx"])
def test_random_bytes_are_rejected(name: str) -> None:
    assert "is not a" in rejected(RANDOM, name)


def test_office_file_of_the_wrong_kind_is_rejected() -> None:
    message = rejected(make_xlsx(), "report.docx")
    assert "not a Word document" in message and "Excel" in message


@needs_samples
def test_pdf_named_docx_is_rejected() -> None:
    assert "PDF" in rejected(sample(FOUR_PAGES), "report.docx")


@needs_samples
def test_encrypted_pdf_is_rejected() -> None:
    message = rejected(sample(ENCRYPTED), "secret.pdf")
    assert message == "This PDF is encrypted: remove its password and upload it again."


@needs_samples
def test_damaged_pdf_is_rejected() -> None:
    data = sample(FOUR_PAGES)
    for cut in (len(data) // 2, 2000, 200):
        assert "damaged" in rejected(data[:cut], "cut.pdf")


@needs_samples
@pytest.mark.parametrize("path", SCANNED)
def test_pdf_without_text_layer_is_rejected(path: str) -> None:
    message = rejected(sample(path), "scan.pdf")
    assert message == (
        "No text found in this PDF; scanned PDFs need OCR, which ResolveAI does not do yet."
    )


def test_encrypted_office_file_is_rejected() -> None:
    # Word, Excel and PowerPoint save a password-protected file as an OLE2 container, whatever
    # its extension.
    message = rejected(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504), "secret.docx")
    assert "password" in message and ".doc" in message


@pytest.mark.parametrize(("name", "part"), [("bomb.docx", "word/document.xml"),
                                            ("bomb.xlsx", "xl/workbook.xml")])  # fmt: skip
def test_zip_bomb_is_rejected_before_parsing(name: str, part: str) -> None:
    bomb = zip_bomb(part, MAX_UNCOMPRESSED_BYTES + (8 << 20))
    assert len(bomb) < 2 << 20
    started = time.monotonic()
    message = rejected(bomb, name)
    assert time.monotonic() - started < 1, "the archive was inflated before being refused"
    assert "too large once unpacked" in message


def test_highly_compressed_archive_is_rejected() -> None:
    # 60 MB of spaces: under the size cap, but ~1000x compression is no office document.
    message = rejected(zip_bomb("word/document.xml", 60 << 20), "bomb.docx")
    assert "compressed" in message


def billion_laughs(data: bytes, part: str, text: bytes) -> bytes:
    """The Office file `data` with `part` given a DTD whose entity &lol9; is 10⁹ "lol"s, used
    in front of `text`."""
    entities = '<!ENTITY lol0 "lol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    )
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            content = source.read(item)
            if item.filename == part:
                body = re.sub(rb"^<\?xml[^>]*\?>\s*", b"", content)
                root = re.match(rb"<([\w:]+)", body)
                assert root and text in body
                doctype = f"<!DOCTYPE {root.group(1).decode()} [{entities}]>".encode()
                content = doctype + body.replace(text, b"&lol9;" + text, 1)
            archive.writestr(item, content)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "make", "part", "text"),
    [
        ("laughs.docx", make_docx, "word/document.xml", b"Revenue grew"),
        ("laughs.pptx", make_pptx, "ppt/slides/slide1.xml", b"Ship in March"),
        ("laughs.xlsx", make_xlsx, "xl/sharedStrings.xml", b"Tea"),
    ],
)
def test_xml_entity_bomb_is_not_expanded(
    name: str, make: Callable[[], bytes], part: str, text: bytes
) -> None:
    # The XML parsers underneath (expat for mammoth, lxml for python-pptx and openpyxl) refuse
    # or skip the entities: whichever, the gigabyte never materialises.
    data = billion_laughs(make(), part, text)
    started = time.monotonic()
    try:
        converted = convert_document(data, name)
    except DocumentRejected as rejection:
        assert "could not be read" in str(rejection)
    else:
        assert len(text_of(converted)) < 10_000
    assert time.monotonic() - started < 30


def test_zip_member_larger_than_it_declares_is_rejected() -> None:
    # The document part inflates to 50 MB but the archive says 1,000 bytes: under every limit
    # as declared, and zipfile stops reading at the declared size, so the parser never gets more.
    source = zipfile.ZipFile(io.BytesIO(make_docx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                archive.writestr(item, source.read(item))
        archive.writestr("word/document.xml", b" " * (50 << 20))
    data = bytearray(out.getvalue())
    name = b"word/document.xml"
    local = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo(name.decode()).header_offset
    central = data.rfind(name) - 46  # a central directory entry's fixed part is 46 bytes
    assert data[local : local + 4] == b"PK\x03\x04" and data[central : central + 4] == b"PK\x01\x02"
    struct.pack_into("<I", data, local + 22, 1000)  # uncompressed size, local header
    struct.pack_into("<I", data, central + 24, 1000)  # and central directory
    assert zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo(name.decode()).file_size == 1000
    started = time.monotonic()
    assert "damaged" in rejected(bytes(data), "liar.docx")
    assert time.monotonic() - started < 5


def test_truncated_office_file_is_rejected() -> None:
    data = make_docx()
    assert "damaged" in rejected(data[: len(data) // 2], "half.docx")


def test_huge_single_line_text_converts_in_bounded_time() -> None:
    data = b"word " * (4 << 20)  # 20 MiB, no newline
    started = time.monotonic()
    converted = convert_document(data, "one-line.txt")
    assert time.monotonic() - started < 5
    assert len(converted.pages) == 1 and len(converted.pages[0].markdown) == len(data)


@pytest.mark.parametrize("name", ["a.pdf", "a.docx", "a.pptx", "a.xlsx", "a.csv", "a.txt"])
def test_empty_file_is_rejected(name: str) -> None:
    assert rejected(b"", name) == "This file is empty."


@pytest.mark.parametrize("name", ["a.txt", "a.md", "a.csv", "a.html"])
def test_whitespace_only_file_is_rejected(name: str) -> None:
    assert "no text" in rejected(b" \n\r\n\t  \n", name)


# The conversion process -------------------------------------------------------------------------


@needs_samples
async def test_subprocess_gives_the_same_result() -> None:
    data = sample(FOUR_PAGES)
    assert await convert_in_subprocess(data, "paper.pdf") == convert_document(data, "paper.pdf")


@needs_samples
async def test_subprocess_passes_a_rejection_through() -> None:
    with pytest.raises(DocumentRejected, match=r"^This PDF is encrypted: remove its password"):
        await convert_in_subprocess(sample(ENCRYPTED), "secret.pdf")


async def test_subprocess_gives_the_same_result_for_office_files() -> None:
    data = make_xlsx()
    assert await convert_in_subprocess(data, "book.xlsx") == convert_document(data, "book.xlsx")


@needs_samples
async def test_subprocess_time_out_is_a_rejection() -> None:
    # 117 pages take the child well over 0.05 s (300-400 pages/s).
    started = time.monotonic()
    with pytest.raises(DocumentRejected, match=r"took longer than 0\.05 s"):
        await convert_in_subprocess(sample(GEOTOPO), "GeoTopo.pdf", timeout=0.05)
    assert time.monotonic() - started < 3


def conversion_children(memory_mb: int = 1024) -> list[psutil.Process]:
    """This process's live conversion children with that memory limit."""
    return [
        child
        for child in psutil.Process().children()
        if child.status() != psutil.STATUS_ZOMBIE
        and f"--memory-mb={memory_mb}" in child.cmdline()
        and "rag.conversion_process" in child.cmdline()
    ]


async def test_one_child_converts_file_after_file_and_a_crash_costs_only_its_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = await convert_in_subprocess(b"# One\n\nfirst file", "one.md")
    [child] = conversion_children()
    second = await convert_in_subprocess(b"second file", "two.txt")
    assert conversion_children() == [child]  # the same process: no start-up paid again
    assert (first.pages[0].markdown, second.pages[0].markdown) == (
        "# One\n\nfirst file", "second file",
    )  # fmt: skip
    monkeypatch.setenv("RESOLVEAI_CONVERT_FAULT", "crash")
    with pytest.raises(DocumentRejected, match="stopped unexpectedly"):
        await convert_in_subprocess(b"hello", "notes.txt")
    monkeypatch.delenv("RESOLVEAI_CONVERT_FAULT")
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    third = await convert_in_subprocess(b"third file", "three.txt")
    assert third.pages[0].markdown == "third file"
    [replacement] = conversion_children()
    assert replacement.pid != child.pid


async def test_a_child_is_replaced_after_its_quota_of_files(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conversion_process, "MAX_FILES", 2)
    pids = []
    for n in range(6):
        await convert_in_subprocess(f"file {n}".encode(), "n.txt")
        [child] = conversion_children()
        pids.append(child.pid)
    # Each child converts at most 2 files (the first may have had one before this test).
    assert max(pids.count(pid) for pid in pids) == 2 and len(set(pids)) in (3, 4)


async def test_subprocess_crash_is_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESOLVEAI_CONVERT_FAULT", "crash")
    with pytest.raises(DocumentRejected, match="stopped unexpectedly"):
        await convert_in_subprocess(b"hello", "notes.txt")


async def test_subprocess_memory_limit_is_a_rejection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESOLVEAI_CONVERT_FAULT", "memory")
    with pytest.raises(DocumentRejected, match="more than 300 MB of memory"):
        await convert_in_subprocess(b"hello", "notes.txt", memory_mb=300)


async def test_subprocess_hang_is_stopped_and_the_loop_keeps_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESOLVEAI_CONVERT_FAULT", "hang")
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    started = time.monotonic()
    with pytest.raises(DocumentRejected, match=r"took longer than 1\.5 s"):
        await convert_in_subprocess(b"hello", "notes.txt", timeout=1.5)
    elapsed = time.monotonic() - started
    task.cancel()
    assert 1.5 <= elapsed < 5
    # Blocked, the loop would not have ticked for the whole 1.5 s.
    assert max(b - a for a, b in itertools.pairwise(ticks)) < 0.5, "the event loop was blocked"


async def test_subprocess_cancelled_kills_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RESOLVEAI_CONVERT_FAULT", "hang")
    task = asyncio.create_task(convert_in_subprocess(b"hello", "notes.txt", timeout=30))
    await asyncio.sleep(1)
    [busy] = conversion_children()
    assert busy.cpu_percent(interval=0.3) > 50  # hanging on the file
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not busy.is_running() or busy.status() == psutil.STATUS_ZOMBIE
    assert conversion_children() == []
