"""Property tests of the block pool and its KV manager: random start / append / free sequences."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.engine.block_pool import BlockPool
from kvviz.engine.kv_manager import KVCacheManager
from kvviz.engine.request import Request
from kvviz.engine.sampling import SamplingParams

BLOCK = 4


def owners_by_block(requests: dict[int, Request]) -> dict[int, set[int]]:
    owners: dict[int, set[int]] = {}
    for owner, request in requests.items():
        for block_id in request.block_table:
            owners.setdefault(block_id, set()).add(owner)
    return owners


operations = st.lists(st.tuples(st.sampled_from(["start", "append", "free"]),
                                st.integers(0, 5), st.integers(1, 40)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(4, 24), st.booleans())
def test_random_operations_keep_the_invariants(ops, num_blocks, prefix_caching):
    pool = BlockPool(num_blocks, BLOCK, prefix_caching)
    kv = KVCacheManager(pool)
    live: dict[int, Request] = {}
    next_owner = 0
    for op, which, length in ops:
        owners = sorted(live)
        if op == "start":
            # prompts drawn from a few shared shapes, so prefixes repeat
            prompt = [which % 3] * BLOCK * (length // BLOCK) + list(range(length % BLOCK + 1))
            request = Request(next_owner, prompt, SamplingParams(), arrival=0)
            hit = kv.find_prefix(request)
            assert hit.num_tokens < len(prompt)  # never the last token
            free_before, events_before = pool.num_free_blocks, len(pool.events)
            if not kv.allocate_slots(request, len(prompt) - hit.num_tokens, hit):
                # refused: nothing changed
                assert (request.block_table, pool.num_free_blocks, len(pool.events)) == ([], free_before, events_before)
                continue
            assert request.block_table[:len(hit.block_ids)] == hit.block_ids
            live[next_owner], next_owner = request, next_owner + 1
        elif op == "append" and owners:
            request = live[owners[which % len(owners)]]
            request.output_token_ids.append(length)
            if not kv.allocate_slots(request, request.num_tokens - request.num_computed_tokens):
                request.output_token_ids.pop()  # it waits, as a preempted request would
                continue
        elif op == "free" and owners:
            kv.free(live.pop(owners[which % len(owners)]))
            continue
        else:
            continue
        request.num_computed_tokens = request.num_tokens  # the forward pass ran
        assert len(request.block_table) * BLOCK >= request.num_tokens
        assert len(request.block_hashes) == request.num_tokens // BLOCK  # its full blocks, all registered
        pool.check_invariants(owners_by_block(live))
        used = {b for r in live.values() for b in r.block_table}
        assert pool.num_free_blocks + len(used) == pool.num_blocks
    for owner in list(live):
        kv.free(live.pop(owner))
    pool.check_invariants({})
    assert pool.num_free_blocks == num_blocks


def test_prefix_hit_reuses_blocks_and_lru_evicts_the_tail_first():
    pool = BlockPool(6, BLOCK)
    prompt = list(range(10))  # two full blocks and a partial one
    table = pool.allocate(3, owner=0)
    parent = None
    for i in range(2):
        parent = pool.cache_full_block(table[i], parent, tuple(prompt[i * BLOCK:(i + 1) * BLOCK]))
    pool.free(table, owner=0)
    hit, _ = pool.find_cached_prefix(prompt)
    assert hit == table[:2]
    assert pool.find_cached_prefix(prompt[:8])[0] == table[:1]  # never covers the last token
    assert pool.find_cached_prefix([99] + prompt[1:])[0] == []  # the chain breaks at block 0
    # the never-used blocks go first; then the freed tail (table[2]), then the cached head last
    order = pool.allocate(6, owner=1)
    assert order[:3] == [3, 4, 5] and order[3:] == [table[2], table[1], table[0]]
    assert pool.num_evictions == 2 and not pool.cached_blocks
