"""The group commit's MySQL statement text: ``Writer.inline`` writes integers and
NULLs itself and escapes each other value once; the text must be what the
driver would write, in either backslash mode, and read back as the values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxwarden.store.engine import make_engine
from ctxwarden.store.writer import Writer
from tests.support.databases import fresh_database

VALUES: list[Any] = [7, None, True, False, 1.5, "a'b\\c", "a'b\\c", b"\x00'\\x", -3, "", 2**62]


@pytest.mark.parametrize("mode", ["", "NO_BACKSLASH_ESCAPES"])
async def test_inline_is_the_drivers_text_and_reads_back(mode: str, tmp_path: Path) -> None:
    with fresh_database("mysql", tmp_path) as url:
        engine = make_engine(url, pool_size=1)
        w = await Writer.open(engine)
        try:
            if mode:
                await w.execute(f"SET SESSION sql_mode = CONCAT(@@sql_mode, ',{mode}')", ())
            assert (not w.driver.backslash_escapes) == bool(mode)
            sql = "SELECT " + ", ".join(["%s"] * len(VALUES))
            text = w.inline(sql, VALUES)
            assert text == sql % tuple(w.driver.escape(v) for v in VALUES)
            async with w.driver.cursor() as cur:
                await cur.execute(text)
                row = await cur.fetchone()
            as_read = [bytes(v) if isinstance(v, (bytes, bytearray)) else v for v in row]
            assert as_read == [7, None, 1, 0, 1.5, "a'b\\c", "a'b\\c", b"\x00'\\x", -3, "", 2**62]
        finally:
            await w.close()
            await engine.dispose()
