"""deploy/compose.yaml: parses, migrates first, runs ctxwarden locked down on MySQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests.deploy.support import (
    COMPOSE,
    CTXWARDEN_UID,
    DEPLOY,
    GRPC_PORT,
    check_ctxwarden_args,
    flag_value,
    image_tag,
    interpolate_defaults,
    load_yaml_documents,
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    (data,) = load_yaml_documents(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"])


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: interpolate_defaults(str(v)) for k, v in env.items()}


def test_services(services: dict[str, Any]) -> None:
    assert set(services) == {"mysql", "migrate", "ctxwarden"}


def test_mysql_has_a_named_volume_and_a_healthcheck(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    mysql = services["mysql"]
    assert mysql["image"] == "mysql:8.4"
    named = [v.split(":", 1)[0] for v in mysql["volumes"]]
    assert named and all(n in compose["volumes"] for n in named)
    assert any(v.split(":", 1)[1] == "/var/lib/mysql" for v in mysql["volumes"])
    check = mysql["healthcheck"]
    assert check["test"][0] in {"CMD", "CMD-SHELL"} and "ping" in " ".join(check["test"])


def test_migrate_runs_first_and_only_once(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"]
    assert migrate["depends_on"]["mysql"]["condition"] == "service_healthy"
    assert migrate.get("restart", "no") == "no"
    server = services["ctxwarden"]
    assert server["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert server["depends_on"]["mysql"]["condition"] == "service_healthy"


def test_server_and_migrate_share_image_and_database(services: dict[str, Any]) -> None:
    migrate, server = services["migrate"], services["ctxwarden"]
    assert migrate["image"] == server["image"]
    image = interpolate_defaults(server["image"])
    assert image_tag(image) not in {"", "latest"}
    assert (
        server["build"] == migrate["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    )
    url_text = _env(server)["CTXWARDEN_DATABASE_URL"]
    assert url_text == _env(migrate)["CTXWARDEN_DATABASE_URL"]
    url = make_url(url_text)
    assert url.drivername == "mysql+aiomysql"
    assert url.host == "mysql"
    mysql_env = _env(services["mysql"])
    assert url.username == mysql_env["MYSQL_USER"]
    assert url.password == mysql_env["MYSQL_PASSWORD"]
    assert url.database == mysql_env["MYSQL_DATABASE"]


def test_server_listens_on_all_interfaces_with_api_keys_from_secrets_dir(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    server = services["ctxwarden"]
    command = server["command"]
    check_ctxwarden_args(command)
    assert command[0] == "serve"
    assert flag_value(command, "--listen") == f"0.0.0.0:{GRPC_PORT}"
    assert "--insecure-allow-unauthenticated" not in command
    keys_path = flag_value(command, "--api-keys-file")
    assert keys_path
    (secret_name,) = server["secrets"]
    assert keys_path == f"/run/secrets/{secret_name}"
    source = compose["secrets"][secret_name]["file"]
    assert source.startswith("./secrets/")
    assert (DEPLOY / "secrets" / "api-keys.example").is_file()


def test_example_api_keys_parse_as_the_server_parses_them() -> None:
    from ctxwarden.api.auth import load_api_keys

    assert load_api_keys(str(DEPLOY / "secrets" / "api-keys.example"))
    ignored = (DEPLOY / "secrets" / ".gitignore").read_text().split()
    assert "*" in ignored and "!*.example" in ignored, "real keys must stay out of git"


def test_ctxwarden_containers_are_locked_down(services: dict[str, Any]) -> None:
    for name in ("migrate", "ctxwarden"):
        svc = services[name]
        assert svc["user"] == f"{CTXWARDEN_UID}:{CTXWARDEN_UID}"
        assert svc["read_only"] is True
        assert svc["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in svc["security_opt"]
        assert any(t.split(":", 1)[0] == "/tmp" for t in svc["tmpfs"])
