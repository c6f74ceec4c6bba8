"""Large files: kept outside the context, summarized, and readable by id.

At ingest, a ``<file ...>...</file>`` block (as tools and hosts embed files in messages), or a
single tool output, larger than ``large_file_token_threshold`` is written to the files
directory as ``<conversation_id>/<file_id>.<ext>`` and recorded in ``large_files`` with a short
exploration summary (its structure and key sections). In the message's plain text — what is
searched, counted and summarized — it is replaced by a compact reference; the message's parts
keep the original, so the message still reads back exactly as ingested.

File ids are ``file_`` + 16 hex digits and are checked before any path is built; paths never
leave the files directory and symbolic links are not followed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
from pathlib import Path

from ..errors import LosslessError, NotFoundError, StoreError
from ..model import LargeFile, check_file_id
from ..tokens import estimate_tokens

__all__ = [
    "REFERENCE",
    "explore",
    "externalize",
    "file_path",
    "private_dirs",
    "read_file",
    "write_private",
]

#: What an externalized file's reference in a message's plain text starts with.
REFERENCE = re.compile(r"\[large file file_[0-9a-f]{16}: ")
_FILE_BLOCK = re.compile(r"<file(?P<attrs>\s[^>]*)?>(?P<body>.*?)</file>", re.S)
_ATTR = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)')""")
_EXT = re.compile(r"^[a-z0-9]{1,10}$")
EXPLORATION_TOKENS = 200


def file_id_for(conversation_id: int, content: str) -> str:
    """The id of *content* in a conversation (the same content always gets the same id)."""
    digest = hashlib.sha256(f"{conversation_id}\0".encode() + _bytes(content)).hexdigest()
    return "file_" + digest[:16]


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _extension(name: str | None) -> str:
    if name and "." in name:
        ext = name.rsplit(".", 1)[1].lower()
        if _EXT.match(ext):
            return ext
    return "txt"


def file_path(files_dir: Path, conversation_id: int, file_id: str, ext: str) -> Path:
    """Where a file is stored; refuses anything that would leave *files_dir*."""
    check_file_id(file_id)
    if not _EXT.match(ext) or not isinstance(conversation_id, int) or conversation_id < 0:
        raise LosslessError(f"refusing an unsafe file location ({conversation_id}, {ext!r})")
    root = files_dir.resolve()
    path = root / str(conversation_id) / f"{file_id}.{ext}"
    if not path.resolve().is_relative_to(root):
        raise LosslessError(f"refusing a file path outside {root}")
    return path


def private_dirs(folder: Path) -> None:
    """Make *folder* and each missing folder above it owner-only (``mkdir(parents=True)``
    would give the ones above it the default mode, readable by everyone)."""
    missing = []
    current = folder
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for made in reversed(missing):
        made.mkdir(mode=0o700, exist_ok=True)


def write_private(path: Path, data: bytes) -> bool:
    """Write atomically, owner-only, without following a symbolic link at the target.

    Returns whether the file was created (False: the same content was already there). A write
    that fails — a full disk, a quota — leaves no partial file behind and is a
    :class:`StoreError` that says what to do.
    """
    private_dirs(path.parent)
    if path.parent.is_symlink():
        raise LosslessError(f"refusing to write through the symbolic link {path.parent}")
    if path.exists() and not path.is_symlink():
        return False  # same id, same content: already written
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _write_error(path, len(data), exc) from exc
    return True


def _write_error(path: Path, size: int, exc: OSError) -> StoreError:
    why = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        advice = "free disk space (or raise the quota) and run the same command again"
    else:
        advice = f"check that {path.parent} is writable and run the same command again"
    return StoreError(
        f"cannot write a large file of {size:,} bytes to {path.parent}: {why}; nothing of "
        f"this batch was stored — {advice}"
    )


def _existing(path: Path) -> Path:
    """The stored file holding the same content as *path* under another extension, if any
    (the same content arriving as ``a.py`` and ``a.txt`` is stored once)."""
    if path.exists() or not path.parent.is_dir():
        return path
    for other in sorted(path.parent.glob(f"{path.stem}.*")):
        if other.is_file() and not other.is_symlink() and _EXT.match(other.suffix[1:]):
            return other
    return path


def read_file(files_dir: Path, record: LargeFile) -> str:
    """The stored content of a large file (never through a symbolic link)."""
    check_file_id(record.file_id)
    root = files_dir.resolve()
    path = (root / record.storage_path).resolve()
    if not path.is_relative_to(root) or path.stem != record.file_id:
        raise LosslessError(f"refusing to read {record.storage_path}: outside {root}")
    try:
        fd = os.open(root / record.storage_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise NotFoundError(
            f"the content of {record.file_id} is missing from {root} ({exc.strerror}); "
            "the message that embedded it still holds the original"
        ) from exc
    with os.fdopen(fd, "rb") as handle:
        return handle.read().decode("utf-8", "surrogatepass")


# --- exploration summaries -----------------------------------------------------------------

_DEFS = re.compile(
    r"^\s*(?:export\s+)?(?:async\s+)?(?:def|class|function|func|fn|interface|struct|enum|"
    r"impl|module|package|public\s+(?:class|interface)|type)\s+([A-Za-z_][\w.]*)",
    re.M,
)
_HEADING = re.compile(r"^(#{1,4})\s+(.+)$", re.M)
_JSON_KEY = re.compile(r'^\s{0,4}"([^"]{1,60})"\s*:', re.M)


def explore(name: str | None, content: str, *, budget: int = EXPLORATION_TOKENS) -> str:
    """A short, deterministic structural summary of a file."""
    lines = content.splitlines()
    tokens = estimate_tokens(content)
    size = len(_bytes(content))
    head = f"{name or 'unnamed file'}: {len(lines):,} lines, {size:,} bytes, ~{tokens:,} tokens."
    parts = [head]
    defs = list(dict.fromkeys(_DEFS.findall(content)))
    headings = [h[1].strip() for h in _HEADING.findall(content)]
    keys = list(dict.fromkeys(_JSON_KEY.findall(content)))
    if defs:
        parts.append("Defines: " + ", ".join(defs[:25]) + (" …" if len(defs) > 25 else "") + ".")
    if headings:
        parts.append(
            "Sections: " + "; ".join(headings[:15]) + (" …" if len(headings) > 15 else "") + "."
        )
    if keys and not defs:
        parts.append("Keys: " + ", ".join(keys[:20]) + ".")
    if "," in (lines[0] if lines else "") and (name or "").endswith((".csv", ".tsv")):
        parts.append(f"Columns: {lines[0][:200]}; {len(lines) - 1:,} rows.")
    first = [ln.strip() for ln in lines if ln.strip()][:3]
    if first:
        parts.append("Starts: " + " / ".join(s[:100] for s in first))
    last = next((ln.strip() for ln in reversed(lines) if ln.strip()), "")
    if last and last not in first:
        parts.append("Ends: " + last[:100])
    text = " ".join(parts)
    while estimate_tokens(text) > budget and len(parts) > 1:
        parts.pop()
        text = " ".join(parts)
    return text


def reference(record: LargeFile) -> str:
    """What stands in the message's plain text for an externalized file."""
    return (
        f"[large file {record.file_id}: {record.file_name or 'unnamed'}, "
        f"~{record.token_count:,} tokens, kept outside the context — read it with "
        f"lcm_describe {record.file_id}]\n{record.exploration_summary}"
    )


# --- externalization -----------------------------------------------------------------------


def externalize(
    text: str,
    *,
    conversation_id: int,
    files_dir: Path,
    threshold: int,
    whole: bool = False,
    name: str | None = None,
    created: list[Path] | None = None,
) -> tuple[str, list[LargeFile]]:
    """Store the large files in *text*; return the text with references, and the records.

    With ``whole=True`` the entire text is one file (a single large tool output). The files
    this call writes for the first time are appended to *created* (so a caller whose
    transaction fails can take them back).
    """
    records: list[LargeFile] = []

    def store(body: str, file_name: str | None, mime: str | None) -> LargeFile:
        fid = file_id_for(conversation_id, body)
        ext = _extension(file_name)
        path = _existing(file_path(files_dir, conversation_id, fid, ext))
        data = _bytes(body)
        if write_private(path, data) and created is not None:
            created.append(path)
        record = LargeFile(
            file_id=fid,
            conversation_id=conversation_id,
            file_name=file_name,
            mime_type=mime,
            byte_size=len(data),
            token_count=estimate_tokens(body),
            sha256=hashlib.sha256(data).hexdigest(),
            storage_path=str(path.relative_to(files_dir.resolve())),
            exploration_summary=explore(file_name, body),
        )
        records.append(record)
        return record

    if whole:
        if estimate_tokens(text) <= threshold:
            return text, []
        return reference(store(text, name, None)), records

    def replace(match: re.Match[str]) -> str:
        body = match.group("body")
        if estimate_tokens(body) <= threshold:
            return match.group(0)
        attrs = {
            m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
            for m in _ATTR.finditer(match.group("attrs") or "")
        }
        file_name = attrs.get("name") or attrs.get("path") or attrs.get("filename")
        return reference(store(body, file_name, attrs.get("type") or attrs.get("mime")))

    if "<file" not in text:
        return text, []
    return _FILE_BLOCK.sub(replace, text), records
