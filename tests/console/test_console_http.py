"""The console over plain HTTP: authentication, tenancy, CSRF, headers, search and
paging (the browser tests check what the pages show)."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.console.conftest import KEY_A, KEY_B, ConsoleEnv, bearer
from tests.support.builders import assistant, user

HTML = {"accept": "text/html"}


@pytest.fixture
def http(console: ConsoleEnv) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=30, follow_redirects=False) as client:
        yield client


def auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def _seqs(html: str, testid: str) -> list[int]:
    return [int(s) for s in re.findall(rf'data-testid="{testid}" data-seq="(\d+)"', html)]


def test_refused_without_credentials(http: httpx.Client, console: ConsoleEnv) -> None:
    for path in ("/sessions", f"/sessions/{console.seeded.session_id}"):
        r = http.get(path)
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "default-src 'none'" in r.headers["content-security-policy"]
        page = http.get(path, headers=HTML)  # a browser gets the login form, still 401
        assert page.status_code == 401 and 'name="api_key"' in page.text
        assert "flaky parser" not in page.text  # nothing of the session (its title)
    assert http.get("/sessions", headers=auth("not-a-key")).status_code == 401
    assert http.get("/sessions", headers={"authorization": "Basic eDp5"}).status_code == 401


def test_security_headers_everywhere(http: httpx.Client) -> None:
    for r in (http.get("/sessions", headers=auth(KEY_A)), http.get("/nope"), http.get("/login")):
        csp = r.headers["content-security-policy"]
        assert "script-src" not in csp and "default-src 'none'" in csp  # no script at all
        assert "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
    css = http.get("/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    page = http.get("/sessions", headers=auth(KEY_A)).text
    assert "<script" not in page and "style=" not in page and "http://" not in page
    assert "https://" not in page


def test_tenants_see_only_their_sessions(http: httpx.Client, console: ConsoleEnv) -> None:
    sid = console.seeded.session_id
    assert http.get(f"/sessions/{sid}", headers=auth(KEY_A)).status_code == 200
    other = http.get(f"/sessions/{sid}", headers=auth(KEY_B))
    assert other.status_code == 404 and "flaky parser" not in other.text
    output = f"/sessions/{sid}/tool-output/{console.seeded.big_seq}"
    assert http.get(output, headers=auth(KEY_A)).status_code == 200
    assert http.get(output, headers=auth(KEY_B)).status_code == 404
    assert f'href="/sessions/{sid}"' not in http.get("/sessions", headers=auth(KEY_B)).text
    assert f'href="/sessions/{sid}"' in http.get("/sessions", headers=auth(KEY_A)).text
    # A tenant's internal ID is no way in either.
    assert http.get(f"/sessions/console-a~{sid}", headers=auth(KEY_B)).status_code == 404
    assert http.get("/sessions/nope", headers=auth(KEY_A)).status_code == 404


def test_login_cookie_and_csrf(http: httpx.Client, console: ConsoleEnv) -> None:
    form = http.get("/login")
    token = _csrf(form.text)
    assert "httponly" in form.headers["set-cookie"].lower()
    good = {"csrf": token, "api_key": KEY_A, "next": "/sessions"}
    # A forged form (no matching CSRF cookie) and a cross-site one are refused.
    with httpx.Client(base_url=console.url) as fresh:
        assert fresh.post("/login", data=good).status_code == 403
    cross = http.post("/login", data=good, headers={"origin": "https://evil.example"})
    assert cross.status_code == 403
    wrong = http.post("/login", data={**good, "api_key": "wrong"})
    assert wrong.status_code == 401 and "not valid" in wrong.text
    done = http.post("/login", data={**good, "csrf": _csrf(wrong.text)})
    assert done.status_code == 303 and done.headers["location"] == "/sessions"
    cookie = done.headers["set-cookie"].lower()
    assert "ctxw_login=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert "secure" not in cookie  # plain HTTP: Secure only under TLS
    assert KEY_A.lower() not in cookie  # the key stays on the server
    page = http.get(f"/sessions/{console.seeded.session_id}")
    assert page.status_code == 200 and "tenant console-a" in page.text
    # Log out needs the login's CSRF token.
    assert http.post("/logout", data={"csrf": "forged"}).status_code == 403
    assert http.post("/logout", data={"csrf": _csrf(page.text)}).status_code == 303
    http.cookies.clear()
    assert http.get("/sessions").status_code == 401
    # Open redirects are not.
    again = _csrf(http.get("/login").text)
    evil = http.post("/login", data={**good, "csrf": again, "next": "//evil.example/x"})
    assert evil.headers["location"] == "/sessions"


@pytest.fixture(scope="module")
def stub_b(channel: grpc.Channel) -> pb_grpc.ContextServiceStub:
    return pb_grpc.ContextServiceStub(channel)


def _create(stub: pb_grpc.ContextServiceStub, sid: str, **fields: object) -> None:
    stub.CreateSession(
        pb.CreateSessionRequest(session_id=sid, session=ses.Session(**fields)),  # type: ignore[arg-type]
        metadata=bearer(KEY_B),
    )


def test_search_sort_and_pages(http: httpx.Client, stub_b: pb_grpc.ContextServiceStub) -> None:
    run = uuid.uuid4().hex[:8]
    for i in range(55):
        _create(
            stub_b,
            f"s-{run}-{i:02d}",
            title=f"Run {run} Task {i}" + (" NEEDLE" if i % 10 == 3 else ""),
            user_id=f"u{i % 3}",
            project_id=f"p-{run}",
            labels={"tier": "gold" if i % 2 else "free", "run": run},
        )
    h = auth(KEY_B)

    def ids(**params: str) -> list[str]:
        text = http.get("/sessions", params=params, headers=h).text
        return re.findall(rf'href="/sessions/(s-{run}-\d\d)"', text)

    assert sorted(ids(title="needle", project=f"p-{run}")) == [
        f"s-{run}-{i:02d}" for i in (3, 13, 23, 33, 43, 53)
    ]
    assert len(ids(user="u1", label=f"run={run}")) == 18
    gold = ids(label="tier=gold", project=f"p-{run}")
    assert gold and all(int(s[-2:]) % 2 for s in gold)
    assert ids(label="tier=silver") == []
    first = ids(label=f"run={run}", sort="created", order="asc")
    assert first == [f"s-{run}-{i:02d}" for i in range(50)]  # one page holds 50
    text = http.get(
        "/sessions", params={"label": f"run={run}", "sort": "created", "order": "asc"}, headers=h
    ).text
    cursor = re.search(r'data-testid="next-page" href="/sessions\?[^"]*after=([^"&]+)"', text)
    assert cursor
    rest = ids(label=f"run={run}", sort="created", order="asc", after=cursor.group(1))
    assert rest == [f"s-{run}-{i:02d}" for i in range(50, 55)]
    assert http.get("/sessions", params={"after": "garbage!"}, headers=h).status_code == 404


def test_timeline_is_paged_by_seq(http: httpx.Client, stub_b: pb_grpc.ContextServiceStub) -> None:
    sid = f"long-{uuid.uuid4().hex[:8]}"
    _create(stub_b, sid, model="gpt-4.1")
    msgs = [user(f"q{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(120)]
    stub_b.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=msgs), metadata=bearer(KEY_B)
    )
    h = auth(KEY_B)

    def page(**params: str) -> str:
        r = http.get(f"/sessions/{sid}", params=params, headers=h)
        assert r.status_code == 200
        return r.text

    latest = page()
    assert _seqs(latest, "timeline-message") == list(range(71, 121))
    assert 'data-testid="newer"' not in latest and 'data-testid="older"' in latest
    assert _seqs(page(before="71"), "timeline-message") == list(range(21, 71))
    oldest = page(before="21")
    assert _seqs(oldest, "timeline-message") == list(range(1, 21))
    assert 'data-testid="older"' not in oldest and 'data-testid="newer"' in oldest
    assert _seqs(page(at="100"), "timeline-message") == list(range(100, 121))
    assert _seqs(page(after="10"), "timeline-message") == list(range(11, 61))
    # The effective context is paged too: its newest 50 messages by default.
    assert _seqs(latest, "context-message") == list(range(71, 121))
    assert _seqs(page(ctx="0"), "context-message") == list(range(1, 51))
    assert http.get(f"/sessions/{sid}", params={"at": "x"}, headers=h).status_code == 404


def test_tool_output_viewer_pages_bytes(
    http: httpx.Client, console: ConsoleEnv, channel: grpc.Channel
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    sid, seq = console.seeded.session_id, console.seeded.big_seq
    url = f"/sessions/{sid}/tool-output/{seq}"
    offset, seen = 0, ""
    while True:
        r = http.get(url, params={"offset": str(offset)}, headers=auth(KEY_A))
        api = stub.GetToolOutput(
            pb.GetToolOutputRequest(session_id=sid, seq=seq, offset=offset, limit=16384),
            metadata=bearer(KEY_A),
        )
        shown = re.search(r'data-testid="tool-output">(.*?)</pre>', r.text, re.S)
        assert shown and shown.group(1) == api.content.replace("<", "&lt;")
        seen += api.content
        if not api.next_offset:
            assert 'data-testid="next-range"' not in r.text
            break
        assert f'href="?offset={api.next_offset}"' in r.text
        offset = api.next_offset
    assert seen == console.seeded.big_text
    not_tool = http.get(f"/sessions/{sid}/tool-output/1", headers=auth(KEY_A))
    assert not_tool.status_code == 404


def test_checkpoint_page_has_the_whole_summary(
    http: httpx.Client, console: ConsoleEnv, channel: grpc.Channel
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    sid = console.seeded.session_id
    (c,) = stub.ListCompactions(
        pb.ListCompactionsRequest(session_id=sid), metadata=bearer(KEY_A)
    ).compactions
    url = f"/sessions/{sid}/checkpoints/{c.compaction_id}"
    page = http.get(url, headers=auth(KEY_A))
    assert page.status_code == 200
    shown = re.search(r'data-testid="full-summary">(.*?)</pre>', page.text, re.S)
    assert shown and html.unescape(shown.group(1)) == c.summary
    assert http.get(url, headers=auth(KEY_B)).status_code == 404
    assert http.get(f"/sessions/{sid}/checkpoints/nope", headers=auth(KEY_A)).status_code == 404


def test_chart_marks_compactions_and_rollbacks(http: httpx.Client, console: ConsoleEnv) -> None:
    text = http.get(f"/sessions/{console.seeded.session_id}", headers=auth(KEY_A)).text
    chart = text[text.index('data-testid="chart"') : text.index('data-testid="picker"')]
    assert chart.count('data-testid="chart-compaction"') == 1
    assert chart.count('data-testid="chart-rollback"') >= 1
    points = re.search(r'<polyline class="series" points="([^"]+)"', chart)
    assert points
    # One point per seq (a short session is not bucketed), each a link to its timeline page.
    assert len(points.group(1).split()) == int(re.findall(r'data-testid="last-seq">(\d+)', text)[0])
    assert 'href="?at=1#m1"' in chart


def test_superseded_checkpoint_is_marked(
    http: httpx.Client, stub_b: pb_grpc.ContextServiceStub
) -> None:
    sid = f"rewind-{uuid.uuid4().hex[:8]}"
    _create(stub_b, sid, model="gpt-4.1")
    for i in range(8):
        stub_b.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=sid, messages=[user(f"ask {i} " * 60), assistant(f"answer {i} " * 60)]
            ),
            metadata=bearer(KEY_B),
        )
    done = stub_b.Compact(
        pb.CompactRequest(session_id=sid, keep_recent_tokens=200), metadata=bearer(KEY_B)
    )
    # Rewinding to before the cut supersedes the checkpoint.
    stub_b.RollbackTurn(
        pb.RollbackTurnRequest(session_id=sid, to_seq=done.first_kept_seq - 2),
        metadata=bearer(KEY_B),
    )
    text = http.get(f"/sessions/{sid}", headers=auth(KEY_B)).text
    assert f'data-id="{done.compaction_id}" data-superseded="true"' in text
    assert 'data-testid="cp-superseded"' in text
    assert 'class="compaction superseded" data-testid="chart-compaction"' in text
    assert 'data-status="rolled back"' in text
