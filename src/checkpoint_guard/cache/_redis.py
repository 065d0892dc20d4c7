"""``RedisHistoryCache``: the shared backend, the entry model of ``_base.py`` in one Redis
hash per thread, whose tags a reader verifies (a mismatch is a miss, ``rejected``).
Layout, tags and why they suffice: docs/design.md, "The Redis cache: layout and trust"."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import hmac
import importlib
import re
import threading
import uuid
import weakref
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Concatenate, NamedTuple, ParamSpec, TypeVar, cast

import msgpack
from cachetools import LRUCache
from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._address import ThreadId
from .._errors import CodecError, ConfigError, check_range, redact_url
from .._io import Plan, Request, adrive, drive
from ._base import (
    DEFAULT_ISOLATE,
    DEFAULT_LOCAL_MAX_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    DEFAULT_TTL_SECONDS,
    MAX_BYTES_RANGE,
    TIMEOUT_SECONDS_RANGE,
    TTL_SECONDS_RANGE,
    Begin,
    CacheStats,
    Chunk,
    Counted,
    Probes,
    Seed,
    Step,
    Token,
    assemble,
    fresh_seed,
    fresh_writes,
    keep_chunk,
    keep_seed,
)
from ._codec import Misplaced, ValueCodec
from ._redis_url import ACCEPTED, check_redis_target, parse_sentinel_url

if TYPE_CHECKING:  # the 'redis' extra
    import redis
    import redis.asyncio

_LENT: Any = object()  # the decoded objects went to a reader; the tier holds the bytes

_Held = tuple[int, Any, bytes]  # (encoded size, decoded value or _LENT, bytes if _LENT)
_Kept = list[tuple[str, int, Any]]  # values a script stored: (field, encoded size, value)
_Made = tuple[int, bytes, bytes]  # an entry's (n, makeup digest, tag)
P = ParamSpec("P")
R = TypeVar("R")


class _Group(dict[str, _Held]):
    """One thread epoch's values in the local tier, by field; ``size``: them encoded."""

    size = 64


class _LocalTier(LRUCache[tuple[str, str], _Group]):
    """(thread key, epoch) -> its ``_Group``, bounded by their sizes (a plain dict per
    group: a long thread's read names thousands of fields, and an LRU step per field
    cost more than the copies). Guarded by the cache's lock."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=lambda group: group.size)

    def put(self, key: str, epoch: str, entries: Iterable[tuple[str, _Held]]) -> None:
        """Hold ``entries`` in the group, evicting others to fit (or not at all)."""
        group = self.get((key, epoch)) or _Group()
        for field, entry in entries:
            old = group.get(field)
            group.size += entry[0] - (old[0] if old is not None else 0)
            group[field] = entry
        try:  # re-inserting makes cachetools measure the group again
            self[(key, epoch)] = group
        except ValueError:  # larger than the whole tier
            self.pop((key, epoch), None)


class _Script(NamedTuple):
    text: str
    sha: str  # what EVALSHA names it by


def _lua(name: str, *libs: str) -> _Script:
    """``lua/{name}.lua`` after the ``lua/lib_{lib}.lua`` it calls (no includes in Redis)."""
    folder = resources.files(__package__).joinpath("lua")
    parts = [folder.joinpath(f"lib_{lib}.lua").read_text() for lib in libs]
    text = "".join([*parts, folder.joinpath(f"{name}.lua").read_text()])
    return _Script(text, hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest())


_INDEX = _lua("index", "boot", "values", "live", "index")
_BEGIN = _lua("begin", "boot", "live")
_FENCE = _lua("fence", "boot", "newer")
_UNFENCE = _lua("unfence", "boot")
_DROP = _lua("drop", "boot")
_EXTEND = _lua("extend", "boot", "newer", "live", "index")


# -- the requests a plan yields (``checkpoint_guard._io``); the target is a client ------


@dataclass(frozen=True, slots=True)
class _Eval(Request[Any, Any]):
    """A script call on a thread's hash and record (sent whole to a server lacking it)."""

    script: _Script
    key: str
    args: list[Any]

    def run(self, target: Any) -> Any:
        from redis.exceptions import NoScriptError

        try:
            return target.evalsha(self.script.sha, 2, self.key, self.key + ":r", *self.args)
        except NoScriptError:
            target.script_load(self.script.text)
            return target.evalsha(self.script.sha, 2, self.key, self.key + ":r", *self.args)

    async def arun(self, target: Any) -> Any:
        from redis.exceptions import NoScriptError

        try:
            return await target.evalsha(self.script.sha, 2, self.key, self.key + ":r", *self.args)
        except NoScriptError:
            await target.script_load(self.script.text)
            return await target.evalsha(self.script.sha, 2, self.key, self.key + ":r", *self.args)


@dataclass(frozen=True, slots=True)
class _Get(Request[Any, Any]):
    """``HMGET key fields...``: values read outside a script."""

    key: str
    fields: list[str]

    def run(self, target: Any) -> Any:
        return target.hmget(self.key, self.fields)

    async def arun(self, target: Any) -> Any:
        return await target.hmget(self.key, self.fields)


@dataclass(frozen=True, slots=True)
class _DeleteMatching(Request[Any, None]):
    """Delete every key matching ``pattern`` (``SCAN``, then ``DEL`` in batches)."""

    pattern: str

    def run(self, target: Any) -> None:
        keys = list(target.scan_iter(match=self.pattern, count=500))
        for i in range(0, len(keys), 500):
            target.delete(*keys[i : i + 500])

    async def arun(self, target: Any) -> None:
        keys = [k async for k in target.scan_iter(match=self.pattern, count=500)]
        for i in range(0, len(keys), 500):
            await target.delete(*keys[i : i + 500])


# -- the wire format --------------------------------------------------------------------

# What an entry's layout assumes, in every thread's key: our layout (bumped when it
# changes) and the order LangGraph's writes_sort_key gives a step's writes (the saver's
# order, which the cache keeps), so a LangGraph whose order changed reads no older entry.
_LAYOUT = 3  # 2: pointers carry a tag (#28); 3: values named by their digest, tags by epoch (#38)
_SAMPLE = [
    ("~__pregel_pull, agent", "b", 0),
    ("~__pregel_pull, agent", "a", 1),
    ("~__pregel_push, ('~__pregel_pull', 'x'), 0, True", "c", 0),
    ("", "z", 2),
    ("~__pregel_pull, agent", "a", 0),
    ("~__pregel_push, 10, False", "d", 0),
    ("~__pregel_push, 2, False", "d", 1),
]


def order_fingerprint(sort_key: Callable[[str, str, int], Any] = writes_sort_key) -> str:
    """A digest of the order ``sort_key`` gives a fixed sample of writes (by behaviour)."""
    order = sorted(range(len(_SAMPLE)), key=lambda i: sort_key(*_SAMPLE[i]))
    return hashlib.sha256(repr(order).encode()).hexdigest()[:8]


ENTRY_FORMAT = f"{_LAYOUT}.{order_fingerprint()}"


_INLINE_VALUES = 256  # sent with a cold reader's index; a longer entry's: one HMGET after
_TAG_BYTES = 16
_SEED_LINK = b"seed\0"


def _link(prev: bytes, field: str) -> bytes:
    """The makeup digest after one more field (from ``_SEED_LINK`` and the seed's)."""
    return hashlib.blake2b(prev + field.encode(), digest_size=_TAG_BYTES).digest()


def _binding(key: str, epoch: str, pointer: str, n: int, makeup: bytes) -> bytes:
    """Binds a makeup digest to its entry's thread, epoch, place and length."""
    packed = msgpack.packb([key, epoch, pointer, n, makeup], use_bin_type=True)
    return hashlib.blake2b(packed, digest_size=_TAG_BYTES).digest()


# Every chunk with no writes (about half of them) is one field per thread and epoch:
# equal values, so any step may share it, and a fork never copies for it.
_EMPTY = "c:empty"
_EMPTY_BINDING = bytes(_TAG_BYTES)


def _bound(field: str) -> bytes:
    """The binding of a value stored under ``field`` (named by a digest of its place)."""
    return _EMPTY_BINDING if field == _EMPTY else bytes.fromhex(field[2 : 2 + 2 * _TAG_BYTES])


def _digest(*parts: Any) -> str:
    packed = msgpack.packb(
        [p if isinstance(p, (str, int, bytes)) else repr(p) for p in parts], use_bin_type=True
    )
    return hashlib.sha256(packed).hexdigest()[:40]


class _Index(NamedTuple):
    """One entry's index block in a script's reply (``lua/lib_index.lua``)."""

    seed_field: str  # or "-"
    segment: str
    n: int  # the entry is the segment's seed and its first n chunks
    first: int  # the first position sent: the reader knew 1..first-1 of the segment
    tag: bytes  # the pointer's tag
    tail: list[str]  # the chunk fields at positions first..n


def _parse_index(reply: Sequence[Any], at: int) -> tuple[_Index, int] | None:
    """The index block at ``reply[at:]`` and where the next starts; None if malformed."""
    try:
        seed_field, segment = _text(reply[at]), _text(reply[at + 1])
        n, first, tag = int(reply[at + 2]), int(reply[at + 3]), reply[at + 4]
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    end = at + 5 + n - first + 1
    if n < 0 or first < 1 or end < at + 5 or len(reply) < end or not isinstance(tag, bytes):
        return None
    tail = [_text(f) for f in reply[at + 5 : end]]
    return _Index(seed_field, segment, n, first, tag, tail), end


class _Known(NamedTuple):
    """What this process verified of a segment in an epoch: its seed field, its chunk
    fields at positions 1.. and the makeup digest after each (a warm read asks for and
    digests only new positions)."""

    seed_field: str
    fields: list[str]
    digests: list[bytes]


def _driven(
    plan: Callable[Concatenate[RedisHistoryCache, P], Plan[Any, R]],
) -> tuple[
    Callable[Concatenate[RedisHistoryCache, P], R],
    Callable[Concatenate[RedisHistoryCache, P], Coroutine[Any, Any, R]],
]:
    """The API method that drives ``plan`` on the sync client, and its async twin that
    drives it on the running event loop's client."""

    @functools.wraps(plan)
    def method(self: RedisHistoryCache, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return drive(plan(self, *args, **kwargs), self._sync())

    @functools.wraps(plan)
    async def amethod(self: RedisHistoryCache, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await adrive(plan(self, *args, **kwargs), self._async())

    return method, amethod


class RedisHistoryCache(Counted):
    """History cache shared by every worker through Redis: ``url``, or a ready ``client``
    / ``aclient`` (``redis.Redis`` / ``redis.asyncio.Redis``, a ``RedisCluster`` or a
    Sentinel's ``master_for`` client); ``cluster=True`` reads ``url`` as a node of a
    Redis Cluster, a ``redis+sentinel://`` url names the primary its sentinels manage
    (docs/scale-out.md). ``key_prefix`` isolates deployments sharing one Redis;
    ``ttl_seconds`` (0: none) expires idle threads; ``timeout_seconds`` bounds every
    Redis call (a slow or stopped Redis costs at most that per call, then the saver
    layer answers from the database). ``serde`` is the saver's serializer;
    ``local_max_bytes`` bounds the values this process keeps decoded
    (``stats()["local_bytes"]``). Sync and async (one async client per event loop)."""

    tier = "redis"  # the ``cache`` attribute of its telemetry

    def __init__(
        self,
        url: str | None = None,
        *,
        client: redis.Redis | redis.RedisCluster | None = None,
        aclient: redis.asyncio.Redis | redis.asyncio.RedisCluster | None = None,
        key_prefix: str = "cg",
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        serde: SerializerProtocol | None = None,
        local_max_bytes: int = DEFAULT_LOCAL_MAX_BYTES,
        isolate: bool = DEFAULT_ISOLATE,
        cluster: bool = False,
    ) -> None:
        if url is None and client is None and aclient is None:
            raise ConfigError("url", None, "a Redis URL, a client or an aclient")
        if url is not None:
            try:
                check_redis_target(url, cluster)
            except ValueError as exc:
                raise ConfigError("url", redact_url(url), ACCEPTED, detail=str(exc)) from None
        if not isinstance(key_prefix, str) or not key_prefix or re.search(r"\s", key_prefix):
            raise ConfigError("key_prefix", key_prefix, "a non-empty string without whitespace")
        importlib.import_module("redis")  # the 'redis' extra: missing fails here, not on a read
        self.url = url
        self.cluster = cluster
        self.key_prefix = key_prefix
        check_range("ttl_seconds", ttl_seconds, *TTL_SECONDS_RANGE)
        self.ttl_ms = int(ttl_seconds * 1000) if ttl_seconds else 0
        self.timeout_seconds = check_range(
            "timeout_seconds", timeout_seconds, *TIMEOUT_SECONDS_RANGE
        )
        check_range("local_max_bytes", local_max_bytes, *MAX_BYTES_RANGE, integer=True)
        self.isolate = isolate  # False: hits share the local tier's objects
        self.codec = ValueCodec(serde)
        self._empty = self.codec.dumps_chunk((), _EMPTY_BINDING)  # for every empty step
        self._client = client
        self._aclients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self._given_aclient = aclient
        self._lock = threading.Lock()
        self._stats = CacheStats(tier=self.tier)
        self._stats.counts["rejected"] = 0
        self._local = _LocalTier(local_max_bytes)
        # thread key -> the epoch of the values last decoded into the local tier
        self._held: LRUCache[str, str] = LRUCache(maxsize=100_000)
        # (thread key, epoch, segment) -> what this process verified of it
        self._segments: LRUCache[tuple[str, str, str], _Known] = LRUCache(
            maxsize=400_000, getsizeof=lambda known: len(known.fields) + len(known.digests) + 1
        )
        # (thread key, ns, channel) -> the segment its last entry was read from
        self._hints: LRUCache[tuple[str, str, str], str] = LRUCache(maxsize=100_000)
        # (thread key, epoch, pointer) -> an entry this process verified or made: what
        # a miss needs to extend it (the child's tag)
        self._tags: LRUCache[tuple[str, str, str], _Made] = LRUCache(maxsize=100_000)

    def __repr__(self) -> str:
        return f"RedisHistoryCache(key_prefix={self.key_prefix!r})"

    # -- clients ---------------------------------------------------------------------------

    def _sync(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = _connect(self.url, self.cluster, False, self.timeout_seconds)
            return self._client

    def _async(self) -> Any:
        if self._given_aclient is not None:
            return self._given_aclient
        loop = asyncio.get_running_loop()
        with self._lock:
            aclient = self._aclients.get(loop)
            if aclient is None:
                aclient = _connect(self.url, self.cluster, True, self.timeout_seconds)
                self._aclients[loop] = aclient
            return aclient

    def _created(self) -> list[Any]:
        """The sync client this cache made, forgotten, to close."""
        with self._lock:
            client, self._client = self._client, None
        return [client] if client is not None and self.url is not None else []

    def _acreated(self) -> list[Any]:
        """The async clients this cache made, forgotten, to close (and the sync one)."""
        self.close()
        with self._lock:
            clients = list(self._aclients.values())
            self._aclients.clear()
        return clients

    # -- keys ------------------------------------------------------------------------------

    def _key(self, thread_id: ThreadId) -> str:
        # the digest is the key's hash tag: the thread's record shares its slot
        return f"{self.key_prefix}:t:{{{_digest('thread', ENTRY_FORMAT, thread_id)}}}"

    @staticmethod
    def _pointer(ns: str, channel: str, checkpoint_id: str) -> str:
        return "p:" + _digest(ns, channel, checkpoint_id)

    @staticmethod
    def _top(ns: str) -> str:
        return "m:" + _digest("top", ns)

    def _fresh(self, script: _Script, thread_id: ThreadId, *args: Any) -> _Eval:
        """A call of a script that may start a generation (a fresh id, the TTL, ``args``)."""
        return _Eval(script, self._key(thread_id), [uuid.uuid4().hex, self.ttl_ms, *args])

    # -- tags ------------------------------------------------------------------------------

    def _learn(self, key: str, epoch: str, pointer: str, value: Any) -> bool:
        """Remember an entry's makeup from its pointer ``segment,n,tag``; False if rejected."""
        try:
            _, count, tag = bytes(value).split(b",", 2)
            n = int(count)
        except (TypeError, ValueError):
            self._stats.reject("a malformed pointer")
            return False
        makeup = self._opened(key, epoch, pointer, n, tag)
        if makeup is None:
            self._stats.reject("a pointer whose tag was not made for its entry")
            return False
        with self._lock:
            self._tags[(key, epoch, pointer)] = (n, makeup, tag)
        return True

    def _opened(self, key: str, epoch: str, pointer: str, n: int, tag: bytes) -> bytes | None:
        """The makeup digest ``tag`` holds; None when it was not made (under the serde's
        key) for entry ``pointer`` of ``epoch`` with ``n`` chunks."""
        with self._lock:
            known = self._tags.get((key, epoch, pointer))
        if known is not None and known[0] == n and known[2] == tag:
            # the same bytes, checked for this entry before: a warm read decrypts no tag
            return known[1]
        try:
            plain = self.codec.loads(tag)
        except CodecError:
            return None
        if type(plain) is not bytes or len(plain) != 2 * _TAG_BYTES:
            return None
        makeup = plain[:_TAG_BYTES]
        if not hmac.compare_digest(plain[_TAG_BYTES:], _binding(key, epoch, pointer, n, makeup)):
            return None
        return makeup

    # -- reading ---------------------------------------------------------------------------

    def _hint(self, key: str, ns: str, channel: str) -> tuple[str, str, int]:
        """(held epoch, segment, positions of it this process knows) for a read."""
        with self._lock:
            held = self._held.get(key, "")
            seg = self._hints.get((key, ns, channel), "")
            known = self._segments.get((key, held, seg)) if seg else None
            return held, (seg if known else ""), len(known.fields) if known else 0

    def _verified(
        self, key: str, ns: str, channel: str, pointer: str, epoch: str, index: _Index
    ) -> tuple[str, list[str]] | None:
        """The entry ``index`` describes, (seed field, chunk fields), once its makeup
        matches its tag; None when it needs positions no longer known here or fails
        verification (``rejected``)."""
        slot = (key, epoch, index.segment)
        known_before = index.first - 1  # positions the reply left out: this process knew them
        with self._lock:
            known = self._segments.get(slot)
            if not known_before:
                fields = index.tail
            elif known is None or len(known.fields) < known_before:
                return None
            else:
                fields = known.fields[:known_before] + index.tail
        # the known positions' digests were verified before: reused
        chain = known.digests if known and known.seed_field == index.seed_field else []
        reuse = min(len(chain), known_before)
        makeup = chain[reuse - 1] if reuse else _link(_SEED_LINK, index.seed_field)
        grown: list[bytes] = []
        for field in fields[reuse:]:
            makeup = _link(makeup, field)
            grown.append(makeup)
        if self._opened(key, epoch, pointer, index.n, index.tag) != makeup:
            self._stats.reject("an entry whose chunk list does not match its tag")
            with self._lock:  # re-read whole next time
                self._segments.pop(slot, None)
            return None
        with self._lock:
            self._tags[(key, epoch, pointer)] = (index.n, makeup, index.tag)
            self._hints[(key, ns, channel)] = index.segment
            # another read may have learnt more meanwhile (a position's field never
            # changes within an epoch): the longer list stays
            known = self._segments.get(slot)
            seed_field = index.seed_field
            if known is None or known.seed_field != seed_field or len(known.fields) <= len(fields):
                with contextlib.suppress(ValueError):  # larger than the table: not kept
                    self._segments[slot] = _Known(seed_field, fields, chain[:reuse] + grown)
        return index.seed_field, fields

    def _indexed(
        self, key: str, ns: str, reply: Any, reads: Sequence[tuple[str, str]]
    ) -> tuple[str, list[tuple[str, list[str]]], int] | None:
        """A script's reply's epoch, the entries ``reads`` names (channel, checkpoint id),
        verified, and where they end; None if one is missing, malformed or rejected."""
        if not reply:
            return None
        epoch = _text(reply[0])
        entries: list[tuple[str, list[str]]] = []
        at = 1
        for channel, cid in reads:
            parsed = _parse_index(reply, at)
            if parsed is None:
                return None
            index, at = parsed
            entry = self._verified(key, ns, channel, self._pointer(ns, channel, cid), epoch, index)
            if entry is None:
                return None
            entries.append(entry)
        return epoch, entries, at

    def _decode(self, field: str, blob: bytes) -> Any:
        if field == _EMPTY:
            # the same bytes every time without encryption: no decoding
            if blob != self._empty and self.codec.loads_chunk(blob, _EMPTY_BINDING):
                raise CodecError("cached empty chunk holds writes")
            return ()
        if field.startswith("c:"):
            return self.codec.loads_chunk(blob, _bound(field))
        return self.codec.loads(blob, _bound(field))

    def _kept(self, field: str, value: Any) -> Any:
        """A value as the local tier keeps it: for copying readers, a chunk marked
        (``keep_chunk``), a seed as a ``Seed`` with its copiers (``keep_seed``)."""
        if not self.isolate:
            return value
        if field.startswith("c:"):
            return keep_chunk(value)
        return keep_seed(Seed(True, value))

    def _remember(
        self, key: str, epoch: str, fields: list[str], blobs: Any
    ) -> dict[str, Any] | None:
        """Fetched values decoded (this read's own objects; None if unusable), kept in
        the local tier: with ``isolate`` as bytes (``_LENT``), decoded again by a next
        read, so a cold reader (who reads a thread once) pays no copy."""
        if not blobs or len(blobs) != len(fields):
            return None
        values = dict(zip(fields, blobs, strict=True))  # a field named twice: once
        try:
            decoded = {field: self._decode(field, blob) for field, blob in values.items()}
        except Misplaced:
            # an older value written back, another thread's or epoch's copied in
            self._stats.reject("a value written for another thread, place or epoch")
            return None
        except CodecError as exc:
            self._stats.error("decode", exc)
            return None
        entries: list[tuple[str, _Held]] = [
            (f, (len(b), _LENT, b) if self.isolate else (len(b), decoded[f], b""))
            for f, b in values.items()
        ]
        with self._lock:
            self._local.put(key, epoch, entries)
            self._held[key] = epoch
        return decoded

    def _assemble(
        self, key: str, epoch: str, seed_field: str, fields: list[str], own: dict[str, Any]
    ) -> DeltaChannelHistory | None:
        wanted = ([seed_field] if seed_field != "-" else []) + fields
        with self._lock:
            group = self._local.get((key, epoch)) or _Group()
            try:
                held = {f: group[f] for f in wanted if f not in own}
            except KeyError:  # evicted locally in between
                return None
        values: dict[str, Any] = dict(own)
        taken: list[tuple[str, _Held]] = []
        for field, (size, value, blob) in held.items():
            if value is _LENT:  # read a second time: the tier takes its own objects now
                try:
                    value = self._kept(field, self._decode(field, blob))
                except CodecError as exc:
                    self._stats.error("decode", exc)
                    return None
                taken.append((field, (size, value, b"")))
            values[field] = value
        if taken:
            with self._lock:
                self._local.put(key, epoch, taken)
        # the tier's objects are shared between reads (with isolate, copied); this
        # read's own decoded objects are handed out
        if not self.isolate or not held:
            seed = Seed(True, values[seed_field]) if seed_field != "-" else Seed(False)
            return assemble(seed, [values[f] for f in fields], copy_values=False)
        writes: list[PendingWrite] = []
        run: list[Chunk] = []  # consecutive shared chunks
        for field in fields:
            if field in own:
                writes += fresh_writes(run)
                run = []
                writes += own[field]
            else:
                run.append(values[field])
        writes += fresh_writes(run)
        entry: DeltaChannelHistory = {"writes": writes}
        if seed_field != "-":  # the tier keeps a copying reader's seed as a Seed
            value = values[seed_field]
            entry["seed"] = fresh_seed(value) if seed_field in held else value
        return entry

    def _hit_or_miss(self, result: DeltaChannelHistory | None) -> DeltaChannelHistory | None:
        self._stats.add("hits" if result is not None else "misses")
        return result

    # -- writing ---------------------------------------------------------------------------

    def _extension(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[tuple[Step, str | None]],
        token: Token,
        reads: Sequence[tuple[str, str]] = (),
    ) -> tuple[_Eval, _Kept]:
        """The extend script call for ``steps`` (each with the node whose writes its
        chunk is, None: the parent) under ``token`` (generation and epoch), reading
        back ``reads`` (channel, checkpoint id), and the values it stores."""
        key = self._key(thread_id)
        gen, epoch = cast("tuple[str, str]", token)
        newest = max((step.child_id for step, _ in steps), default="")
        argv: list[Any] = [self.ttl_ms, gen, self._top(ns), newest, len(reads)]
        for channel, cid in reads:
            _, seg, known = self._hint(key, ns, channel)
            argv += [self._pointer(ns, channel, cid), seg, known]
        kept: _Kept = []
        made: dict[str, _Made] = {}  # by pointer
        for step, chunk_node in steps:
            node = step.parent_id if chunk_node is None else chunk_node
            argv += self._step_args(key, epoch, ns, step, node, made, kept)
        return _Eval(_EXTEND, key, argv), kept

    def _step_args(
        self,
        key: str,
        epoch: str,
        ns: str,
        step: Step,
        node: str,
        made: dict[str, _Made],
        kept: _Kept,
    ) -> list[Any]:
        """A step's ``extend.lua`` arguments; the child's (n, makeup, tag) go to ``made``,
        the values it stores to ``kept``."""
        seed_field, seed_bytes = "", b""
        if step.seed is not None and step.seed.present:
            seed_field = "e:" + _digest(key, epoch, ns, step.channel, "seed", node)
            seed_bytes = self.codec.dumps(step.seed.value, _bound(seed_field))
            kept.append((seed_field, len(seed_bytes), self._kept(seed_field, step.seed.value)))
        if step.chunk:
            chunk_field = "c:" + _digest(key, epoch, ns, step.channel, node)
            chunk_bytes = self.codec.dumps_chunk(step.chunk, _bound(chunk_field))
        else:
            chunk_field, chunk_bytes = _EMPTY, self._empty
        kept.append((chunk_field, len(chunk_bytes), self._kept(chunk_field, step.chunk)))
        child = self._pointer(ns, step.channel, step.child_id)
        parent, check = "", ""
        if step.seed is not None:
            n, makeup = 1, _link(_link(_SEED_LINK, seed_field or "-"), chunk_field)
        else:
            parent = self._pointer(ns, step.channel, step.parent_id)
            base = made.get(parent)
            if base is None:
                with self._lock:
                    base = self._tags.get((key, epoch, parent))
            if base is None:  # never verified here: the script refuses the step
                base, check = (0, b"", b""), "-"
            n, makeup = base[0] + 1, _link(base[1], chunk_field)
            check = check or hashlib.sha1(base[2], usedforsecurity=False).hexdigest()[:16]
        # the makeup and its binding, through the saver's serde (sealed under encryption)
        tag = self.codec.dumps(makeup + _binding(key, epoch, child, n, makeup))
        made[child] = (n, makeup, tag)
        segment = uuid.uuid4().hex[:16]
        seeds = "z:" + _digest(ns, step.channel) if seed_field else ""
        return [
            child,
            parent,
            chunk_field,
            chunk_bytes,
            seed_field,
            seed_bytes,
            segment,
            seeds,
            tag,
            check,
        ]

    def _extended(self, key: str, reply: Any, kept: _Kept) -> str | None:
        """The extend script's epoch when every step applied; what it stored goes local."""
        if not reply or not isinstance(reply, list):
            return None
        epoch = _text(reply[0])
        with self._lock:
            self._local.put(key, epoch, [(f, (size, value, b"")) for f, size, value in kept])
            # values of this epoch that other workers stored are fetched when missing
            self._held[key] = epoch
        return epoch

    # -- plans: each operation once, for both drivers ------------------------------------

    def _serve(
        self, key: str, epoch: str, entry: tuple[str, list[str]], values: Sequence[Any] | None
    ) -> Plan[Any, DeltaChannelHistory | None]:
        """A verified entry's history: the reply's values, else the tier's and a fetch."""
        seed_field, fields = entry
        missing = ([seed_field] if seed_field != "-" else []) + fields
        if values is None:
            with self._lock:
                held = self._local.get((key, epoch)) or _Group()
                # once each: equal chunks share a field (every empty one, without encryption)
                missing = list(dict.fromkeys(f for f in missing if f not in held))
            if missing:
                values = yield _Get(key, ["epoch", *missing])
                # only values of the index's epoch (within one, a field never changes)
                if not values or values[0] is None or _text(values[0]) != epoch or None in values:
                    return None
                values = values[1:]
        own = self._remember(key, epoch, missing, values) if missing else {}
        if own is None:
            return None
        return self._assemble(key, epoch, seed_field, fields, own)

    def _read(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> Plan[Any, DeltaChannelHistory | None]:
        key, pointer = self._key(thread_id), self._pointer(ns, channel, checkpoint_id)
        held, seg, known = self._hint(key, ns, channel)
        reply = yield _Eval(_INDEX, key, [pointer, held, seg, known, _INLINE_VALUES])
        found = self._indexed(key, ns, reply, [(channel, checkpoint_id)])
        if found is None:
            return self._hit_or_miss(None)
        epoch, [entry], end = found  # the values follow the index when the script sent them
        values = reply[end:] if len(reply) > end else None
        return self._hit_or_miss((yield from self._serve(key, epoch, entry, values)))

    def _begin(self, thread_id: ThreadId, ns: str, probes: Probes = ()) -> Plan[Any, Begin]:
        # one group of g probes per channel (padded with a field that never exists):
        # the script returns the first live pointer of each group whole
        g = max((len(ids) for _, ids in probes), default=0)
        fields: list[str] = []
        for channel, ids in probes:
            fields += [self._pointer(ns, channel, c) for c in ids]
            fields += ["-"] * (g - len(ids))
        gen, epoch, known, *flags = yield self._fresh(_BEGIN, thread_id, self._top(ns), g, *fields)
        key, epoch = self._key(thread_id), _text(epoch)
        found: dict[str, set[str]] = {}
        for group, (channel, ids) in enumerate(probes):
            hits = found.setdefault(channel, set())
            for i, c in enumerate(ids):
                flag, pointer = flags[group * g + i], fields[group * g + i]
                # bytes: the entry a miss would extend, whose tag it needs
                if self._learn(key, epoch, pointer, flag) if isinstance(flag, bytes) else flag:
                    hits.add(c)
        # the token names the epoch too: the tags a store makes are bound to it
        return Begin((_text(gen), epoch), epoch, bool(known), found)

    def _contains(
        self, thread_id: ThreadId, ns: str, channel: str, checkpoint_id: str
    ) -> Plan[Any, bool]:
        key, pointer = self._key(thread_id), self._pointer(ns, channel, checkpoint_id)
        epoch, value = yield _Get(key, ["epoch", pointer])
        if epoch is None or value is None:
            return False
        return self._learn(key, _text(epoch), pointer, value)

    def _store(
        self,
        thread_id: ThreadId,
        ns: str,
        channel: str,
        checkpoint_id: str,
        history: DeltaChannelHistory,
        token: Token,
    ) -> Plan[Any, bool]:
        # a history read whole: one chunk of every write, after its seed (if any)
        seed = Seed(True, history["seed"]) if "seed" in history else Seed(False)
        step = Step(channel, checkpoint_id, checkpoint_id, tuple(history["writes"]), seed)
        request, kept = self._extension(thread_id, ns, [(step, "\0whole:" + checkpoint_id)], token)
        return self._extended(self._key(thread_id), (yield request), kept) is not None

    def _extend_read(
        self,
        thread_id: ThreadId,
        ns: str,
        steps: Sequence[Step],
        token: Token,
        checkpoint_id: str,
        channels: Sequence[str],
    ) -> Plan[Any, dict[str, DeltaChannelHistory] | None]:
        key, reads = self._key(thread_id), [(c, checkpoint_id) for c in channels]
        request, kept = self._extension(thread_id, ns, [(s, None) for s in steps], token, reads)
        reply = yield request
        if self._extended(key, reply, kept) is None:
            return None
        found = self._indexed(key, ns, reply, reads)
        if found is None:  # stored, but a read-back entry is incomplete
            self._hit_or_miss(None)
            return None
        epoch, entries, _ = found
        out: dict[str, DeltaChannelHistory] = {}
        for channel, entry in zip(channels, entries, strict=True):
            hit = self._hit_or_miss((yield from self._serve(key, epoch, entry, None)))
            if hit is None:
                return None
            out[channel] = hit
        return out

    def _fence(
        self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str
    ) -> Plan[Any, bool]:
        # a writer dying before unfence leaves the thread uncached until its hash expires
        request = self._fresh(_FENCE, thread_id, self._top(ns), checkpoint_id, "f:" + writer)
        dropped = bool((yield request))
        if dropped:
            self._stats.add("invalidations")
        return dropped

    def _unfence(
        self, thread_id: ThreadId, ns: str, checkpoint_id: str, writer: str
    ) -> Plan[Any, None]:
        yield self._fresh(_UNFENCE, thread_id, "f:" + writer)

    def _drop_thread(self, thread_id: ThreadId) -> Plan[Any, None]:
        yield self._fresh(_DROP, thread_id)

    def _clear(self) -> Plan[Any, None]:
        # fences in flight go too, with the generations a reader could store under; the
        # SCAN pattern of every thread key under this prefix (its glob characters escaped)
        escaped = "".join("\\" + ch if ch in "*?[]\\" else ch for ch in self.key_prefix)
        yield _DeleteMatching(escaped + ":t:*")

    # -- the API: each operation's plan, driven on the sync or the async client ------------

    read, aread = _driven(_read)
    begin, abegin = _driven(_begin)
    contains, acontains = _driven(_contains)
    store, astore = _driven(_store)
    extend_read, aextend_read = _driven(_extend_read)
    fence, afence = _driven(_fence)
    unfence, aunfence = _driven(_unfence)
    drop_thread, adrop_thread = _driven(_drop_thread)
    clear, aclear = _driven(_clear)

    def close(self) -> None:
        """Close the sync client this cache created."""
        for client in self._created():
            client.close()

    async def aclose(self) -> None:
        """Close the clients this cache created (every event loop's, and the sync one)."""
        for aclient in self._acreated():
            await aclient.aclose()

    # -- sync only ---------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """``CacheStats``'s counters (``evictions`` 0: Redis evicts), ``rejected`` (entries
        failing verification) and ``local_bytes`` (the local tier, encoded)."""
        with self._lock:
            local = int(self._local.currsize)
        return {**self._stats.snapshot(), "local_bytes": local}

    def ping(self) -> bool:
        """Connect (if needed) and check that Redis answers."""
        return bool(self._sync().ping())

    def thread_bytes(self, thread_id: ThreadId) -> int:
        """Bytes Redis uses for one thread's entries (``MEMORY USAGE``)."""
        return int(self._sync().memory_usage(self._key(thread_id), samples=0) or 0)


def _connect(url: str | None, cluster: bool, is_async: bool, timeout: float) -> Any:
    """A client for ``url`` (a server, cluster or sentinel's primary) bounded by ``timeout``."""
    if url is None:
        raise RuntimeError("this RedisHistoryCache was given no url for this kind of client")
    lib: Any = importlib.import_module("redis.asyncio" if is_async else "redis")
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if cluster:
        # retried after a slot map refresh (a moved slot, a promoted replica), each try bounded
        return lib.RedisCluster.from_url(url, **options)
    options["retry_on_timeout"] = False
    sentinel = parse_sentinel_url(url)
    if sentinel is None:
        return lib.Redis.from_url(url, **options)
    manager = lib.Sentinel(list(sentinel.sentinels), sentinel_kwargs=dict(options))
    login = sentinel._asdict()  # past its sentinels and service: master_for's keywords
    del login["sentinels"], login["service"]
    return manager.master_for(sentinel.service, **login, **options)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
