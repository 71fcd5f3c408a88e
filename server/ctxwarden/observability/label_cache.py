"""A metric's labelled children, each looked up once.

prometheus_client's ``labels()`` checks its arguments, turns them into strings
and takes a lock on every call: a few microseconds, paid several times by every
RPC. The label values cached here come from small fixed sets (method names,
status codes, statement kinds, usage sources), so a cache stays small; past
``MAX_CHILDREN`` entries it stops adding and asks ``labels()`` again.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client.metrics import MetricWrapperBase

MAX_CHILDREN = 4096
"""Children a cache keeps (the label sets it sees are far fewer)."""

M = TypeVar("M", bound=MetricWrapperBase)


class LabelCache(Generic[M]):
    """``cache(values)`` is ``metric.labels(*values)``, looked up once per values.

    ``values`` is one label value, or a tuple of them for a metric with several
    labels."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: M) -> None:
        self._metric = metric
        self._children: dict[str | tuple[str, ...], M] = {}

    def __call__(self, values: str | tuple[str, ...]) -> M:
        child = self._children.get(values)
        if child is None:
            if isinstance(values, tuple):
                child = self._metric.labels(*values)
            else:
                child = self._metric.labels(values)
            if len(self._children) < MAX_CHILDREN:
                self._children[values] = child
        return child
