"""The frontier's tiered per-host queues: slots, holes and lazy re-tier moves.

A host's queue is `TIERS` key ranges of the ``queue`` table, one per front tier,
each between the host state's ``heads[tier]`` and ``tails[tier]``. `TieredQueues`
(built on `HostStore`, and built on by the frontier) pops a host's next URL by smooth
weighted round robin over its tiers, puts a page back at the head of its tier, moves
a queued URL up the tiers (`retier`: the move held in memory, the slot it left a
*hole*), drains a host's queue, and tells whether a slot accounts for a URL the
registry names there (`accounts_for`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, MutableMapping

from streams.core.frontier_model import (
    TIER_WEIGHTS,
    TIERS,
    Decision,
    HostState,
    Politeness,
    QueueItem,
    authority_of,
    copy_state,
    pending,
    queue_key,
    tier_for,
)
from streams.core.frontier_store import HostStore

#: Queue keys a re-tier emptied that this frontier remembers (see `TieredQueues._holes`).
HOLES_SIZE = 1 << 16

#: Re-tier moves a frontier keeps in memory at once (see `TieredQueues._lazy`); past it a
#: move is written to the queue table at once.
LAZY_MOVES = 1 << 16


class TieredQueues(HostStore):
    """The per-host tiered queues of every partition this worker owns."""

    def __init__(
        self,
        hosts: MutableMapping[str, HostState],
        queue: MutableMapping[str, QueueItem],
        policy: Politeness,
        partition_of: Callable[[str], int],
        clock: Callable[[], float] = time.time,
        write_back: bool = False,
        lazy_moves: int = LAZY_MOVES,
    ) -> None:
        super().__init__(hosts, queue, policy, partition_of, clock, write_back)
        #: At most this many re-tier moves held in memory (0: every move is written).
        self.lazy_moves = lazy_moves
        #: Queue keys this frontier emptied by a re-tier move and whose tier's head has
        #: not reached them yet (at most HOLES_SIZE; forgotten with any partition): when
        #: the head gets there, the key is skipped without a table read (a miss costs a
        #: RocksDB get, and a crawl leaves ~2 holes a page). No write can fill a hole:
        #: enqueues and moves write at a tier's tail, past it, and a 429/503 puts its page
        #: back where that page was popped, which held the page, not a hole.
        self._holes: set[str] = set()
        #: Re-tier moves not written to `queue` ("lazy moves"): new queue key → (the
        #: item as moved, the key where the item still lies in `queue`). A move costs a
        #: queue read and the host state's tail (written once per message anyway)
        #: instead of a delete and a put, each a RocksDB write and a changelog record
        #: (~2.3 moves a page). The item is served from here when its tier's head
        #: reaches the new key, and its old key deleted then, the one write a dispatch
        #: costs anyway; if the old tier's head reaches the old key first, the move is
        #: written then (`_take`), so no queued item ever lies below its tier's head.
        #: Lost with the worker or the partition (`forget`): the new key then reads as
        #: an empty slot and the item is served at its old key, so every URL is still
        #: fetched once and only its promotion is lost.
        self._lazy: dict[str, tuple[QueueItem, str]] = {}
        #: The other way round: old key of each lazy move → its new key. The old key
        #: still holds the item in `queue`, but it is no longer there for this frontier.
        self._moved: dict[str, str] = {}
        #: Lazy moves written out because the old tier's head reached the old key first.
        self.moves_materialized = 0

    def forget(self, partition: int) -> None:
        """Drop the holes, and the partition's lazy moves, with the rest (`HostStore.forget`)."""
        super().forget(partition)
        self._holes.clear()  # the next owner makes and fills its own
        if self._lazy:
            # Their items lie at their old keys still, above their tiers' heads (see
            # `_take`): whoever adopts the partition serves them there.
            lazy, moved, partition_of = self._lazy, self._moved, self.partition_of
            for new_key in [k for k in lazy if partition_of(k.split("\x00", 1)[0]) == partition]:
                del moved[lazy.pop(new_key)[1]]

    # -- re-tier and the registry's slots -------------------------------------------

    def retier(self, url: str, tier: int, seq: int, new_tier: int) -> tuple[int, int] | None:
        """Move a still-queued URL from slot (tier, seq) of its host's queue to the tail
        of `new_tier` (its in-link count rose); returns the new slot, or None when the
        item is not there any more (dispatched, drained, moved) or would not move up,
        and for a page a 429/503 sent back to the head of its tier (its registry state
        names no slot since, so url-seen asks no move for it).

        The old slot is left empty: a hole in a tier's key range, skipped when the
        head reaches it. The host state counts its holes (``holes``), so ``pending``
        and ``queued`` count URLs waiting, not slots.
        The move is held in memory (`_lazy`), the item left in the table at its old
        key, unless `lazy_moves` are held already: then it is written, a delete and a put.
        """
        authority = authority_of(url)
        state = self._get(authority)
        if state is None or not 0 <= new_tier < tier < TIERS:
            return None
        if not int(state["heads"][tier]) <= seq < int(state["tails"][tier]):
            return None
        old_key = queue_key(authority, tier, seq)
        lazy = self._lazy
        entry = lazy.get(old_key)
        if entry is not None:
            item, where = entry  # moved before: it still lies at `where` in the table
        elif old_key in self._moved or old_key in self._holes:
            return None  # emptied by a move (its item lies there still if lazy)
        else:
            found = self.queue.get(old_key)
            if found is None:
                return None
            item, where = found, old_key
        if item.get("url") != url or item.get("retries"):
            # another URL's item (never seen), or a page a 429/503 put back at the head
            # of its tier to go first: left where it is
            return None
        state = copy_state(state)
        tail = int(state["tails"][new_tier])
        new_key = queue_key(authority, new_tier, tail)
        moved = {**item, "tier": new_tier}
        if entry is not None:
            del lazy[old_key]
            lazy[new_key] = (moved, where)
            self._moved[where] = new_key
        elif len(lazy) < self.lazy_moves:
            lazy[new_key] = (moved, where)
            self._moved[where] = new_key
        else:
            del self.queue[old_key]
            self.queue[new_key] = moved
        state["tails"][new_tier] = tail + 1
        state["holes"] = int(state.get("holes", 0)) + 1  # the old slot, until passed
        self._put(authority, state)
        self._hole(old_key)
        return new_tier, tail

    def accounts_for(self, url: str, tier: int, seq: int) -> bool:
        """Whether the host's queue, as this frontier serves it, accounts for `url`
        queued in slot (tier, seq) (what the URL registry's ``queued`` state names, and
        its ``fetching`` state, the slot it was served from): the host state knows that
        enqueue (the slot is below its tier's tail) and the slot does not hold another
        URL's item. A slot its head has passed was served; an empty one is a hole a
        move left (a lazy move lost with a restart leaves the item at its old key,
        where it is served).

        False means the enqueue was lost while the registry kept it: after the whole
        cluster went away, recovery replays each table's changelog over the local
        RocksDB, and a host state whose last changelog records never reached the
        broker comes back older than the queue item and the registry state written
        beside it, so the item lies past the tail, where the next enqueue writes
        another URL over it. The frontier message that queued it is read again (its
        offset was never committed), and must queue it again, not drop it as known.
        """
        authority = authority_of(url)
        state = self._get(authority)
        if state is None or not 0 <= tier < TIERS or "tails" not in state:
            return False
        if seq >= int(state["tails"][tier]):
            return False  # the host state never heard of that enqueue
        key = queue_key(authority, tier, seq)
        if seq < int(state["heads"][tier]):
            # served (dispatched, decided or skipped) already; but a dispatched item
            # stays until its fetch ends, and one of another URL there took the slot
            # after the host state came back older
            item = self.queue.get(key)
            return item is None or item.get("url") == url
        entry = self._lazy.get(key)
        if entry is not None:
            return entry[0].get("url") == url
        if key in self._moved or key in self._holes:
            return True  # this frontier moved the item on from here
        item = self.queue.get(key)
        return item is None or item.get("url") == url

    # -- popping, putting back, draining ------------------------------------------

    def _upgrade(self, authority: str, state: HostState) -> HostState:
        """A host state from before the tiers (one FIFO range of `authority\x00seq`
        keys): its queued URLs move, in order, into the tier each belongs in."""
        state = dict(state)
        head, tail = int(state.pop("head", 0)), int(state.pop("tail", 0))
        state["heads"], state["tails"], state["wrr"] = [0] * TIERS, [0] * TIERS, [0] * TIERS
        state.setdefault("pages", int(state.get("fetched", 0)))
        for seq in range(head, tail):
            item = self.queue.pop(f"{authority}\x00{seq:012d}", None)
            if item is None:
                continue
            tier = tier_for(int(item.get("priority", 0)), int(item.get("depth", 0)))
            at = state["tails"][tier]
            self.queue[queue_key(authority, tier, at)] = {**item, "tier": tier}
            state["tails"][tier] = at + 1
        self._put(authority, state)
        return state

    def _push_front(self, authority: str, state: HostState, item: QueueItem) -> str:
        """Put an item back at the head of its tier (a lost or throttled fetch goes
        first), marked ``again``: a page to fetch though it was dispatched before;
        returns its queue key."""
        tier = min(TIERS - 1, max(0, int(item.get("tier", TIERS - 1))))
        head = int(state["heads"][tier]) - 1
        key = queue_key(authority, tier, head)
        self.queue[key] = {**item, "again": 1}
        state["heads"][tier] = head
        self._count(authority, 1)
        return key

    def _pop_next(
        self, authority: str, state: HostState
    ) -> tuple[QueueItem | None, str, tuple[int, int]]:
        """The host's next URL, from the tier smooth weighted round robin picks, the
        queue key where its item lies still, and the slot (tier, sequence) its head
        passed: the item is left in ``queue`` (see `_mark_busy`), the caller deletes
        it (`_unqueue`) unless it dispatches it.

        Each non-empty tier earns its weight; the richest is served and pays the sum
        of the weights in play. Over any run the tiers are served in proportion to
        their weights (8:4:2:1 of 15), and a lower tier waits at most one cycle.
        """
        heads, tails, credit = state["heads"], state["tails"], state["wrr"]
        best, total = -1, 0
        for tier in range(TIERS):
            if int(tails[tier]) > int(heads[tier]):
                credit[tier] += TIER_WEIGHTS[tier]
                total += TIER_WEIGHTS[tier]
                if best < 0 or credit[tier] > credit[best]:
                    best = tier
            else:
                credit[tier] = 0  # an empty tier neither saves up nor owes
        if best < 0:
            return None, "", (0, 0)
        credit[best] -= total
        seq = int(heads[best])
        heads[best] = seq + 1
        item, key = self._take(queue_key(authority, best, seq), keep=True)
        holes = int(state.get("holes", 0))
        if item is None and holes > 0:
            holes -= 1  # a re-tier's hole passed: no URL left the queue
            state["holes"] = holes
        else:
            self._count(authority, -1)
        if holes and sum(map(int, tails)) == sum(map(int, heads)):
            state["holes"] = 0  # every slot passed: a count left over is let go
        return item, key, (best, seq)

    def _take(self, key: str, keep: bool = False) -> tuple[QueueItem | None, str]:
        """Pop a queue item; a hole this frontier made is skipped without a read.
        Returns the item and the key where it lies in ``queue``: with ``keep`` it is
        left there (`_pop_next`), else deleted (and the key is "").

        A lazy move's item comes from memory, and its old key is deleted (the one
        write a pop here would cost). When the old tier's head reaches the old key of
        a lazy move still waiting, the move is written out first (the item put at its
        new key, the old key deleted): after a restart the item must be where the
        table says, above its tier's head, or it would never be served."""
        lazy = self._lazy
        if lazy:
            entry = lazy.pop(key, None)
            if entry is not None:
                item, where = entry
                del self._moved[where]
                if not keep:
                    del self.queue[where]
                    return item, ""
                # still in its old tier, above that tier's head: when the head gets
                # there, or a re-tier asks for it, it is not there for this frontier
                self._hole(where)
                return item, where
            new_key = self._moved.pop(key, None)
            if new_key is not None:
                item, _ = lazy.pop(new_key)
                self.queue[new_key] = item
                del self.queue[key]
                self._holes.discard(key)
                self.moves_materialized += 1
                return None, ""
        holes = self._holes
        if key in holes:
            holes.discard(key)
            return None, ""
        if keep:
            found = self.queue.get(key)
            return found, key if found is not None else ""
        return self.queue.pop(key, None), ""

    def _hole(self, key: str) -> None:
        holes = self._holes
        if len(holes) >= HOLES_SIZE:
            holes.clear()  # those are read when the head gets there, as before
        holes.add(key)

    def _unqueue(self, key: str) -> None:
        """Delete a queue item `_pop_next` left in place."""
        if key:
            with contextlib.suppress(KeyError):  # (a table recovered without it)
                del self.queue[key]

    def _settle(self, state: HostState, requeued_at: str = "") -> None:
        """The host's fetch in flight is over: delete its queue item, left in ``queue``
        since the dispatch (`_mark_busy`), unless `requeued_at` is that very key (the
        page went back to the head of its tier, where it was: `_push_front`)."""
        key = state.pop("inflight_key", None)
        if key and key != requeued_at:
            self._unqueue(str(key))

    def _drain(self, host: str, state: HostState, outcome: str, reason: str) -> list[Decision]:
        """Decide every URL queued for a host (parked, robots.txt unreachable, page
        budget spent). Moves held in memory are settled on the way (`_take`): the
        tiers go highest first, so a move's new key comes before its old one."""
        decisions = []
        waiting = pending(state)
        for tier in range(TIERS):
            head, tail = int(state["heads"][tier]), int(state["tails"][tier])
            for seq in range(head, tail):
                item, _ = self._take(queue_key(host, tier, seq))
                if item:
                    decisions.append(
                        Decision(item["url"], host, outcome, reason, int(item["depth"]))
                    )
            state["heads"][tier] = tail
        self._count(host, -waiting)
        state["holes"] = 0
        return decisions
