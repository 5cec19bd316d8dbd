"""A model of PyTorch's CUDA caching allocator, to replay a training step's allocations and frees.

What a user sees (`torch.cuda.max_memory_reserved`, nvidia-smi) and what ends a run (a block the
allocator cannot find) is the allocator's doing, not the tensors'. Every rule below follows
pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp at commit 001074d25084fdb87a799823e395a50f5ec044d3
(class DeviceCachingAllocator; function named at each rule). One stream, no CUDA graphs, no
`roundup_power2_divisions`, no garbage-collection threshold: the defaults a Trainer run has.

- sizes round up to 512 B (round_size, kMinBlockSize); requests <= 1 MiB go to the small pool
  (get_pool, kSmallSize), the rest to the large pool;
- a new segment (cudaMalloc) is 2 MiB for a small request, 20 MiB for a large one under 10 MiB,
  else the request rounded up to 2 MiB (get_allocation_size: kSmallBuffer, kLargeBuffer,
  kMinLargeAlloc, kRoundLarge);
- a request takes the smallest cached block of its pool that is large enough (get_free_block:
  pool.blocks.lower_bound, blocks ordered by size then address); blocks >= max_split_size serve only
  requests >= max_split_size and within 20 MiB of them;
- the rest of a block is split off when at least 512 B remain in the small pool, or, in the large
  pool, when the request is under max_split_size and more than 1 MiB remains (should_split); with
  expandable segments every pool splits at 512 B;
- a freed block merges with free neighbours of its segment (free_block, try_merge_blocks);
- when cudaMalloc fails: release cached oversize blocks (release_available_cached_blocks, only with
  a max_split_size), then every cached block that is not split, and retry (malloc:
  release_cached_blocks then alloc_block(isRetry=true), counted in num_alloc_retries); then OOM;
- expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): one segment per pool that
  grows by mapping pages of 2 MiB (small pool) or 20 MiB (large pool) at the lowest free address
  that fits (find_expandable_block, map_block, try_allocate_expandable_block; Note [Expandable
  Segments]), and a release unmaps every wholly free page (release_blocks -> unmap_block).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from advisor.units import MiB

K_MIN_BLOCK = 512  # kMinBlockSize
K_SMALL_SIZE = 1 * MiB  # kSmallSize
K_SMALL_BUFFER = 2 * MiB  # kSmallBuffer
K_LARGE_BUFFER = 20 * MiB  # kLargeBuffer
K_MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
K_ROUND_LARGE = 2 * MiB  # kRoundLarge
UNLIMITED = 1 << 62
# Address space of one expandable segment: 1 1/8 of the device's memory (find_expandable_block).
ADDRESS_SPACE_FACTOR = 1.125


class OutOfMemory(Exception):
    """The allocator could not find or create a block, even after releasing its cache."""


def round_size(n: int) -> int:
    """round_size: at least 512 B, rounded up to a multiple of 512 B."""
    return K_MIN_BLOCK if n < K_MIN_BLOCK else K_MIN_BLOCK * -(-n // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """get_allocation_size: the cudaMalloc size for a rounded request without a cached block."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * -(-size // K_ROUND_LARGE)


class Block:
    __slots__ = ("ptr", "size", "allocated", "mapped", "prev", "next", "small", "expandable")

    def __init__(self, ptr: int, size: int, small: bool, expandable: bool, mapped: bool = True):
        self.ptr, self.size, self.small, self.expandable, self.mapped = ptr, size, small, expandable, mapped
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


class _Pool:
    """Cached free (mapped) blocks ordered by (size, address) as BlockComparatorSize; unmapped
    blocks of expandable segments ordered by address (BlockComparatorAddress)."""

    def __init__(self, small: bool):
        self.small = small
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[tuple[int, int], Block] = {}
        self.unmapped: list[tuple[int, int]] = []  # (ptr, id) sorted by address
        self.unmapped_blocks: dict[int, Block] = {}

    def insert(self, b: Block) -> None:
        if b.mapped:
            key = (b.size, b.ptr)
            bisect.insort(self.keys, key)
            self.blocks[key] = b
        else:
            bisect.insort(self.unmapped, (b.ptr, id(b)))
            self.unmapped_blocks[id(b)] = b

    def erase(self, b: Block) -> None:
        if b.mapped:
            key = (b.size, b.ptr)
            del self.keys[bisect.bisect_left(self.keys, key)]
            del self.blocks[key]
        else:
            del self.unmapped[bisect.bisect_left(self.unmapped, (b.ptr, id(b)))]
            del self.unmapped_blocks[id(b)]


@dataclass(frozen=True)
class ReplayResult:
    """What torch.cuda.memory_stats would say after the sequence (or at the failing request)."""

    peak_allocated: int  # allocated_bytes.all.peak (rounded block sizes)
    peak_reserved: int  # reserved_bytes.all.peak
    num_alloc_retries: int
    oom: bool


class CachingAllocator:
    """DeviceCachingAllocator on one device of `capacity` bytes (free memory for PyTorch's segments)."""

    def __init__(self, capacity: int | None = None, expandable: bool = False, max_split_size: int | None = None):
        self.capacity = capacity if capacity is not None else UNLIMITED
        self.expandable = expandable
        self.max_split = max_split_size if max_split_size is not None else UNLIMITED
        self.pools = {True: _Pool(True), False: _Pool(False)}
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.retries = 0
        self._next_ptr = 0
        self._segments: dict[bool, list[Block]] = {True: [], False: []}  # expandable segment heads

    # ------------------------------------------------------------------ public
    def malloc(self, nbytes: int) -> Block:
        """malloc: cached block, else a new segment, else release the cache and retry, else OOM."""
        size = round_size(nbytes)
        pool = self.pools[size <= K_SMALL_SIZE]
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = (self._alloc_block(pool, size, alloc_size)
                     or (self._release_available_cached_blocks(pool, size) and self._alloc_block(pool, size, alloc_size))
                     or self._retry_after_release(pool, size, alloc_size))
        if block is None:
            raise OutOfMemory(f"cannot allocate {size:,} B with {self.reserved:,} B reserved of {self.capacity:,}")
        if self._should_split(block, size):
            rest = Block(block.ptr + size, block.size - size, block.small, block.expandable)
            rest.prev, rest.next = block, block.next
            if block.next:
                block.next.prev = rest
            block.next, block.size = rest, size
            pool.insert(rest)
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block) -> None:
        """free -> free_block: merge with free neighbours and cache the result."""
        block.allocated = False
        self.allocated -= block.size
        pool = self.pools[block.small]
        for other in (block.prev, block.next):
            self._try_merge(block, other, pool)
        pool.insert(block)

    def release_cached_blocks(self) -> None:
        """release_cached_blocks -> release_blocks: cudaFree every cached block that is not split;
        in expandable segments unmap every wholly free page (unmap_block)."""
        for pool in self.pools.values():
            for key in list(pool.keys):
                b = pool.blocks.get(key)
                if b is None:
                    continue
                if b.expandable:
                    self._unmap(b, pool)
                elif not b.is_split():
                    pool.erase(b)
                    self.reserved -= b.size

    # ------------------------------------------------------------------ rules
    def _should_split(self, block: Block, size: int) -> bool:
        """should_split."""
        remaining = block.size - size
        if block.small or self.expandable:
            return remaining >= K_MIN_BLOCK
        return size < self.max_split and remaining > K_SMALL_SIZE

    def _get_free_block(self, pool: _Pool, size: int) -> Block | None:
        """get_free_block: best fit by (size, address); oversize-block limits; in an expandable
        segment a block counts with the unmapped pages behind it."""
        i = bisect.bisect_left(pool.keys, (size, -1))
        if i == len(pool.keys):
            return None
        b = pool.blocks[pool.keys[i]]
        if b.expandable:
            def grows_to(x: Block) -> int:
                return x.size + (x.next.size if x.next is not None and not x.next.mapped else 0)
            while i + 1 < len(pool.keys) and grows_to(pool.blocks[pool.keys[i + 1]]) < grows_to(b):
                i += 1
                b = pool.blocks[pool.keys[i]]
        if size < self.max_split <= b.size:
            return None
        if size >= self.max_split and b.size >= size + K_LARGE_BUFFER:
            return None
        pool.erase(b)
        return b

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int) -> Block | None:
        """alloc_block: cudaMalloc(alloc_size) if the device has it; with expandable segments map
        pages for `size` instead (try_allocate_expandable_block)."""
        if self.expandable:
            return self._expandable_block(pool, size)
        if self.reserved + alloc_size > self.capacity:
            return None
        b = Block(self._take_address(alloc_size), alloc_size, pool.small, False)
        self._grow_reserved(alloc_size)
        return b

    def _release_available_cached_blocks(self, pool: _Pool, size: int) -> bool:
        """release_available_cached_blocks: with a max_split_size, cudaFree cached oversize blocks,
        the smallest that is large enough, else the largest ones until enough is freed."""
        if self.max_split == UNLIMITED:
            return False
        want = max(size, self.max_split)
        i = bisect.bisect_left(pool.keys, (want, -1))
        if i < len(pool.keys):
            self._cudafree(pool, pool.blocks[pool.keys[i]])
            return True
        released, j = 0, len(pool.keys) - 1
        while released < want and j >= 0 and pool.keys[j][0] >= self.max_split:
            b = pool.blocks[pool.keys[j]]
            released += b.size
            self._cudafree(pool, b)
            j -= 1
        return released >= want

    def _retry_after_release(self, pool: _Pool, size: int, alloc_size: int) -> Block | None:
        """malloc's last resort: release_cached_blocks, then alloc_block(isRetry=true)."""
        self.release_cached_blocks()
        self.retries += 1
        return self._alloc_block(pool, size, alloc_size)

    # ------------------------------------------------------------------ expandable segments
    def _expandable_block(self, pool: _Pool, size: int) -> Block | None:
        """try_allocate_expandable_block: from the lowest-address run of free and unmapped blocks
        with room (find_expandable_block), map what is missing, merge, hand out the block."""
        c = self._find_expandable(pool, size)
        if not c.mapped:
            c = self._map(c, min(c.size, size), pool)
            if c is None:
                return None
        while c.size < size:
            nxt = self._map(c.next, min(size - c.size, c.next.size), pool)
            if nxt is None:
                return None
            c = nxt
        pool.erase(c)
        return c

    def _find_expandable(self, pool: _Pool, size: int) -> Block:
        def room(b: Block | None) -> bool:
            got = 0
            while got < size and b is not None and not b.allocated:
                got += b.size
                b = b.next
            return got >= size

        for _, key in list(pool.unmapped):
            c = pool.unmapped_blocks[key]
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if room(c):
                return c
        span = int(min(self.capacity, UNLIMITED >> 4) * ADDRESS_SPACE_FACTOR) + K_LARGE_BUFFER
        seg = Block(self._take_address(span), span, pool.small, True, mapped=False)
        pool.insert(seg)
        return seg

    def _map(self, b: Block, size: int, pool: _Pool) -> Block | None:
        """map_block: map whole pages (2 MiB small, 20 MiB large) from b's start; the rest of b stays
        unmapped; merge with free mapped neighbours."""
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        mapped = min(b.size, page * -(-size // page))
        if self.reserved + mapped > self.capacity:
            return None
        pool.erase(b)
        b.mapped = True
        if mapped < b.size:
            rest = Block(b.ptr + mapped, b.size - mapped, b.small, True, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next:
                b.next.prev = rest
            b.next, b.size = rest, mapped
            pool.insert(rest)
        for other in (b.prev, b.next):
            self._try_merge(b, other, pool)
        pool.insert(b)
        self._grow_reserved(mapped)
        return b

    def _unmap(self, b: Block, pool: _Pool) -> None:
        """unmap_block: the wholly free pages inside a cached block go back to CUDA."""
        page = K_SMALL_BUFFER if pool.small else K_LARGE_BUFFER
        start, end = -(-b.ptr // page) * page, (b.ptr + b.size) // page * page
        if end <= start:
            return
        pool.erase(b)
        pieces = [(b.ptr, start - b.ptr, True), (start, end - start, False), (end, b.ptr + b.size - end, True)]
        prev, after = b.prev, b.next
        made = []
        for ptr, size, mapped in pieces:
            if size:
                x = Block(ptr, size, b.small, True, mapped=mapped)
                x.prev = made[-1] if made else prev
                if x.prev is not None:
                    x.prev.next = x
                made.append(x)
        made[-1].next = after
        if after is not None:
            after.prev = made[-1]
        self.reserved -= end - start
        for x in made:
            pool.insert(x)
        middle = next(x for x in made if not x.mapped)
        for other in (middle.prev, middle.next):
            self._try_merge(middle, other, pool)

    # ------------------------------------------------------------------ helpers
    def _try_merge(self, dst: Block, src: Block | None, pool: _Pool) -> None:
        """try_merge_blocks: absorb a free neighbour in the same mapped state."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        in_pool = (dst.size, dst.ptr) in pool.blocks if dst.mapped else id(dst) in pool.unmapped_blocks
        if in_pool:
            pool.erase(dst)
        pool.erase(src)
        if dst.prev is src:
            dst.ptr, dst.prev = src.ptr, src.prev
            if dst.prev:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next:
                dst.next.prev = dst
        dst.size += src.size
        if in_pool:
            pool.insert(dst)

    def _cudafree(self, pool: _Pool, b: Block) -> None:
        pool.erase(b)
        self.reserved -= b.size

    def _grow_reserved(self, n: int) -> None:
        self.reserved += n
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _take_address(self, n: int) -> int:
        ptr = self._next_ptr
        self._next_ptr += n + K_LARGE_BUFFER  # segments never touch: blocks merge only within one
        return ptr

    def result(self, oom: bool = False) -> ReplayResult:
        return ReplayResult(self.peak_allocated, self.peak_reserved, self.retries, oom)


Event = tuple[int, int]  # (tensor id, bytes): bytes > 0 allocates that tensor, 0 frees it


def replay(events: Iterable[Event], capacity: int | None = None, expandable: bool = False,
           max_split_size: int | None = None) -> ReplayResult:
    """Run an allocation/free sequence through the allocator on a device with `capacity` bytes
    for PyTorch's segments (None: unlimited, what max_memory_reserved shows on a large card)."""
    alloc = CachingAllocator(capacity, expandable, max_split_size)
    live: dict[int, Block] = {}
    try:
        for tid, nbytes in events:
            if nbytes:
                live[tid] = alloc.malloc(nbytes)
            else:
                b = live.pop(tid, None)
                if b is not None:
                    alloc.free(b)
    except OutOfMemory:
        return alloc.result(oom=True)
    return alloc.result()


def needed_capacity(events: list[Event], expandable: bool = False, resolution: int = 2 * MiB) -> tuple[int, ReplayResult]:
    """The smallest device (bytes for PyTorch's segments, to `resolution`) on which the sequence
    does not run out of memory, and what an unlimited device would show: a bisection between the
    peak of the rounded allocations and the unlimited peak reserved (which always suffices)."""
    shows = replay(events, None, expandable)
    lo, hi = shows.peak_allocated, shows.peak_reserved
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        if replay(events, mid, expandable).oom:
            lo = mid
        else:
            hi = mid
    return hi, shows
