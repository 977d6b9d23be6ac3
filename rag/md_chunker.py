"""Web pages (Markdown) → clean chunks that each fit the embedding model whole.

A search round reads a handful of pages; each is cleaned, split by headings, and sections over the
token budget are split again with an overlap. Every chunk starts with a one-line header naming its
page and section, so a chunk read on its own (by the ranker, the judge, the answer writer) still
says where it comes from:

    [Page: Steam engine | Section: History > Early engines]
    The first commercially successful engine ...

**The budget includes the header and the model's special tokens**: `count_tokens(chunk.text) <=
budget` holds for every chunk (checked with the caller's tokenizer, with a hard fallback split), and
`budget_for(embedder)` never exceeds the model's maximum sequence length, so nothing is silently cut
off when a chunk is embedded.

Cleaning (outside fenced code blocks; heuristics, each one a rule below so it can be tested):
- images (`![alt](src)`, `<img>`) are removed; `[text](url)` and `[text][ref]` become `text`;
  link reference definitions, bare URLs, autolinks, HTML tags/comments/scripts and footnote markers
  like `[12]` or `[edit]` are dropped; HTML entities are decoded;
- navigation: a line that was nothing but links (menu items, "* [Home](/)", "[About](/a) |
  [Blog](/b)") and breadcrumb lines ("Home › News › Science": three or more parts of at most three
  words) are dropped. Table rows and headings are never treated as navigation;
- boilerplate: cookie banners (a line of at most 80 words that mentions cookies together with
  consent/accept/agree/browsing/experience/preferences/policy), newsletter boxes (at most 40 words,
  "newsletter", or "subscribe"/"sign up" together with email/inbox/updates), copyright footers (at
  most 20 words with ©/"copyright"/"all rights reserved"), and short interface lines (at most 6
  words) such as "Sign in", "Subscribe", "Share on Facebook", "Skip to content", "Read more",
  "Advertisement". Longer lines are kept even if they use these words: "Click Sign in at the top
  right, then choose your account" is content;
- tiny fragments: lines with no letter or digit (separators, stray bullets) and horizontal rules
  are dropped; setext headings (a line underlined with === or ---) become `#`/`##` headings.

Splitting: `MarkdownHeaderTextSplitter` on `#` to `####` (blocks kept apart so paragraph breaks
survive), then `RecursiveCharacterTextSplitter` for sections over the budget, splitting at
paragraphs, lines, sentences, clauses and words in that order, with `OVERLAP_TOKENS` of overlap,
lengths counted with the caller's tokenizer. A section's last piece is rebalanced when it would be
tiny. Pieces under `MIN_PIECE_TOKENS` are merged into a neighbour (same section first; a piece
from another section keeps its own `[Section: …]` line), or, when no neighbour has room, kept if
they hold a digit (prices, dates, versions) and dropped otherwise.

Known limits: code blocks lose their indentation (the header splitter strips lines); a table split
across chunks does not repeat its header row.

Chunking is CPU work (tokenizer calls): run it off the event loop (`asyncio.to_thread`).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter

from rag.search_providers import SearchResult

if TYPE_CHECKING:
    from rag.embedder import Embedder

# MiniLM reads 256 tokens per text, special tokens included. Every chunk fits it whole.
DEFAULT_BUDGET = 256
# Below this a budget leaves no room for text once the header is in.
MIN_BUDGET = 64
# Overlap between consecutive pieces of one long section, in tokens. The splitter overlaps whole
# splits only (sentences, clauses), so paragraphs that are cut apart at a paragraph break don't
# repeat; a sentence cut off mid-thought at a piece boundary does.
OVERLAP_TOKENS = 32
# Pieces smaller than this (text tokens, header excluded) carry too little to rank or cite alone.
MIN_PIECE_TOKENS = 50
# Headers are capped so a 300-character page title can't eat the budget.
MAX_TITLE_CHARS = 100
MAX_SECTION_CHARS = 100
NO_SECTION = "top of page"

HEADINGS = [("#", "h1"), ("##", "h2"), ("###", "h3"), ("####", "h4")]
# Split long text at paragraphs, then lines, sentences, clauses, words, characters.
SEPARATORS = ["\n\n", "\n", ". ", "? ", "! ", "; ", ", ", " ", ""]


@dataclass
class Chunk:
    """One piece of one page, header line included in `text`."""

    text: str
    url: str
    title: str
    heading_path: str  # "History > Early engines"; NO_SECTION for text before the first heading
    token_count: int  # count_tokens(text), special tokens included
    source_index: int  # the page's position in the search results given to chunk_pages (0-based)

    @property
    def body(self) -> str:
        """The text without the header line."""
        return self.text.split("\n", 1)[1] if "\n" in self.text else ""


def budget_for(embedder: Embedder) -> int:
    """The largest budget the embedder reads whole: its max sequence length minus the document
    prefix some models add (e5's "passage: "), capped at DEFAULT_BUDGET."""
    prefix_tokens = embedder.count_tokens(embedder.document_prefix) - embedder.count_tokens("")
    return min(DEFAULT_BUDGET, embedder.max_seq_length - prefix_tokens)


# --- cleaning --------------------------------------------------------------------------------

_DOTALL = re.DOTALL | re.IGNORECASE
# Elements whose content is never page text: code, styling, menus, forms, embeds.
_SCRIPT = re.compile(
    r"<(script|style|noscript|nav|footer|form|button|select|svg|iframe|template)\b.*?</\1\s*>",
    _DOTALL,
)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FENCE = re.compile(r"^\s*(```|~~~)")
# A link target may hold one level of parentheses (Wikipedia: /wiki/Mercury_(planet)).
_TARGET = r"\((?:[^()\n]|\([^()\n]*\))*\)"
_IMAGE = re.compile(r"!\[[^\]\n]*\](?:" + _TARGET + r"|\[[^\]\n]*\])")
_HTML_IMAGE = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
_LINK = re.compile(r"\[([^\[\]\n]*)\]" + _TARGET)
_REF_LINK = re.compile(r"\[([^\[\]\n]+)\]\[[^\]\n]*\]")
_REF_DEFINITION = re.compile(r"^\s{0,3}\[[^\]\n]+\]:\s*\S+.*$")
_AUTOLINK = re.compile(r"<(?:https?|ftp|mailto):[^>\s]*>", re.IGNORECASE)
_BARE_URL = re.compile(r"(?:\bhttps?://|\bwww\.)[^\s<>()\[\]]+", re.IGNORECASE)
# Only real HTML tag names: "<Uyless Black, X.25 and Related Protocols>" in a page is text.
_TAG_NAMES = (
    "a|abbr|article|aside|b|bdi|bdo|big|blockquote|body|br|caption|center|cite|code|col|colgroup|"
    "dd|del|details|dfn|div|dl|dt|em|figcaption|figure|font|h[1-6]|head|header|hr|html|i|input|"
    "ins|kbd|label|li|link|main|mark|meta|ol|p|picture|pre|q|s|samp|section|small|source|span|"
    "strike|strong|sub|summary|sup|table|tbody|td|tfoot|th|thead|time|tr|tt|u|ul|var|video|wbr"
)
_TAG = re.compile(r"</?(?:" + _TAG_NAMES + r")\b(?:\s[^<>]*)?/?>", re.IGNORECASE)
# Wikipedia-style markers; the worded ones go before reference links are resolved, so
# "[citation needed][12]" is not read as a link called "citation needed".
_MARKER = re.compile(r"\[(?:edit|citation needed|update|clarification needed|when\?|who\?)\]")
_FOOTNOTE = re.compile(r"\[(?:\d{1,3}|[a-z])\]")
_EMPTY_LINK = re.compile(r"\[\s*\]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_WORD = re.compile(r"[^\W_]+")  # letters and digits
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
_SETEXT = re.compile(r"^\s*(=+|-+)\s*$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_BREADCRUMB_SPLIT = re.compile(r"\s+[›»>|/·•]\s+")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")

_COOKIE = re.compile(r"\bcookies?\b", re.IGNORECASE)
_COOKIE_CONTEXT = re.compile(
    r"\b(consent|accept|agree|browsing|experience|preferences|policy|settings)\b", re.IGNORECASE
)
_NEWSLETTER = re.compile(r"\bnewsletters?\b", re.IGNORECASE)
_SUBSCRIBE = re.compile(r"\b(subscribe|sign up)\b", re.IGNORECASE)
_SUBSCRIBE_CONTEXT = re.compile(r"\b(e-?mail|inbox|updates)\b", re.IGNORECASE)
_COPYRIGHT = re.compile(r"©|\bcopyright\b|\ball rights reserved\b", re.IGNORECASE)
_UI_PHRASE = re.compile(
    r"\b(sign (in|up|out)|log ?(in|out)|register|subscribe|share|tweet|pin it|follow us|"
    r"skip to|jump to|back to top|read more|continue reading|see more|show more|load more|"
    r"advertisement|sponsored|menu|toggle navigation|main navigation|copy link|print|"
    r"email this|facebook|twitter|linkedin|whatsapp|pinterest|reddit|accept all|reject all|"
    r"manage (preferences|settings)|privacy policy|terms of (use|service)|loading)\b",
    re.IGNORECASE,
)

MAX_COOKIE_WORDS = 80
MAX_NEWSLETTER_WORDS = 40
MAX_COPYRIGHT_WORDS = 20
MAX_UI_WORDS = 6


def _words(text: str) -> int:
    return len(_WORD.findall(text))


def _is_navigation(raw: str, cleaned: str) -> bool:
    """A line that was only links (menus, link lists), or a breadcrumb trail."""
    stripped = raw.strip()
    if stripped.startswith(("|", "#")):
        return False  # table rows and headings are content
    if _LINK.search(raw) or _REF_LINK.search(raw):
        without_links = _REF_LINK.sub("", _LINK.sub("", raw))
        if _words(_BULLET.sub("", without_links)) == 0:
            return True
    parts = [p for p in _BREADCRUMB_SPLIT.split(cleaned.strip()) if p.strip()]
    return len(parts) >= 3 and all(_words(p) <= 3 for p in parts) and _words(cleaned) <= 15


def _is_boilerplate(line: str) -> bool:
    words = _words(line)
    if _COOKIE.search(line) and _COOKIE_CONTEXT.search(line) and words <= MAX_COOKIE_WORDS:
        return True
    if words <= MAX_NEWSLETTER_WORDS and (
        _NEWSLETTER.search(line) or (_SUBSCRIBE.search(line) and _SUBSCRIBE_CONTEXT.search(line))
    ):
        return True
    if _COPYRIGHT.search(line) and words <= MAX_COPYRIGHT_WORDS:
        return True
    return words <= MAX_UI_WORDS and bool(_UI_PHRASE.search(line))


def _clean_inline(line: str) -> str:
    line = _HTML_IMAGE.sub("", _IMAGE.sub("", line))
    line = _LINK.sub(r"\1", line)
    line = _MARKER.sub("", line)
    line = _REF_LINK.sub(r"\1", line)
    line = _AUTOLINK.sub("", line)
    line = _BARE_URL.sub("", line)
    line = _TAG.sub("", line)
    line = html.unescape(line)
    line = _FOOTNOTE.sub("", line)
    line = _EMPTY_LINK.sub("", line)
    return _SPACES.sub(" ", line).strip()


def clean_markdown(markdown: str) -> str:
    """The page's Markdown without images, link targets, HTML and boilerplate (see module doc)."""
    text = _COMMENT.sub("", _SCRIPT.sub("", markdown.replace("\r\n", "\n").replace("\r", "\n")))
    out: list[str] = []
    fence: str | None = None
    for raw in text.split("\n"):
        opening = _FENCE.match(raw)
        if fence is not None:  # inside a code block: keep verbatim until the closing fence
            out.append(raw.rstrip())
            if opening and opening.group(1) == fence:
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            out.append(raw.strip())
            continue
        if not raw.strip():
            out.append("")
            continue
        if _SETEXT.match(raw) and out and out[-1] and not out[-1].startswith(("#", "|")):
            # "Title\n=====" is a heading the header splitter wouldn't see
            level = "#" if raw.strip().startswith("=") else "##"
            out[-1] = f"{level} {out[-1]}"
            continue
        if _REF_DEFINITION.match(raw) or _RULE.match(raw):
            continue
        line = _clean_inline(raw)
        heading = _HEADING.match(line)
        if heading:
            if heading.group(2).strip(" #"):  # a heading left empty by cleaning is dropped
                out.append(f"{heading.group(1)} {heading.group(2).strip(' #')}")
            continue
        if _TABLE_SEPARATOR.match(line) and "|" in line:
            out.append(line)
            continue
        if not _WORD.search(line) or _is_navigation(raw, line) or _is_boilerplate(line):
            continue
        out.append(line)
    cleaned = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", cleaned).strip()


# --- splitting -------------------------------------------------------------------------------


def _one_line(text: str, limit: int) -> str:
    text = _SPACES.sub(" ", text.replace("\n", " ").replace("[", "(").replace("]", ")")).strip()
    text = text.replace("|", "/")  # the header uses | as its own separator
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def chunk_header(title: str, heading_path: str) -> str:
    return (
        f"[Page: {_one_line(title, MAX_TITLE_CHARS)} | "
        f"Section: {_one_line(heading_path, MAX_SECTION_CHARS)}]"
    )


@dataclass
class _Section:
    path: str
    text: str


@dataclass
class _Piece:
    """Text destined for one chunk: one or more (section path, text) parts."""

    parts: list[tuple[str, str]] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.parts[0][0]

    def body(self) -> str:
        lines: list[str] = []
        previous = self.parts[0][0]
        for path, text in self.parts:
            if path != previous:
                lines.append(f"[Section: {_one_line(path, MAX_SECTION_CHARS)}]\n{text}")
            else:
                lines.append(text)
            previous = path
        return "\n\n".join(lines)


def _sections(cleaned: str) -> list[_Section]:
    """Heading-delimited sections, paragraph breaks kept (blocks joined with blank lines)."""
    splitter = MarkdownHeaderTextSplitter(HEADINGS, return_each_line=True, strip_headers=True)
    sections: list[_Section] = []
    for block in splitter.split_text(cleaned):
        meta = block.metadata
        path = " > ".join(meta[key] for _, key in HEADINGS if meta.get(key)) or NO_SECTION
        if sections and sections[-1].path == path:
            sections[-1].text += "\n\n" + block.page_content
        else:
            sections.append(_Section(path, block.page_content))
    return sections


class _Counter:
    """Token counts, memoized: the splitter and the merge step measure the same text repeatedly,
    and tokenizing is most of the chunker's time."""

    def __init__(self, count_tokens: Callable[[str], int]) -> None:
        self._count_tokens = count_tokens
        self.special = count_tokens("")  # [CLS] + [SEP] for BERT-style models
        self._cache: dict[str, int] = {}

    def tokens(self, text: str) -> int:
        """Tokens of `text` as model input, special tokens included (the caller's count)."""
        cached = self._cache.get(text)
        if cached is None:
            cached = self._cache[text] = self._count_tokens(text)
        return cached

    def text_tokens(self, text: str) -> int:
        """Tokens of `text` without the special tokens (additive across whitespace)."""
        return self.tokens(text) - self.special


def _split(text: str, size: int, counter: _Counter) -> list[str]:
    splitter = RecursiveCharacterTextSplitter(
        separators=SEPARATORS,
        keep_separator="end",
        chunk_size=size,
        chunk_overlap=min(OVERLAP_TOKENS, size // 4),
        length_function=counter.text_tokens,
    )
    return [piece for piece in splitter.split_text(text) if piece.strip()]


def _split_section(text: str, room: int, counter: _Counter) -> list[str]:
    """`text` in pieces of at most `room` tokens (approximately: checked again later)."""
    # No count of the whole section first: the splitter measures its paragraphs anyway and
    # returns a section that fits as one piece, so one tokenizer pass is saved.
    pieces = _split(text, room, counter)
    if len(pieces) > 1 and counter.text_tokens(pieces[-1]) < MIN_PIECE_TOKENS:
        # A tiny tail would be merged or dropped later: re-split to even sizes instead.
        total = counter.text_tokens(text)
        even = math.ceil(total / len(pieces)) + OVERLAP_TOKENS
        if even < room:
            balanced = _split(text, even, counter)
            if min(counter.text_tokens(p) for p in balanced) >= MIN_PIECE_TOKENS:
                pieces = balanced
    return pieces


def _hard_split(body: str, room: int, counter: _Counter) -> list[str]:
    """Last resort: the longest prefixes (by characters) that fit, found by bisection."""
    pieces = []
    while body:
        if counter.text_tokens(body) <= room:
            pieces.append(body)
            break
        low, high = 1, len(body)
        while low < high:  # the longest prefix that fits
            middle = (low + high + 1) // 2
            if counter.text_tokens(body[:middle]) <= room:
                low = middle
            else:
                high = middle - 1
        cut = body.rfind(" ", 0, low)
        cut = cut if cut > low // 2 else low
        pieces.append(body[:cut].strip())
        body = body[cut:].strip()
    return [p for p in pieces if p]


def _has_digit(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def chunk_page(
    result: SearchResult,
    source_index: int,
    count_tokens: Callable[[str], int],
    budget: int = DEFAULT_BUDGET,
    keep_small: bool = False,
) -> list[Chunk]:
    """Clean one page and cut it into chunks of at most `budget` tokens each (header and special
    tokens included, as counted by `count_tokens`). `keep_small`: a short piece that cannot be
    merged is kept even without a digit (a user's own short file is content, not page chrome)."""
    if budget < MIN_BUDGET:
        raise ValueError(f"chunk budget {budget} is too small (at least {MIN_BUDGET} tokens)")
    counter = _Counter(count_tokens)
    title = result.title.strip() or result.url

    def render(piece: _Piece) -> str:
        return chunk_header(title, piece.path) + "\n" + piece.body()

    def fits(piece: _Piece) -> bool:
        return counter.tokens(render(piece)) <= budget

    def room_for(path: str) -> int:
        # header + "\n" + text: BERT-style tokens add up across the newline
        return budget - counter.tokens(chunk_header(title, path))

    def fitted(path: str, text: str) -> list[_Piece]:
        """`text` as pieces that fit with their header, verified with the real count."""
        piece = _Piece([(path, text)])
        if fits(piece):
            return [piece]
        # The splitter's sums are approximate (tokens don't always add up across a cut):
        # never trust them blindly, cut tighter until every piece fits.
        room = room_for(path)
        for slack in (2, 8, 32, room // 2):
            parts = [_Piece([(path, part)]) for part in _hard_split(text, room - slack, counter)]
            if all(fits(p) for p in parts):
                return parts
        raise ValueError(f"cannot fit text into a {budget}-token chunk")  # pathological tokenizer

    pieces: list[_Piece] = []
    for section in _sections(clean_markdown(result.content)):
        for text in _split_section(section.text, room_for(section.path), counter):
            pieces.extend(fitted(section.path, text))

    chunks = []
    for piece in _merge_small(pieces, fits, counter, keep_small):
        text = render(piece)
        tokens = counter.tokens(text)  # measured when its fit was checked
        chunks.append(Chunk(text, result.url, title, piece.path, tokens, source_index))
    return chunks


def _merge_small(
    pieces: list[_Piece],
    fits: Callable[[_Piece], bool],
    counter: _Counter,
    keep_small: bool = False,
) -> list[_Piece]:
    """Merge pieces under MIN_PIECE_TOKENS into a neighbour (same section first); keep the ones
    that can't be merged only if they hold a digit (or always, with `keep_small`)."""
    out: list[_Piece] = []
    pending = list(pieces)
    for i, piece in enumerate(pending):
        if counter.text_tokens(piece.body()) >= MIN_PIECE_TOKENS:
            out.append(piece)
            continue
        following = pending[i + 1] if i + 1 < len(pending) else None
        before = _Piece(out[-1].parts + piece.parts) if out else None
        after = _Piece(piece.parts + following.parts) if following else None
        same_before = before is not None and out[-1].parts[-1][0] == piece.parts[-1][0]
        same_after = following is not None and following.path == piece.parts[-1][0]
        options = [
            ("before", before, same_before),
            ("after", after, same_after),
            ("before", before, not same_before),
            ("after", after, not same_after),
        ]
        for where, candidate, allowed in options:
            if candidate is not None and allowed and fits(candidate):
                if where == "before":
                    out[-1] = candidate
                else:
                    pending[i + 1] = candidate
                break
        else:
            if keep_small or _has_digit(piece.body()):
                out.append(piece)
    return out


def chunk_pages(
    results: Sequence[SearchResult],
    count_tokens: Callable[[str], int],
    budget: int = DEFAULT_BUDGET,
    keep_small: bool = False,
) -> list[Chunk]:
    """All pages' chunks, in page order; `source_index` is the page's index in `results`
    (`keep_small` as for `chunk_page`)."""
    chunks: list[Chunk] = []
    for index, result in enumerate(results):
        chunks.extend(chunk_page(result, index, count_tokens, budget, keep_small))
    return chunks
