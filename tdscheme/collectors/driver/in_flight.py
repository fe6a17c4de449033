"""RequestsInFlight: a flow's own record of the requests it sent, each booked in the frame ledger.

A request is recorded (and asked in the :class:`~tdscheme.collectors.driver.ledger.FrameLedger`)
when it is sent; it is *received* once its worker replied and until the flow has
accounted for its batch; and it is resolved once, in the ledger, with where its
frames went. This record and the ledger's are kept apart, so that each can be held
against the other: :meth:`RequestsInFlight.asked` is what the ledger's
``requests_in_flight()`` should hold. The rule for each kind of request is in
:mod:`tdscheme.collectors.driver.ledger`.

Example:
    >>> from tdscheme.collectors.driver.ledger import FrameLedger
    >>> book = RequestsInFlight(FrameLedger())
    >>> book.send("ref", Request(worker_id=0, batch_id=1, frames=100, asked=100, fixed=True))
    >>> book.asked() == book.ledger.requests_in_flight() == {"ref": 100}
    True
    >>> request = book.receive("ref")
    >>> book.resolve("ref", request, None, yielded=60, discarded=40)
    >>> book.asked(), book.ledger.as_dict()["collected"], book.ledger.balanced()
    ({}, 100, True)
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tdscheme.collectors.driver.ledger import FrameLedger
from tdscheme.collectors.settings.specs import WorkerBatch

__all__ = ["Request", "RequestsInFlight"]


class Request(NamedTuple):
    """A request sent: who was asked, for which batch, and its frames."""

    worker_id: int
    batch_id: int
    frames: int  # the most it may yield: its whole batch; with a replay buffer, its budget
    asked: int  # booked in the ledger: the worker's whole batch (nominal when not fixed)
    fixed: bool  # the worker's batch size is known (not whole trajectories)
    restarts: int = 0  # the worker's restart count when asked


#: a future the flow has no record of (its resolution is unaccounted in the ledger)
UNKNOWN = Request(-1, -1, 0, 0, True)


class RequestsInFlight:
    """The requests sent and not resolved yet, by future.

    Args:
        ledger: where each request is asked and resolved.
    """

    def __init__(self, ledger: FrameLedger) -> None:
        self.ledger = ledger
        self._sent: dict[Any, Request] = {}  # waiting for the worker's reply
        self._received: dict[Any, Request] = {}  # replied, not accounted yet

    def send(self, ref: Any, request: Request) -> None:
        """Records a request sent (its future ``ref``) and asks its frames in the ledger."""
        self._sent[ref] = request
        self.ledger.ask(ref, request.asked, worker_id=request.worker_id, batch_id=request.batch_id)

    def receive(self, ref: Any) -> Request:
        """Marks the request of ``ref`` replied (its batch still to account for); returns it."""
        request = self._sent.pop(ref, UNKNOWN)
        self._received[ref] = request
        return request

    def get(self, ref: Any) -> Request:
        """The record of ``ref`` (:data:`UNKNOWN` when there is none)."""
        return self._sent.get(ref, self._received.get(ref, UNKNOWN))

    def resolve(
        self, ref: Any, request: Request, result: WorkerBatch | None, **frames: int
    ) -> None:
        """Books where the frames of ``ref`` went; a batch of unfixed size restates its ask.

        Args:
            ref: the request's future.
            request: its record.
            result: the worker's reply (``None``: none came).
            frames: frames per ledger column; they add up to what it asked.
        """
        self._received.pop(ref, None)
        self._sent.pop(ref, None)
        asked = None
        if result is not None and not request.fixed:  # what its worker stepped
            asked = result.stepped
        self.ledger.resolve(
            ref, asked=asked, worker_id=request.worker_id, batch_id=request.batch_id, **frames
        )

    def discard_all(self) -> None:
        """Resolves every request still here as discarded (iteration stopped), then settles.

        A request the ledger still holds after that was never resolved: unaccounted.
        """
        for ref, request in [*self._sent.items(), *self._received.items()]:
            self.resolve(ref, request, None, discarded=request.asked)
        self.ledger.settle()

    def waiting(self) -> list[Request]:
        """The requests whose worker has not replied yet."""
        return list(self._sent.values())

    def frames_bound(self) -> int:
        """The most frames the requests not accounted yet may still yield."""
        return sum(r.frames for r in [*self._sent.values(), *self._received.values()])

    def asked(self) -> dict[Any, int]:
        """The requests sent and not resolved yet (by future), with the frames each asked."""
        return {ref: r.asked for ref, r in [*self._sent.items(), *self._received.items()]}

    @staticmethod
    def not_collected(request: Request, result: WorkerBatch) -> int:
        """Frames of a preempted request's whole batch that its worker did not collect."""
        if not result.preempted or not request.fixed:
            return 0
        return max(0, request.asked - result.stepped)
