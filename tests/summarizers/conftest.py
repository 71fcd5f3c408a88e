"""Fixtures: fake OpenAI and Anthropic servers, one fresh server per test.

Both accept any API key (or none); set ``fake.api_key`` to make them answer
a wrong or missing key with the provider's 401. Other test packages can
reuse the fixtures with
``from tests.summarizers.conftest import fake_anthropic, fake_openai`` in
their own conftest, or use the context managers of ``fake_providers``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.summarizers.fake_providers import FakeProvider


@pytest.fixture
def fake_openai() -> Iterator[FakeProvider]:
    """A fake OpenAI Chat Completions server; ``.base_url`` ends in ``/v1``."""
    with FakeProvider("openai") as fake:
        yield fake


@pytest.fixture
def fake_anthropic() -> Iterator[FakeProvider]:
    """A fake Anthropic Messages server; ``.base_url`` is the bare origin."""
    with FakeProvider("anthropic") as fake:
        yield fake
