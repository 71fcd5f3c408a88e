"""MySQL/MariaDB driver connections that are safe whatever the server's ``sql_mode``.

aiomysql (like PyMySQL) puts the values of a statement into its text on the client. It
escapes a string as the session's mode asks (the server reports
``NO_BACKSLASH_ESCAPES`` in every reply), but bytes always with backslashes: on a server
whose ``sql_mode`` has ``NO_BACKSLASH_ESCAPES`` (ANSI-style setups, some hosted
databases) a quote in a blob would end its literal and the rest would run as SQL. So:

* every new connection removes ``NO_BACKSLASH_ESCAPES`` from its session's ``sql_mode``
  (``SAFE_SQL_MODE``, run before the connection is used), so a backslash escape means
  what the driver meant; the migrations' synchronous connections run it too
  (``store/engine.py``);
* should a session have that mode nonetheless, bytes go in as hex literals (``X'...'``,
  no escaping at all), and strings are escaped as the mode asks (aiomysql's own rule);
* aiomysql lets every connection send several statements in one query
  (``CLIENT.MULTI_STATEMENTS``); here only the connections of the append writers, whose
  one-round-trip script needs it (``store/group_commit.py``), are opened with it. On any
  other connection a ``;`` that escaped its literal is a syntax error, not a statement.
"""

from __future__ import annotations

from typing import Any

import aiomysql
from pymysql.constants import CLIENT, SERVER_STATUS

SAFE_SQL_MODE = (
    "SET SESSION sql_mode = TRIM(BOTH ',' FROM "
    "REPLACE(CONCAT(',', @@SESSION.sql_mode, ','), ',NO_BACKSLASH_ESCAPES,', ','))"
)
"""The session's sql_mode without NO_BACKSLASH_ESCAPES (the other modes are kept)."""

_NO_BACKSLASH_ESCAPES = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES


class SafeConnection(aiomysql.Connection):  # type: ignore[misc]
    """An aiomysql connection that escapes bytes safely in either mode and sends
    several statements in one query only when opened with ``multi_statements``."""

    def __init__(self, *args: Any, multi_statements: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not multi_statements:
            self.client_flag &= ~CLIENT.MULTI_STATEMENTS

    @property
    def backslash_escapes(self) -> bool:
        """The session treats a backslash in a literal as an escape (as the server
        said in its last reply)."""
        return not (self.server_status or 0) & _NO_BACKSLASH_ESCAPES

    def escape(self, obj: Any) -> Any:
        if isinstance(obj, (bytes, bytearray)) and not self.backslash_escapes:
            return "X'" + bytes(obj).hex() + "'"
        if isinstance(obj, (list, tuple)):
            # PyMySQL escapes the strings of a sequence with backslashes in any mode.
            return "(" + ",".join(str(self.escape(x)) for x in obj) + ")"
        return super().escape(obj)


async def connect(*, multi_statements: bool = False, **kwargs: Any) -> SafeConnection:
    """Open a connection (aiomysql.connect's arguments) and make its session safe."""
    conn = SafeConnection(multi_statements=multi_statements, **kwargs)
    await conn._connect()
    try:
        await conn.query(SAFE_SQL_MODE)
    except BaseException:
        conn.close()
        raise
    return conn
