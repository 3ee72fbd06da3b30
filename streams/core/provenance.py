"""Where a URL candidate comes from: the tags its ``via`` field may carry.

A candidate's ``via`` is the URL of the page that linked it, or one of these tags,
set by the stage that sent it and read by others (url-filter, url-seen, the frontier,
the recrawl hook). One enum holds them all, so no stage compares against another
stage's string. The values are the wire format: a ``str`` enum, written as it is.
"""

from __future__ import annotations

from enum import StrEnum


class Via(StrEnum):
    #: A seed: url-filter exempts it from --same-host, url-seen records its site.
    SEED = "seed"
    #: Re-fed: fetch it again now. Every tag starting with "recrawl" counts.
    RECRAWL = "recrawl"
    #: Re-fed: fetch it again when its revisit time has come.
    RECRAWL_WHEN_DUE = "recrawl-when-due"
    #: Re-fed by link-extract: its body was not in the hand-off cache; fetched again
    #: now whatever the host's trap budgets say, unless the capture is stored by
    #: then. Sent as "recrawl:handoff@" + the capture's fetch time (`handoff_refeed`).
    REFEED_HANDOFF = "recrawl:handoff"
    #: Re-fed by `seine replay`: a recrawl, not a new link.
    REPLAY = "recrawl:replay"
    #: url-seen asks the frontier to move a queued URL up a tier; the candidate's
    #: ``slot`` says where url-seen read it was queued, so the frontier reads the
    #: registry only when the item is no longer there.
    RETIER = "retier"
    #: url-seen sends a registered URL again: as far as it could tell, never queued.
    RESEND = "url-seen:resend"
    #: A resume re-queues a URL whose message died with the broker's topics.
    RESUME = "resume"
    #: A prefix: "redirect:" + the URL that answered with a redirect to this one.
    REDIRECT = "redirect:"


def handoff_refeed(fetched_at: float) -> str:
    """The ``via`` of link-extract's refetch of a capture fetched at `fetched_at`."""
    return f"{Via.REFEED_HANDOFF}@{fetched_at!r}"


def handoff_refeed_since(via: str | None) -> float | None:
    """The capture's fetch time of a hand-off refetch's ``via``: 0.0 when it names
    none (a message from before it did), None when `via` is not such a refetch."""
    if not via or not via.startswith(Via.REFEED_HANDOFF):
        return None
    _, _, since = via[len(Via.REFEED_HANDOFF) :].partition("@")
    try:
        return float(since) if since else 0.0
    except ValueError:
        return 0.0
