"""Subjects: the model and data a falsifier drives.

A contract names its subjects with plain slugs (`subjects: [tiny-trained]`); each fills the
check parameter `[tool.pv] subject_param`, and the project's checks resolve the name. pv knows
nothing of what a name means.

A user can also point pv at a checkpoint of their own: `pv run --subject-path DIR` runs the
selected subject-taking falsifiers with the subject `path:<absolute dir>`; the check receives the
absolute directory as its subject parameter. Such an *ad-hoc* subject is identified by its path
and a digest of the directory (`checkpoint_digest`), so another checkpoint written to the same
path is another subject. Ad-hoc subjects never count toward a contract's required cells; the
dashboard shows them in their own section.

The directory must be a Hugging Face checkpoint: a directory with a `config.json`. The digest
covers config.json's bytes and the header of every `*.safetensors` file (tensor names, dtypes,
shapes and offsets: a different set of weights has a different header in practice, and the
header is read without reading gigabytes of weights); other weight files (`*.bin`, `*.pt`) enter
by name and size.
"""

from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path

PATH_PREFIX = "path:"
CONFIG = "config.json"
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on a header


class SubjectError(Exception):
    """A subject given by path cannot be used (a usage error: exit 2)."""


def is_path_subject(subject: str | None) -> bool:
    return isinstance(subject, str) and subject.startswith(PATH_PREFIX)


def param_value(subject: str) -> str:
    """What the check receives for `subject`: the directory of a path subject, else the name."""
    return subject[len(PATH_PREFIX):] if is_path_subject(subject) else subject


@dataclass(frozen=True)
class PathSubject:
    directory: Path  # absolute
    digest: str  # sha256 of the checkpoint's config and weight headers

    @property
    def name(self) -> str:
        return f"{PATH_PREFIX}{self.directory}"


def path_subject(given: str | Path) -> PathSubject:
    """The ad-hoc subject of a checkpoint directory. Raises SubjectError naming the path and
    what is wrong with it."""
    text = str(given)
    if text.startswith(PATH_PREFIX):
        text = text[len(PATH_PREFIX):]
    if not text:
        raise SubjectError("the checkpoint path is empty; give the directory of an HF checkpoint")
    directory = Path(text).expanduser().absolute()
    if not directory.exists():
        raise SubjectError(f"{directory}: no such directory; give the directory of an HF checkpoint "
                           f"(the one holding {CONFIG})")
    if not directory.is_dir():
        raise SubjectError(f"{directory}: not a directory; give the directory of an HF checkpoint "
                           f"(the one holding {CONFIG}), not a file in it")
    if not (directory / CONFIG).is_file():
        raise SubjectError(f"{directory}: has no {CONFIG}, so it is not an HF checkpoint directory "
                           f"(save it with `model.save_pretrained(dir)`)")
    return PathSubject(directory.resolve(), checkpoint_digest(directory))


def _safetensors_header(path: Path) -> bytes:
    with open(path, "rb") as handle:
        raw = handle.read(8)
        if len(raw) < 8:
            raise SubjectError(f"{path}: too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise SubjectError(f"{path}: header length {length} is over {MAX_HEADER}; not a safetensors file")
        header = handle.read(length)
        if len(header) != length:
            raise SubjectError(f"{path}: truncated safetensors header")
        return header


def checkpoint_digest(directory: Path) -> str:
    """sha256 over config.json, every *.safetensors header, and the names and sizes of other
    weight files, in name order."""
    digest = hashlib.sha256()
    try:
        digest.update(b"config.json\0" + (directory / CONFIG).read_bytes() + b"\0")
        for path in sorted(directory.iterdir(), key=lambda p: p.name):
            if path.suffix == ".safetensors" and path.is_file():
                digest.update(path.name.encode() + b"\0" + _safetensors_header(path) + b"\0")
            elif path.suffix in (".bin", ".pt", ".pth") and path.is_file():
                digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
    except OSError as exc:
        raise SubjectError(f"{directory}: cannot read the checkpoint ({exc.strerror or exc})") from None
    return digest.hexdigest()


def subject_option(subject: str | None, subject_path: str | None, stale: bool) -> str | None:
    """The subject to pass the plugin: a declared name (--subject), or `path:<abs dir>` of a
    checked checkpoint directory (--subject-path). Bad input is a usage error naming the path.
    (pv run's options, here so that the verb's module holds wiring only.)"""
    import click

    from pv.schema import SUBJECT_PATTERN

    if subject is not None and subject_path is not None:
        raise click.UsageError("--subject and --subject-path exclude each other")
    if subject is not None and not re.fullmatch(SUBJECT_PATTERN, subject):
        hint = "; for a checkpoint directory use --subject-path DIR" if "/" in subject or is_path_subject(
            subject) else ""
        raise click.UsageError(f"--subject {subject!r} is not a subject name (a plain slug like tiny-trained){hint}")
    if subject_path is None:
        return subject
    if stale:
        raise click.UsageError("--subject-path runs your checkpoint; it excludes --stale")
    try:
        return path_subject(subject_path).name
    except SubjectError as exc:
        raise click.UsageError(f"--subject-path: {exc}") from None
