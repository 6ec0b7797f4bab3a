"""Datasets as files: `<TARRY_DATASETS_DIR>/NAME/N.runs.jsonl` beside `N.json`, its
manifest, owner-only (directories 0700, files 0400: they hold conversations in plain text).

A version's points are stored run by run, one line each (`RunLine`): the run's
conversation once, and its points, each of which names how many of its messages came
before it (`StoredPoint.turns`) instead of holding a copy of them. A run's points share
one conversation, so a version takes about as many bytes as its runs' transcripts
rather than a transcript per point, which grew with the square of a long run's length.
A version is still read, exported and evaluated as whole `DecisionPoint`s: they are put
back together as they are read, one run at a time.

A version is held to caps (`DatasetLimits`, from `TARRY_DATASET_MAX_*`): its stored bytes
and points (`DATASET_TOO_LARGE`) and a dataset's versions (`DATASET_TOO_MANY_VERSIONS`),
checked as it is written, so an oversized selection stops at the cap and leaves nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import BaseModel, Field

from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode
from tarry.contracts.datasets import DatasetManifest, DecisionPoint
from tarry.contracts.messages import ChatMessage
from tarry.core.errors import TarryError

__all__ = [
    "NAME_RULE",
    "DatasetDraft",
    "DatasetLimits",
    "DatasetStore",
    "RunLine",
    "StoredPoint",
    "checked_name",
]

NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A dataset's name: it names a directory, so letters, digits, `_`, `.` and `-` only."""
PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o400
"""Owner-only: a version is never changed, so not even its owner writes it."""


def checked_name(name: str) -> str:
    """`name`, or `DATASET_INVALID` for one outside `NAME_RULE`."""
    if not NAME_RULE.fullmatch(name):
        raise TarryError(
            ErrorCode.DATASET_INVALID,
            f"{name!r} is no dataset name: 1 to 100 letters, digits, `_`, `.` or `-`,"
            " starting with a letter or digit",
        )
    return name


@dataclass(frozen=True)
class DatasetLimits:
    """The caps on a dataset (`TARRY_DATASET_MAX_BYTES`, `_POINTS`, `_VERSIONS`)."""

    max_bytes: int = TarrySettings.model_fields["tarry_dataset_max_bytes"].default
    max_points: int = TarrySettings.model_fields["tarry_dataset_max_points"].default
    max_versions: int = TarrySettings.model_fields["tarry_dataset_max_versions"].default

    @classmethod
    def of(cls, settings: TarrySettings) -> DatasetLimits:
        return cls(
            settings.tarry_dataset_max_bytes,
            settings.tarry_dataset_max_points,
            settings.tarry_dataset_max_versions,
        )


class StoredPoint(DecisionPoint):
    """A point as stored: its `messages` are the first `turns` of its run line's."""

    messages: list[ChatMessage] = Field(default=[], exclude=True)
    turns: int = Field(ge=0)


class RunLine(BaseModel):
    """One line of a stored version: a run's conversation, as a model is sent it, up to
    its last point, and the points that refer to it."""

    run_id: str
    messages: list[ChatMessage]
    points: list[StoredPoint]

    def continued_by(self, point: DecisionPoint) -> bool:
        """Whether `point` is of this run and its conversation begins as this one."""
        return point.run_id == self.run_id and _extends(self.messages, point.messages)

    def decision_points(self) -> Iterator[DecisionPoint]:
        """The line's points, whole: each with the messages that came before it (the
        same message objects, shared, not copies)."""
        for stored in self.points:
            fields = {k: v for k, v in stored if k not in ("messages", "turns")}
            yield DecisionPoint(**fields, messages=self.messages[: stored.turns])


def _extends(conversation: Sequence[ChatMessage], messages: Sequence[ChatMessage]) -> bool:
    """Whether one of the two is where the other begins."""
    shorter, longer = sorted((conversation, messages), key=len)
    return list(longer[: len(shorter)]) == list(shorter)


def run_lines(points: Iterable[DecisionPoint]) -> Iterator[RunLine]:
    """`points` as run lines: consecutive points of one run whose conversations begin
    alike (as a run's points, in its order, always do) share one line."""
    line: RunLine | None = None
    for point in points:
        if line is None or not line.continued_by(point):
            if line is not None:
                yield line
            line = RunLine(run_id=point.run_id, messages=point.messages, points=[])
        elif len(point.messages) > len(line.messages):
            line.messages = point.messages
        fields = {k: v for k, v in point if k != "messages"}
        line.points.append(StoredPoint(**fields, turns=len(point.messages)))
    if line is not None:
        yield line


def _read(
    path: Path, points_of: Callable[[str], Iterable[DecisionPoint]]
) -> Iterator[DecisionPoint]:
    """The points of the file `path`, line by line."""
    with path.open() as f:
        for line in f:
            yield from points_of(line)


class DatasetDraft:
    """A version being written, one run at a time, to a hidden file of its dataset's
    directory: refused with `DATASET_TOO_LARGE` as soon as it passes a cap, and made the
    dataset's next version by `commit`."""

    def __init__(self, store: DatasetStore, name: str, file: IO[str], path: Path) -> None:
        self._store = store
        self._name = name
        self._file = file
        self.path = path
        self.points = 0
        self.bytes = 0

    def add(self, points: Iterable[DecisionPoint]) -> None:
        """Appends `points` (one run's, in its order)."""
        limits = self._store.limits
        for line in run_lines(points):
            text = line.model_dump_json() + "\n"
            self.bytes += len(text.encode())
            self.points += len(line.points)
            if self.bytes > limits.max_bytes:
                raise TarryError(
                    ErrorCode.DATASET_TOO_LARGE,
                    f"dataset {self._name!r} would take more than {limits.max_bytes} bytes"
                    " (TARRY_DATASET_MAX_BYTES): narrow the query (since=, tool=, limit=)"
                    " or raise the cap",
                )
            if self.points > limits.max_points:
                raise TarryError(
                    ErrorCode.DATASET_TOO_LARGE,
                    f"dataset {self._name!r} would hold more than {limits.max_points} points"
                    " (TARRY_DATASET_MAX_POINTS): narrow the query (since=, tool=, limit=)"
                    " or raise the cap",
                )
            self._file.write(text)

    def commit(self, manifest: DatasetManifest) -> DatasetManifest:
        """Makes what was added the next version of the dataset, with `manifest` (whose
        version is set here); returns it."""
        self._file.close()
        os.chmod(self.path, PRIVATE_FILE)
        return self._store.commit(self.path, manifest.model_copy(update={"name": self._name}))


class DatasetStore:
    """Datasets as files under `root`: `NAME/N.runs.jsonl`, one `RunLine` a line, and
    `NAME/N.json`, its manifest (a version made before points were stored by run keeps
    `NAME/N.jsonl`, one `DecisionPoint` a line, and is read as it is). A version is
    listed once its manifest is there, and both are written whole then linked under
    their names, which fails if the name is taken: two creates at once take two
    versions, and none is ever overwritten."""

    def __init__(self, root: Path, limits: DatasetLimits | None = None) -> None:
        self.root = root
        self.limits = limits or DatasetLimits()

    @classmethod
    def of(cls, settings: TarrySettings) -> DatasetStore:
        """The store `settings` name: `TARRY_DATASETS_DIR`, with its caps."""
        return cls(settings.tarry_datasets_dir, DatasetLimits.of(settings))

    def versions(self, name: str) -> list[int]:
        """The versions of dataset `name`, oldest first; none for a name there is not."""
        folder = self.root / checked_name(name)
        if not folder.is_dir():
            return []
        return sorted(int(p.stem) for p in folder.glob("*.json") if p.stem.isdigit())

    def names(self) -> list[str]:
        """The datasets' names."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if NAME_RULE.fullmatch(p.name))

    def latest(
        self, readable: Callable[[DatasetManifest], bool] = lambda _: True
    ) -> list[DatasetManifest]:
        """The latest `readable` version of every dataset that has one, by name."""
        found = []
        for name in self.names():
            manifests = [m for m in self._manifests(name) if readable(m)]
            if manifests:
                found.append(manifests[-1])
        return found

    def _manifests(self, name: str) -> list[DatasetManifest]:
        return [
            DatasetManifest.model_validate_json((self.root / name / f"{v}.json").read_text())
            for v in self.versions(name)
        ]

    def manifest(
        self,
        name: str,
        version: int | None = None,
        readable: Callable[[DatasetManifest], bool] = lambda _: True,
    ) -> DatasetManifest:
        """Version `version` of `name` (None: the latest), of those `readable`;
        `DATASET_NOT_FOUND` if none, as for a version there is not."""
        manifests = {m.version: m for m in self._manifests(name) if readable(m)}
        if version is None and manifests:
            version = max(manifests)
        if version not in manifests:
            which = f"version {version} of dataset" if manifests else "dataset"
            raise TarryError(
                ErrorCode.DATASET_NOT_FOUND,
                f"no {which} {name!r}"
                + (f"; its versions: {', '.join(map(str, manifests))}" if manifests else ""),
            )
        return manifests[version]

    def lines(self, name: str, version: int | None = None) -> Iterator[str]:
        """The version's points (None: the latest) as JSON lines, one `DecisionPoint` a
        line: its export, put together one run at a time as it is read."""
        return (p.model_dump_json() + "\n" for p in self._decision_points(name, version))

    def points(self, name: str, version: int | None = None) -> list[DecisionPoint]:
        """The points of a version (None: the latest); those of a run share its messages."""
        return list(self._decision_points(name, version))

    def _decision_points(self, name: str, version: int | None) -> Iterator[DecisionPoint]:
        """The version's points as they are read; `DATASET_NOT_FOUND` at once, not at the
        first point, so a command or a route can still answer with it."""
        manifest = self.manifest(name, version)
        older = self.root / name / f"{manifest.version}.jsonl"
        if older.exists():
            return _read(older, lambda line: [DecisionPoint.model_validate_json(line)])
        runs = self.root / name / f"{manifest.version}.runs.jsonl"
        return _read(runs, lambda line: RunLine.model_validate_json(line).decision_points())

    def check_room(self, name: str) -> None:
        """`DATASET_TOO_MANY_VERSIONS` when dataset `name` has all the versions it may."""
        if len(self.versions(name)) >= self.limits.max_versions:
            raise TarryError(
                ErrorCode.DATASET_TOO_MANY_VERSIONS,
                f"dataset {name!r} has {self.limits.max_versions} versions, the most"
                " TARRY_DATASET_MAX_VERSIONS allows: create the next under a new name,"
                " or raise the cap",
            )

    @contextlib.contextmanager
    def draft(self, name: str) -> Iterator[DatasetDraft]:
        """A draft of dataset `name`'s next version; its file is gone at the end unless
        committed."""
        folder = self._folder(checked_name(name))
        fd, path = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w") as file:
                yield DatasetDraft(self, name, file, Path(path))
        finally:
            Path(path).unlink(missing_ok=True)

    def write(self, manifest: DatasetManifest, points: Iterable[DecisionPoint]) -> DatasetManifest:
        """Writes `points` as the next version of `manifest.name`; returns its manifest."""
        with self.draft(manifest.name) as draft:
            draft.add(points)
            return draft.commit(manifest)

    def commit(self, lines: Path, manifest: DatasetManifest) -> DatasetManifest:
        """Links the run lines `lines` (a file of the dataset's directory) in as the
        dataset's next version, then its manifest; returns the manifest."""
        self.check_room(manifest.name)
        folder = lines.parent
        version = (self.versions(manifest.name) or [0])[-1] + 1
        while True:
            try:
                os.link(lines, folder / f"{version}.runs.jsonl")
                break
            except FileExistsError:  # taken by a create at the same time
                version += 1
        manifest = manifest.model_copy(update={"version": version})
        head = self._whole(folder, manifest.model_dump_json(indent=2) + "\n")
        try:
            os.link(head, folder / f"{version}.json")
        finally:
            head.unlink()
        return manifest

    def _folder(self, name: str) -> Path:
        """Dataset `name`'s directory, owner-only; the root is made so too when it is
        made here (one a deployment names is left as it is)."""
        self.root.mkdir(mode=PRIVATE_DIRECTORY, parents=True, exist_ok=True)
        folder = self.root / name
        folder.mkdir(mode=PRIVATE_DIRECTORY, exist_ok=True)
        folder.chmod(PRIVATE_DIRECTORY)
        return folder

    @staticmethod
    def _whole(folder: Path, text: str) -> Path:
        """A hidden, owner-read-only file in `folder` holding `text`, to be linked into
        place."""
        fd, name = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(name, PRIVATE_FILE)
        return Path(name)
