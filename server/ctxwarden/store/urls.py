"""Database URL forms: users give one URL, we derive async and sync drivers."""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

_ASYNC = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+pysqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "mysql": "mysql+aiomysql",
    "mysql+pymysql": "mysql+aiomysql",
    "mysql+aiomysql": "mysql+aiomysql",
    "mariadb": "mysql+aiomysql",
    "mariadb+pymysql": "mysql+aiomysql",
    "mariadb+aiomysql": "mysql+aiomysql",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "postgresql+psycopg": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
}
_SYNC = {
    "sqlite+aiosqlite": "sqlite",
    "mysql+aiomysql": "mysql+pymysql",
    "postgresql+asyncpg": "postgresql+psycopg",
}


class UnsupportedDatabase(ValueError):
    pass


def async_url(url: str) -> URL:
    parsed = make_url(url)
    driver = _ASYNC.get(parsed.drivername)
    if driver is None:
        raise UnsupportedDatabase(
            f"unsupported database URL scheme {parsed.drivername!r}: use sqlite:///PATH "
            "mysql+aiomysql://USER:PASSWORD@HOST:PORT/DB "
            "or postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DB"
        )
    parsed = parsed.set(drivername=driver)
    if driver.startswith("mysql") and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def sync_url(url: str) -> URL:
    parsed = async_url(url)
    return parsed.set(drivername=_SYNC[parsed.drivername])


def is_sqlite(url: str) -> bool:
    return async_url(url).drivername.startswith("sqlite")


def is_postgres(url: str) -> bool:
    return async_url(url).drivername.startswith("postgresql")
