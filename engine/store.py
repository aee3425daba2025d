"""The session store: SQLite through sqlite-utils, in WAL mode, one database per user.

A session is a row in `sessions` plus its ordered `events`. Each event is appended in its own
transaction, so a crash or Ctrl-C at any moment leaves every earlier event readable and no
half-written row; a session whose process died while `running` reads back as `interrupted`.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import sqlite_utils

from .errors import UserError
from .events import Event, SessionStarted

SCHEMA_VERSION = 1


def default_db_path() -> Path:
    """`$AUTOKERNEL_DB`, else `$XDG_DATA_HOME/autokernel/sessions.db` (`~/.local/share/...`)."""
    if os.environ.get("AUTOKERNEL_DB"):
        return Path(os.environ["AUTOKERNEL_DB"]).expanduser()
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "autokernel" / "sessions.db"


def new_session_id() -> str:
    """Readable and sortable by time: 20261122-183000-a3f9."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _pid_alive(pid: int | None, host: str | None) -> bool:
    """Whether the process that owns a `running` session still exists (another host: assume so)."""
    if not pid:
        return False
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class StoreWriteError(UserError):
    """A write the database refused (a full disk, a read-only file or folder): every event written before
    it stays readable, and a session cut by it can be resumed once the database can be written again."""


def _write_hint(why: str) -> str:
    """What the person can do about a refused write, from SQLite's message."""
    low = why.lower()
    if "full" in low:
        return "free some space"
    if "readonly" in low or "read-only" in low:
        return "make it writable"
    return "check the disk"


def _read_only(path: Path) -> bool:
    """Whether this process cannot write the database file or its folder (a read-only mount, permissions)."""
    target = path if path.exists() else path.parent
    return not os.access(target, os.W_OK) or not os.access(path.parent, os.W_OK)


class Store:
    """Thread-safe handle on one session database (the engine thread and the UI share it)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_db_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        except (OSError, sqlite3.Error) as e:
            raise UserError(f"cannot open session database {self.path}: {e}") from e
        self._lock = threading.RLock()
        self.db = sqlite_utils.Database(conn)
        try:
            self._use_wal()
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as e:
            conn.close()
            if _read_only(self.path):
                raise StoreWriteError(f"cannot use the session database {self.path}: it is read-only ({e}); make "
                                      f"it and its folder writable, or name another with --db") from e
            raise UserError(f"{self.path} is not a usable session database: {e}") from e
        self._next_seq: dict[str, int] = {}

    def _use_wal(self, wait_s: float = 30.0) -> None:
        """Put the file in WAL mode (kept in the file: later openers find it set). Switching needs the file
        to itself and SQLite answers "locked" at once, without its busy timeout, while another process
        opening the same new file holds it; so that case is retried here for up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if self.db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    self.db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    # -- schema -----------------------------------------------------------------------------
    def _schema_version(self) -> int:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        except sqlite3.OperationalError:  # no meta table yet: a new file
            return 0
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        if self._schema_version() == SCHEMA_VERSION:  # nothing to write: a reader needs no write access
            return
        with self._lock, self.db.conn:
            # One process creates or upgrades the schema at a time: the others wait (busy timeout) and
            # then see its tables. Without it, two processes opening a new database together (an
            # engine and a TUI or a test polling it) both tried to create it, and one got "locked".
            self.db.execute("BEGIN IMMEDIATE")
            self.db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise UserError(
                    f"{self.path} was written by a newer autokernel (schema {version} > {SCHEMA_VERSION}); upgrade autokernel-tui"
                )
            if version < 1:
                self.db["sessions"].create(
                    {
                        "id": str, "kind": str, "model": str, "device": str, "device_name": str,
                        "agent": str, "status": str, "created": float, "updated": float,
                        "pid": int, "host": str, "config": str, "summary": str,
                    },
                    pk="id", if_not_exists=True,
                )
                self.db["events"].create(
                    {"session_id": str, "seq": int, "ts": float, "type": str, "payload": str},
                    pk=("session_id", "seq"), if_not_exists=True,
                )
                self.db["events"].create_index(["session_id", "type"], if_not_exists=True)
                self.db["meta"].upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")

    # -- writing ----------------------------------------------------------------------------
    @contextmanager
    def _writing(self, session_id: str | None = None) -> Iterator[None]:
        """One transaction; a write SQLite refuses (disk full, read-only, I/O error) is rolled back whole and
        raised as a one-line StoreWriteError. The next sequence number is read again afterwards, so a later
        write leaves no gap."""
        with self._lock:
            try:
                with self.db.conn:
                    yield
            except sqlite3.IntegrityError:
                raise
            except sqlite3.DatabaseError as e:
                if session_id:
                    self._next_seq.pop(session_id, None)
                if self.db.conn.in_transaction:
                    try:
                        self.db.conn.rollback()
                    except sqlite3.Error:
                        pass
                raise StoreWriteError(f"cannot write to the session database {self.path}: {e}; "
                                      f"{_write_hint(str(e))}") from e

    def create_session(self, started: SessionStarted, session_id: str | None = None) -> str:
        """Insert the session row and its first event in one transaction."""
        sid = session_id or new_session_id()
        now = time.time()
        with self._writing(sid):
            self.db["sessions"].insert(
                {
                    "id": sid, "kind": started.kind, "model": started.model, "device": started.device,
                    "device_name": started.device_name, "agent": started.agent, "status": "running",
                    "created": now, "updated": now, "pid": os.getpid(), "host": socket.gethostname(),
                    "config": json.dumps(started.config, default=str), "summary": "{}",
                }
            )
            self._insert_event(sid, started)
        return sid

    def append(self, session_id: str, event: Event) -> int:
        """Append one event atomically; returns its sequence number."""
        with self._writing(session_id):
            seq = self._insert_event(session_id, event)
            self.db.execute("UPDATE sessions SET updated=? WHERE id=?", [event.ts, session_id])
        return seq

    def _insert_event(self, session_id: str, event: Event) -> int:
        seq = self._next_seq.get(session_id)
        if seq is None:
            row = self.db.execute("SELECT MAX(seq) FROM events WHERE session_id=?", [session_id]).fetchone()
            seq = (row[0] or 0) + 1
        self.db["events"].insert(
            {"session_id": session_id, "seq": seq, "ts": event.ts, "type": event.type,
             "payload": json.dumps(event.payload(), default=str)}
        )
        self._next_seq[session_id] = seq + 1
        return seq

    def reopen_session(self, session_id: str) -> None:
        """Mark a stopped or interrupted session as running again in this process (resume)."""
        with self._writing(session_id):
            self.db.execute(
                "UPDATE sessions SET status='running', pid=?, host=?, updated=? WHERE id=?",
                [os.getpid(), socket.gethostname(), time.time(), session_id],
            )
        self._next_seq.pop(session_id, None)

    def finish_session(self, session_id: str, status: str, summary: dict | None = None) -> None:
        with self._writing():
            self.db.execute(
                "UPDATE sessions SET status=?, summary=?, updated=? WHERE id=?",
                [status, json.dumps(summary or {}, default=str), time.time(), session_id],
            )

    # -- reading ----------------------------------------------------------------------------
    def sessions(self, kind: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Sessions newest first; a `running` session whose process is gone reads as `interrupted`."""
        sql = "SELECT s.*, (SELECT COUNT(*) FROM events e WHERE e.session_id = s.id) AS n_events FROM sessions s"
        args: list[Any] = []
        if kind:
            sql += " WHERE kind=?"
            args.append(kind)
        sql += " ORDER BY created DESC, id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        with self._lock:
            rows = [dict(r) for r in self.db.query(sql, args)]
        return [self._decorate(r) for r in rows]

    def _decorate(self, row: dict[str, Any]) -> dict[str, Any]:
        row["config"] = json.loads(row.get("config") or "{}")
        row["summary"] = json.loads(row.get("summary") or "{}")
        if row["status"] == "running" and not _pid_alive(row.get("pid"), row.get("host")):
            row["status"] = "interrupted"
        return row

    def session(self, ref: str, kind: str | None = None) -> dict[str, Any]:
        """A session by id, unique id prefix, or `latest`; UserError if there is none. With `kind`, `latest`
        is the newest session of that kind and a prefix shared with sessions of other kinds means the one of
        that kind (a batch and its first problem's session start in the same second); the caller checks the
        kind of what it gets."""
        with self._lock:
            if ref == "latest":
                where, args = ("WHERE kind=? ", [kind]) if kind else ("", [])
                sql = f"SELECT * FROM sessions {where}ORDER BY created DESC, id DESC LIMIT 1"
                rows = list(self.db.query(sql, args))
            else:
                rows = list(self.db.query("SELECT * FROM sessions WHERE id=?", [ref]))
                if not rows:
                    rows = list(self.db.query("SELECT * FROM sessions WHERE id LIKE ? ORDER BY created DESC", [ref + "%"]))
                    if len(rows) > 1 and kind and any(r["kind"] == kind for r in rows):
                        rows = [r for r in rows if r["kind"] == kind]
        if not rows:
            what = f"no {kind} session" if kind and ref == "latest" else f"no session {ref!r}"
            raise UserError(f"{what} in {self.path} (see `autokernel sessions`)")
        if len(rows) > 1:
            raise UserError(f"session prefix {ref!r} is ambiguous: " + ", ".join(r["id"] for r in rows[:5]))
        return self._decorate(dict(rows[0]))

    def events(self, session_id: str, types: Iterable[str] | None = None, after_seq: int = 0) -> list[tuple[int, Event]]:
        """The session's events in order, as typed objects."""
        sql = "SELECT seq, ts, type, payload FROM events WHERE session_id=? AND seq>?"
        args: list[Any] = [session_id, after_seq]
        if types:
            types = list(types)
            sql += " AND type IN (%s)" % ",".join("?" * len(types))
            args += types
        sql += " ORDER BY seq"
        with self._lock:
            rows = self.db.execute(sql, args).fetchall()
        return [(seq, Event.from_row(t, json.loads(p), ts)) for seq, ts, t, p in rows]

    def iter_events(self, session_id: str) -> Iterator[Event]:
        for _, e in self.events(session_id):
            yield e

    def close(self) -> None:
        with self._lock:
            self.db.conn.close()


class Recorder:
    """Writes a session's events to the store, then hands each to the listeners (store first)."""

    def __init__(self, store: Store, session_id: str, listeners: Iterable = ()):  # listeners: Callable[[Event], None]
        self.store = store
        self.session_id = session_id
        self.listeners = list(listeners)
        self._lock = threading.Lock()

    def emit(self, event: Event) -> Event:
        with self._lock:
            self.store.append(self.session_id, event)
            for listener in list(self.listeners):
                listener(event)
        return event

    def __call__(self, event: Event) -> Event:
        return self.emit(event)
