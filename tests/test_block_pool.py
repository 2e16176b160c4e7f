"""Property tests of the block pool: random allocate / append / free / prefix-hit sequences."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.engine.block_pool import BlockPool

BLOCK = 4


def owners_by_block(tables: dict[int, list[int]]) -> dict[int, set[int]]:
    owners: dict[int, set[int]] = {}
    for owner, table in tables.items():
        for block_id in table:
            owners.setdefault(block_id, set()).add(owner)
    return owners


operations = st.lists(st.tuples(st.sampled_from(["start", "append", "free"]),
                                st.integers(0, 5), st.integers(1, 40)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(operations, st.integers(4, 24), st.booleans())
def test_random_operations_keep_the_invariants(ops, num_blocks, prefix_caching):
    pool = BlockPool(num_blocks, BLOCK, prefix_caching)
    tables: dict[int, list[int]] = {}
    tokens: dict[int, list[int]] = {}
    hashes: dict[int, list[int]] = {}
    next_owner = 0
    for op, which, length in ops:
        live = sorted(tables)
        if op == "start":
            # prompts drawn from a few shared shapes, so prefixes repeat
            prompt = [which % 3] * BLOCK * (length // BLOCK) + list(range(length % BLOCK + 1))
            hit, hit_hashes = pool.find_cached_prefix(prompt)
            assert len(hit) * BLOCK < len(prompt)  # never the last token
            fresh = -(-len(prompt) // BLOCK) - len(hit)
            reused_free = sum(pool.blocks[b].ref_cnt == 0 for b in hit)
            if not pool.can_allocate(fresh + reused_free):
                continue
            owner, next_owner = next_owner, next_owner + 1
            if hit:
                pool.touch(hit, owner)
            tables[owner] = hit + pool.allocate(fresh, owner)
            tokens[owner], hashes[owner] = prompt, list(hit_hashes)
        elif op == "append" and live:
            owner = live[which % len(live)]
            tokens[owner].append(length)
            if len(tokens[owner]) > len(tables[owner]) * BLOCK:
                if not pool.can_allocate(1):
                    continue
                tables[owner] += pool.allocate(1, owner)
        elif op == "free" and live:
            owner = live[which % len(live)]
            pool.free(tables.pop(owner), owner)
            continue
        else:
            continue
        # register every full block the owner has, as the engine does after a forward pass
        for owner in tables:
            full = len(tokens[owner]) // BLOCK
            for i in range(len(hashes[owner]), full):
                parent = hashes[owner][-1] if hashes[owner] else None
                hashes[owner].append(pool.cache_full_block(
                    tables[owner][i], parent, tuple(tokens[owner][i * BLOCK:(i + 1) * BLOCK])))
        pool.check_invariants(owners_by_block(tables))
        used = {b for table in tables.values() for b in table}
        assert pool.num_free_blocks + len(used) == pool.num_blocks
    for owner in list(tables):
        pool.free(tables.pop(owner), owner)
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
