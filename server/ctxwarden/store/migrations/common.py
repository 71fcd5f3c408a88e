"""What the migration scripts share."""

from collections.abc import Mapping
from typing import Any, Final

MYSQL: Final[Mapping[str, Any]] = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}
"""The options of every table a migration creates: InnoDB, utf8mb4 on MySQL and
MariaDB (the other databases ignore them)."""
